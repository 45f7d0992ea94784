// Package worker is what a Concourse worker is to Porter: a Kubernetes API
// and a namespace that run step pods, declared by the operator, checked for
// the rights the runtime needs, and chosen per step by its tags, team and
// platform.
package worker

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// Platforms a worker may declare.
const (
	PlatformLinux   = "linux"
	PlatformWindows = "windows"
)

// Config is one worker as the operator declares it (see docs/workers.md).
type Config struct {
	// Name is the worker's name in fly and in step pods' labels.
	Name string `json:"name"`
	// Kubeconfig and Context pick the cluster; both empty means the
	// server's own (its --kubeconfig, or in-cluster when that is empty).
	Kubeconfig string `json:"kubeconfig,omitempty"`
	Context    string `json:"context,omitempty"`
	// InCluster uses the pod's service account even when the server was
	// given a kubeconfig.
	InCluster bool `json:"in_cluster,omitempty"`
	// Namespace is where the worker's step pods run.
	Namespace string `json:"namespace"`
	// Platform is linux (default) or windows.
	Platform string `json:"platform,omitempty"`
	// Tags: a step with tags runs only on a worker that has them all, and a
	// worker with tags runs only steps that ask for them (as in Concourse).
	Tags []string `json:"tags,omitempty"`
	// Team, when set, makes this a team's worker: it runs that team's steps
	// only, and that team's steps prefer it.
	Team string `json:"team,omitempty"`
	// TagPlacement says where in the cluster a tag's steps go.
	TagPlacement map[string]Placement `json:"tag_placement,omitempty"`
	// ImagePullSecrets are Secrets of Namespace every step pod pulls with.
	ImagePullSecrets []string `json:"image_pull_secrets,omitempty"`
	// BaseResourceTypes override the server's base resource type images
	// on this worker (name: image).
	BaseResourceTypes map[string]string `json:"base_resource_types,omitempty"`
	// Privileged is PrivilegedAllow to run privileged steps here (its
	// namespace must then be labelled for the "privileged" Pod Security
	// level); empty or PrivilegedDeny refuses them.
	Privileged string `json:"privileged,omitempty"`
	// TeamNamespaces gives teams a namespace of their own on this worker
	// (team: namespace). Parse turns each into a worker of that team (see
	// Expand): the team's steps run there and on no other worker, and the
	// server creates the namespace (TeamNamespace) when it registers it.
	TeamNamespaces map[string]string `json:"team_namespaces,omitempty"`

	// TeamNamespaceOf is, on a worker Expand made for a team's namespace,
	// the worker it was declared on; the server creates its namespace.
	TeamNamespaceOf string `json:"-"`
}

// TeamNamespaceWorker is the name of the worker Expand makes for team's
// namespace on worker.
func TeamNamespaceWorker(worker, team string) string { return worker + "." + team }

// Values of Config.Privileged.
const (
	PrivilegedAllow = "allow"
	PrivilegedDeny  = "deny"
)

// AllowsPrivileged says whether the worker runs privileged steps.
func (c Config) AllowsPrivileged() bool { return c.Privileged == PrivilegedAllow }

// Placement is a tag's nodeSelector and tolerations.
type Placement struct {
	NodeSelector map[string]string   `json:"node_selector,omitempty"`
	Tolerations  []corev1.Toleration `json:"tolerations,omitempty"`
}

// File is the --workers-config file.
type File struct {
	Workers []Config `json:"workers"`
}

var (
	namePattern      = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)
	namespacePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
)

// Load reads and validates a workers file. Unknown fields are refused, so
// a misspelt key is an error rather than a silently ignored setting.
func Load(path string) ([]Config, error) {
	body, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read workers file: %w", err)
	}
	return Parse(body)
}

// Parse decodes and validates a workers file's content.
func Parse(body []byte) ([]Config, error) {
	var f File
	if err := yaml.UnmarshalStrict(bytes.TrimSpace(body), &f); err != nil {
		return nil, fmt.Errorf("workers file: %w", err)
	}
	if len(f.Workers) == 0 {
		return nil, errors.New("workers file: no workers (want a list under \"workers:\")")
	}
	if err := ValidateAll(f.Workers); err != nil {
		return nil, err
	}
	ws := Expand(f.Workers)
	if err := ValidateAll(ws); err != nil {
		return nil, err
	}
	return ws, nil
}

// Expand returns the workers with, after each worker that has
// team_namespaces, one worker per team: the same cluster, platform, tags,
// placement and privileged setting, the team's namespace, that team only.
// A team with such a worker runs its steps on no other
// (Requirements.OwnNamespace), so that its steps never share a namespace
// with another team's.
func Expand(ws []Config) []Config {
	var out []Config
	for _, w := range ws {
		out = append(out, w)
		for _, team := range slices.Sorted(maps.Keys(w.TeamNamespaces)) {
			t := w
			t.Name = TeamNamespaceWorker(w.Name, team)
			t.Namespace = w.TeamNamespaces[team]
			t.Team = team
			t.TeamNamespaces = nil
			t.TeamNamespaceOf = w.Name
			out = append(out, t)
		}
	}
	return out
}

// OwnNamespace says whether team has a namespace of its own on some worker.
func OwnNamespace(ws []Config, team string) bool {
	return slices.ContainsFunc(ws, func(w Config) bool { return w.TeamNamespaceOf != "" && w.Team == team })
}

// ValidateAll validates every worker and that names are unique.
func ValidateAll(ws []Config) error {
	var errs []error
	seen := map[string]bool{}
	for i := range ws {
		if err := ws[i].Validate(); err != nil {
			errs = append(errs, err)
		}
		if seen[ws[i].Name] {
			errs = append(errs, fmt.Errorf("worker %q is declared twice", ws[i].Name))
		}
		seen[ws[i].Name] = true
	}
	return errors.Join(errs...)
}

// Validate checks one worker's declaration and fills in the defaults.
func (c *Config) Validate() error {
	if !namePattern.MatchString(c.Name) {
		return fmt.Errorf("worker name %q: use lowercase letters, digits, '-', '_' and '.', starting with a letter or digit (at most 63)", c.Name)
	}
	var errs []error
	if !namespacePattern.MatchString(c.Namespace) {
		errs = append(errs, fmt.Errorf("namespace %q is not a Kubernetes namespace name", c.Namespace))
	}
	switch c.Platform {
	case "":
		c.Platform = PlatformLinux
	case PlatformLinux, PlatformWindows:
	default:
		errs = append(errs, fmt.Errorf("platform %q: want linux or windows", c.Platform))
	}
	if c.InCluster && (c.Kubeconfig != "" || c.Context != "") {
		errs = append(errs, errors.New("in_cluster and kubeconfig/context exclude each other"))
	}
	for _, t := range c.Tags {
		if t == "" {
			errs = append(errs, errors.New("an empty tag"))
		}
	}
	for tag := range c.TagPlacement {
		if !slices.Contains(c.Tags, tag) {
			errs = append(errs, fmt.Errorf("tag_placement for %q, which is not one of the worker's tags %v", tag, c.Tags))
		}
	}
	switch c.Privileged {
	case "", PrivilegedAllow, PrivilegedDeny:
		if c.Privileged == PrivilegedAllow && c.Platform == PlatformWindows {
			errs = append(errs, errors.New("privileged: allow on a windows worker (Windows containers cannot be privileged)"))
		}
	default:
		errs = append(errs, fmt.Errorf("privileged %q: want allow or deny", c.Privileged))
	}
	if c.Team != "" && !namePattern.MatchString(c.Team) {
		errs = append(errs, fmt.Errorf("team %q is not a team name", c.Team))
	}
	if len(c.TeamNamespaces) > 0 {
		if c.Team != "" {
			errs = append(errs, fmt.Errorf("team_namespaces on team %s's worker (a team worker runs one team's steps only)", c.Team))
		}
		if len(c.ImagePullSecrets) > 0 {
			// They are Secrets of the worker's namespace, absent from the teams'.
			errs = append(errs, errors.New("team_namespaces with image_pull_secrets (Secrets of one namespace)"))
		}
	}
	seen := map[string]string{c.Namespace: "the worker"}
	for _, team := range slices.Sorted(maps.Keys(c.TeamNamespaces)) {
		ns := c.TeamNamespaces[team]
		switch {
		case !namePattern.MatchString(team):
			errs = append(errs, fmt.Errorf("team_namespaces: team %q is not a team name", team))
		case !namespacePattern.MatchString(ns):
			errs = append(errs, fmt.Errorf("team_namespaces: namespace %q of team %s is not a Kubernetes namespace name", ns, team))
		case seen[ns] != "":
			errs = append(errs, fmt.Errorf("team_namespaces: namespace %q of team %s is also %s's", ns, team, seen[ns]))
		case len(TeamNamespaceWorker(c.Name, team)) > 63:
			errs = append(errs, fmt.Errorf("team_namespaces: worker name %q (worker.team) is longer than 63", TeamNamespaceWorker(c.Name, team)))
		}
		if seen[ns] == "" {
			seen[ns] = "team " + team
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("worker %s: %w", c.Name, err)
	}
	return nil
}

// RESTConfig is how to reach the worker's API server. fallback is the
// server's own kubeconfig path ("" for in-cluster), used when the worker
// names neither a kubeconfig nor in_cluster.
func (c Config) RESTConfig(fallback string) (*rest.Config, error) {
	var (
		rc  *rest.Config
		err error
	)
	path := c.Kubeconfig
	if path == "" && !c.InCluster {
		path = fallback
	}
	if c.InCluster || path == "" {
		rc, err = rest.InClusterConfig()
	} else {
		rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: path},
			&clientcmd.ConfigOverrides{CurrentContext: c.Context}).ClientConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("worker %s: load Kubernetes config: %w", c.Name, err)
	}
	rc.QPS, rc.Burst = 50, 100
	return rc, nil
}
