// Package action defines a step's resolved action: everything a step pod needs
// to run one step, decided by the ATC before the pod exists. The ATC writes it
// into the pod spec (so `kubectl get pod -o yaml` shows what ran) and the
// sidecar reads it back. Secret values never appear here.
package action

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
)

// EnvVar is the environment variable that carries the JSON action into the
// sidecar container.
const EnvVar = "PORTER_ACTION"

// StdinFileEnvVar names the file the sidecar reads a secret stdin from.
const StdinFileEnvVar = "PORTER_STDIN_FILE"

// Action is one resolved step.
type Action struct {
	// StepID is unique across all builds; it names the pod, the Secret and the
	// step's audit prefix. DNS-label safe.
	StepID string `json:"step_id"`
	Build  Build  `json:"build"`
	// StepName is the step's name in the plan (e.g. the task's name).
	StepName string `json:"step_name"`
	// Type is the kind of step.
	Type  Kind   `json:"type"`
	Image string `json:"image"`
	// ImagePullPolicy, when set, overrides the worker's for the step's
	// image (resource types' images are pulled IfNotPresent).
	ImagePullPolicy string `json:"image_pull_policy,omitempty"`
	Run             Run    `json:"run"`
	// Params are plain environment variables for the process. Secret ones
	// travel through the step's Secret and are listed by name only.
	Params       map[string]string `json:"params,omitempty"`
	SecretParams []string          `json:"secret_params,omitempty"`
	// WorkDir is the absolute directory inputs, outputs and caches live under,
	// /tmp/build/<id> in a pod.
	WorkDir    string   `json:"work_dir"`
	Inputs     []Input  `json:"inputs,omitempty"`
	Outputs    []Output `json:"outputs,omitempty"`
	Caches     []Cache  `json:"caches,omitempty"`
	Limits     Limits   `json:"limits,omitempty"`
	Privileged bool     `json:"privileged,omitempty"`
	// Timeout bounds the process's run time; zero means none.
	Timeout Duration `json:"timeout,omitempty"`
	// KeepAlive is how long the finished step stays interceptible before the
	// pod ends on its own; zero means it ends as soon as it has reported.
	KeepAlive Duration `json:"keep_alive,omitempty"`
	// Stdin, when set, is given to the process on stdin.
	Stdin *string `json:"stdin,omitempty"`
	// StdinSecret says the process's stdin is in the step's Secret rather
	// than here: a resource step's request holds the resource's source,
	// credentials included. The sidecar reads it from StdinFileEnvVar.
	StdinSecret bool `json:"stdin_secret,omitempty"`
	// Platform is the platform the step's image runs on: "linux" (also
	// when empty) or "windows". A task's comes from its config; a resource
	// step's from the worker's base resource type.
	Platform string `json:"platform,omitempty"`
	// Tags are the worker tags the step asked for (`tags:`, fly execute
	// --tag); the worker maps each to node placement. An empty tag is no
	// tag, as in worker selection.
	Tags []string `json:"tags,omitempty"`
	// Telemetry, when set, has the sidecar export its spans.
	Telemetry *Telemetry `json:"telemetry,omitempty"`
	// Idle: the step's process (Run) is never started. The main container
	// only serves the sessions the ATC opens over the sidecar's stream,
	// for the step's keep-alive: the ATC's check pods run each check as
	// one (see pkg/atc/exec/checkpool.go).
	Idle bool `json:"idle,omitempty"`
	// ATCLinkInsecure lets the sidecar reach the ATC without TLS: set only
	// by a server run with --insecure-grpc (tests). Without it a sidecar
	// given no CA refuses to dial rather than send its token in plain text.
	ATCLinkInsecure bool `json:"atc_link_insecure,omitempty"`
	// Gated: the pod was declared ahead of the step's turn, while earlier
	// steps of its build still ran. The sidecar fetches the inputs whose
	// keys are here, then waits for the server's go-ahead (Proceed), which
	// gives the keys of the inputs that name the step they come from
	// (Input.From); or for an abort, when the step is not to run after all.
	Gated bool `json:"gated,omitempty"`
}

// Platforms a step or a worker runs on.
const (
	PlatformLinux   = "linux"
	PlatformWindows = "windows"
)

// OS is the step's platform, empty meaning linux.
func (a *Action) OS() string {
	if a.Platform == "" {
		return PlatformLinux
	}
	return a.Platform
}

// Telemetry is how a step's sidecar joins the server's trace.
type Telemetry struct {
	// TraceParent is the W3C traceparent of the step's span: the sidecar's
	// spans are its children.
	TraceParent string `json:"traceparent,omitempty"`
	// OTLPEndpoint is the OTLP/gRPC endpoint URL the pod exports to
	// (http:// for no TLS).
	OTLPEndpoint string `json:"otlp_endpoint,omitempty"`
}

// Build identifies the build a step belongs to.
type Build struct {
	ID       string `json:"id"`
	Name     string `json:"name,omitempty"`
	Team     string `json:"team"`
	Pipeline string `json:"pipeline,omitempty"`
	Job      string `json:"job,omitempty"`
	// AuditID names the build's audit records (builds/<AuditID>/): its ID
	// and when it was created, so that a build whose ID an earlier one had
	// (a database reset or restored from a backup) does not write into
	// that one's write-once records. Empty: ID, as before.
	AuditID string `json:"audit_id,omitempty"`
}

// AuditDir is the build's segment of its audit keys.
func (b Build) AuditDir() string {
	if b.AuditID != "" {
		return b.AuditID
	}
	return b.ID
}

// Run is the process to start.
type Run struct {
	Path string   `json:"path"`
	Args []string `json:"args,omitempty"`
	// Dir is relative to WorkDir (or absolute).
	Dir string `json:"dir,omitempty"`
	// User is a numeric uid[:gid] or a name from the image's /etc/passwd.
	User string `json:"user,omitempty"`
}

// Input is an artifact fetched into WorkDir/Path before the process starts.
type Input struct {
	Name string `json:"name"`
	Path string `json:"path"`
	// Key is the artifact's blobstore key; empty only for an optional input
	// nobody provided (the directory is then left out).
	Key string `json:"key,omitempty"`
	// Digest is "<algorithm>:<hex>" of the stored artifact ("blake3:", or
	// "sha256:" for artifacts stored before BLAKE3), checked on download.
	Digest   string `json:"digest,omitempty"`
	Optional bool   `json:"optional,omitempty"`
	// From names the build's artifact an earlier step is still to make
	// (a gated step's only): its key comes with the go-ahead.
	From string `json:"from,omitempty"`
}

// Output is a directory uploaded as an artifact after a successful process.
type Output struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// Cache is a directory restored before the process starts (when Key exists)
// and saved after it succeeds.
type Cache struct {
	Path string `json:"path"`
	Key  string `json:"key"`
}

// Limits are the task's container_limits.
type Limits struct {
	CPUShares   *uint64 `json:"cpu,omitempty"`
	MemoryBytes *uint64 `json:"memory,omitempty"`
}

// Duration is a time.Duration written as Go duration text ("1h30m") in JSON.
type Duration struct{ time.Duration }

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"1h30m\": %w", err)
	}
	if s == "" {
		d.Duration = 0
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	d.Duration = v
	return nil
}

// Decode parses and validates a JSON action.
func Decode(data []byte) (*Action, error) {
	var a Action
	if err := json.Unmarshal(data, &a); err != nil {
		return nil, fmt.Errorf("decode action: %w", err)
	}
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return &a, nil
}

// Encode renders the action as compact JSON.
func (a *Action) Encode() ([]byte, error) { return json.Marshal(a) }

// Validate checks what the sidecar and the pod spec rely on.
func (a *Action) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if a.StepID == "" {
		bad("step_id is empty")
	}
	if a.Run.Path == "" {
		bad("run.path is empty")
	}
	if !path.IsAbs(a.WorkDir) {
		bad("work_dir %q is not absolute", a.WorkDir)
	}
	// Paths are claimed per kind: an output may share its path with an input
	// (Concourse's way of modifying an input in place), but no two inputs, no
	// two outputs and no two caches may share one, and a cache may share with
	// nothing.
	inputPaths := map[string]string{}
	outputPaths := map[string]string{}
	cachePaths := map[string]string{}
	claim := func(kind, name, p string, own map[string]string, others ...map[string]string) {
		if err := CheckRelPath(p); err != nil {
			bad("%s %q: %v", kind, name, err)
			return
		}
		clean := path.Clean(p)
		for _, m := range append([]map[string]string{own}, others...) {
			if other, ok := m[clean]; ok {
				bad("%s %q: path %q is already used by %s", kind, name, p, other)
				return
			}
		}
		own[clean] = fmt.Sprintf("%s %q", kind, name)
	}
	for _, in := range a.Inputs {
		claim("input", in.Name, in.Path, inputPaths)
		switch {
		case in.From != "" && !a.Gated:
			bad("input %q comes from step %q, but the step is not gated: nothing would give its key", in.Name, in.From)
		case in.From != "" && in.Key != "":
			bad("input %q has both a key and the step it comes from", in.Name)
		case in.Key == "" && in.From == "" && !in.Optional:
			bad("input %q has no artifact", in.Name)
		}
	}
	for _, out := range a.Outputs {
		claim("output", out.Name, out.Path, outputPaths)
	}
	for _, c := range a.Caches {
		claim("cache", c.Path, c.Path, cachePaths, inputPaths, outputPaths)
		if c.Key == "" {
			bad("cache %q has no key", c.Path)
		}
	}
	if a.Stdin != nil && a.StdinSecret {
		bad("stdin is given both in the action and in the step's Secret")
	}
	switch a.ImagePullPolicy {
	case "", "Always", "IfNotPresent", "Never":
	default:
		bad("image_pull_policy %q: want Always, IfNotPresent or Never", a.ImagePullPolicy)
	}
	switch a.Platform {
	case "", PlatformLinux, PlatformWindows:
	default:
		bad("platform %q: want linux or windows", a.Platform)
	}
	if a.Timeout.Duration < 0 {
		bad("timeout %s is negative", a.Timeout)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid action: %w", err)
	}
	return nil
}

// CheckRelPath refuses paths that would leave the work directory.
func CheckRelPath(p string) error {
	switch {
	case p == "":
		return errors.New("path is empty")
	case path.IsAbs(p):
		return fmt.Errorf("path %q must be relative", p)
	}
	clean := path.Clean(p)
	if clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
		return fmt.Errorf("path %q leaves the working directory", p)
	}
	return nil
}

// Dir resolves a path of the action (input, output, cache, run.dir) against WorkDir.
func (a *Action) Dir(p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	return path.Join(a.WorkDir, p)
}

// Kind is the kind of step an action runs: a task's process, or one of a
// resource type's scripts.
type Kind string

// The kinds of actions (the names of the plan steps that run them).
const (
	KindTask  Kind = "task"
	KindGet   Kind = "get"
	KindPut   Kind = "put"
	KindCheck Kind = "check"
)

// Script is the resource script an action of kind k runs ("check", "in",
// "out"), or "" for a task.
func (k Kind) Script() string {
	switch k {
	case KindCheck:
		return "check"
	case KindGet:
		return "in"
	case KindPut:
		return "out"
	}
	return ""
}
