package stepplan

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/podspec"
)

// Where a resource step's scripts run, as Concourse's.
const (
	resourceDir = "/tmp/build"
	getDir      = "get" // under resourceDir: what in fetches into
	putDir      = "/tmp/build/put"
	checkDir    = "/tmp/build/check"
)

// Identity is what every action of a build's step carries: its build, and
// how long its pod stays interceptible once it ends.
type Identity struct {
	Build     action.Build
	BuildID   int64
	KeepAlive time.Duration
}

// StepID is a new step ID for a step named name of the build: unique,
// readable, DNS-label safe (it names the pod).
func (id Identity) StepID(name string) string {
	return fmt.Sprintf("b%d-%s-%s", id.BuildID, podspec.LabelValue(strings.ToLower(name)), RandomSuffix())
}

// RandomSuffix is 6 random hex digits.
func RandomSuffix() string {
	b := make([]byte, 3)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Resource is what a check, get or put step's action is made of.
type Resource struct {
	Kind       concourse.StepKind
	Name       string
	Image      string
	Tags       []string
	Privileged bool
	Timeout    time.Duration
	// Env is the environment in and out get (ResourceEnv).
	Env map[string]string
	// Inputs are a put's artifacts.
	Inputs []action.Input
}

// ResourceAction is the action of a resource step: its type's script for
// its kind (check, in or out), in Concourse's directories, the request on
// stdin from the step's Secret (it holds the source's credentials).
func ResourceAction(id Identity, r Resource) (*action.Action, error) {
	name := r.Name
	if name == "" {
		name = string(r.Kind)
	}
	a := &action.Action{
		StepID:   id.StepID(name),
		Build:    id.Build,
		StepName: name,
		Type:     action.Kind(r.Kind),
		Tags:     r.Tags,
		Image:    r.Image,
		// Resource type images are pinned or built locally: pulled once.
		ImagePullPolicy: string(corev1.PullIfNotPresent),
		Privileged:      r.Privileged,
		Timeout:         action.Duration{Duration: r.Timeout},
		KeepAlive:       action.Duration{Duration: id.KeepAlive},
		StdinSecret:     true,
	}
	switch r.Kind {
	case concourse.KindCheck:
		a.WorkDir = checkDir
		a.Run = action.Run{Path: "/opt/resource/check"}
	case concourse.KindGet:
		a.WorkDir = resourceDir
		a.Run = action.Run{Path: "/opt/resource/in", Args: []string{resourceDir + "/" + getDir}}
		a.Outputs = []action.Output{{Name: name, Path: getDir}}
		a.Params = r.Env
	case concourse.KindPut:
		a.WorkDir = putDir
		a.Run = action.Run{Path: "/opt/resource/out", Args: []string{putDir}}
		a.Params = r.Env
		a.Inputs = r.Inputs
	default:
		return nil, fmt.Errorf("%s %q is not a resource step", r.Kind, name)
	}
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return a, nil
}

// ResourceEnv is the environment Concourse gives in and out.
func ResourceEnv(b action.Build, externalURL string) map[string]string {
	return map[string]string{
		"BUILD_ID":         b.ID,
		"BUILD_NAME":       b.Name,
		"BUILD_TEAM_NAME":  b.Team,
		"ATC_EXTERNAL_URL": externalURL,
	}
}

// PutInputs are the artifacts a put gets of the build's (all): all of
// them, the ones its params name ("detect", the default) or a list.
func PutInputs(pp *concourse.PutPlan, all map[string]api.ArtifactRef) ([]action.Input, error) {
	var names []string
	raw := strings.TrimSpace(string(pp.Inputs))
	switch raw {
	case "", "null", `"detect"`:
		seen := map[string]bool{}
		DetectInputs(pp.Params, func(name string) {
			if _, ok := all[name]; ok && !seen[name] {
				seen[name] = true
				names = append(names, name)
			}
		})
	case `"all"`:
		names = slices.Collect(maps.Keys(all))
	default:
		if err := json.Unmarshal(pp.Inputs, &names); err != nil {
			return nil, fmt.Errorf("put %q: inputs must be \"all\", \"detect\" or a list of names: %s", pp.Name, raw)
		}
		var missing []string
		for _, n := range names {
			if _, ok := all[n]; !ok {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			return nil, fmt.Errorf("put %q: missing inputs: %s", pp.Name, strings.Join(missing, ", "))
		}
	}
	sort.Strings(names)
	var inputs []action.Input
	for _, n := range names {
		a := all[n]
		inputs = append(inputs, action.Input{Name: n, Path: n, Key: a.Key, Digest: a.Digest})
	}
	return inputs, nil
}
