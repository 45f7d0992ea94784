package concourse

import "encoding/json"

// Config is a pipeline's config: what `fly set-pipeline` sends (as YAML) and
// `fly get-pipeline` shows (as JSON under "config").
type Config struct {
	Groups        []GroupConfig    `json:"groups,omitempty"`
	VarSources    []map[string]any `json:"var_sources,omitempty"`
	Resources     []ResourceConfig `json:"resources,omitempty"`
	ResourceTypes []ResourceType   `json:"resource_types,omitempty"`
	Prototypes    []map[string]any `json:"prototypes,omitempty"`
	Jobs          []JobConfig      `json:"jobs,omitempty"`
	Display       map[string]any   `json:"display,omitempty"`
}

// GroupConfig is a tab of jobs in the web UI.
type GroupConfig struct {
	Name      string   `json:"name"`
	Jobs      []string `json:"jobs,omitempty"`
	Resources []string `json:"resources,omitempty"`
}

// ResourceConfig is one entry of a pipeline's resources.
type ResourceConfig struct {
	Name                 string            `json:"name"`
	OldName              string            `json:"old_name,omitempty"`
	Public               bool              `json:"public,omitempty"`
	WebhookToken         string            `json:"webhook_token,omitempty"`
	Type                 string            `json:"type"`
	Source               map[string]any    `json:"source"`
	CheckEvery           string            `json:"check_every,omitempty"`
	CheckTimeout         string            `json:"check_timeout,omitempty"`
	Tags                 []string          `json:"tags,omitempty"`
	Version              map[string]string `json:"version,omitempty"`
	Icon                 string            `json:"icon,omitempty"`
	ExposeBuildCreatedBy bool              `json:"expose_build_created_by,omitempty"`
}

// ResourceType is one entry of a pipeline's resource_types: a type whose
// image is itself fetched by a resource (usually registry-image).
type ResourceType struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Source     map[string]any `json:"source"`
	Defaults   map[string]any `json:"defaults,omitempty"`
	Privileged bool           `json:"privileged,omitempty"`
	CheckEvery string         `json:"check_every,omitempty"`
	Tags       []string       `json:"tags,omitempty"`
	Params     map[string]any `json:"params,omitempty"`
}

// JobConfig is one job of a pipeline.
type JobConfig struct {
	Name                 string   `json:"name"`
	OldName              string   `json:"old_name,omitempty"`
	Public               bool     `json:"public,omitempty"`
	DisableManualTrigger bool     `json:"disable_manual_trigger,omitempty"`
	Serial               bool     `json:"serial,omitempty"`
	Interruptible        bool     `json:"interruptible,omitempty"`
	SerialGroups         []string `json:"serial_groups,omitempty"`
	// MaxInFlight is the number, or absent (any number).
	MaxInFlight       int             `json:"max_in_flight,omitempty"`
	BuildLogsToRetain int             `json:"build_logs_to_retain,omitempty"`
	BuildLogRetention json.RawMessage `json:"build_log_retention,omitempty"`

	OnSuccess *Step `json:"on_success,omitempty"`
	OnFailure *Step `json:"on_failure,omitempty"`
	OnAbort   *Step `json:"on_abort,omitempty"`
	OnError   *Step `json:"on_error,omitempty"`
	Ensure    *Step `json:"ensure,omitempty"`

	Plan []Step `json:"plan"`
}

// Step is one step of a job's plan, flattened: exactly one of the step
// kinds (Get, Put, Task, SetPipeline, LoadVar, InParallel, Do, Try) is set,
// and any of the modifiers (Timeout, Attempts, Tags, Across, the hooks) may
// be. Keys are Concourse's; a key that belongs to no kind present is an
// error (see pkg/pipeline).
type Step struct {
	// get
	Get     string         `json:"get,omitempty"`
	Passed  []string       `json:"passed,omitempty"`
	Trigger bool           `json:"trigger,omitempty"`
	Version *VersionConfig `json:"version,omitempty"`

	// put
	Put       string          `json:"put,omitempty"`
	Inputs    json.RawMessage `json:"inputs,omitempty"` // "all", "detect" or a list of names
	GetParams map[string]any  `json:"get_params,omitempty"`
	NoGet     bool            `json:"no_get,omitempty"`
	// RestartOnPodLoss (Porter's): the put may run again in a new pod when
	// its pod is lost under it. Off by default, as a put may have had its
	// effect before the loss; tasks, gets and checks always may.
	RestartOnPodLoss bool `json:"restart_on_pod_loss,omitempty"`

	// get and put: the resource, when the step's name is not it.
	Resource string `json:"resource,omitempty"`

	// task
	Task          string            `json:"task,omitempty"`
	File          string            `json:"file,omitempty"` // also set_pipeline, load_var
	Config        json.RawMessage   `json:"config,omitempty"`
	Image         string            `json:"image,omitempty"`
	Privileged    bool              `json:"privileged,omitempty"`
	Hermetic      bool              `json:"hermetic,omitempty"`
	Limits        json.RawMessage   `json:"container_limits,omitempty"`
	InputMapping  map[string]string `json:"input_mapping,omitempty"`
	OutputMapping map[string]string `json:"output_mapping,omitempty"`

	// get, put and task
	Params map[string]any `json:"params,omitempty"`
	// task and set_pipeline
	Vars map[string]any `json:"vars,omitempty"`

	// set_pipeline and load_var are parsed so pipelines that use them
	// validate; this server refuses to run them by name.
	SetPipeline  string         `json:"set_pipeline,omitempty"`
	Team         string         `json:"team,omitempty"`
	VarFiles     []string       `json:"var_files,omitempty"`
	InstanceVars map[string]any `json:"instance_vars,omitempty"`
	LoadVar      string         `json:"load_var,omitempty"`
	Format       string         `json:"format,omitempty"`
	Reveal       bool           `json:"reveal,omitempty"`

	// composites
	InParallel *InParallelConfig `json:"in_parallel,omitempty"`
	Do         []Step            `json:"do,omitempty"`
	Try        *Step             `json:"try,omitempty"`

	// modifiers
	Timeout  string          `json:"timeout,omitempty"`
	Attempts int             `json:"attempts,omitempty"`
	Tags     []string        `json:"tags,omitempty"`
	Across   json.RawMessage `json:"across,omitempty"`
	FailFast bool            `json:"fail_fast,omitempty"` // with across

	OnSuccess *Step `json:"on_success,omitempty"`
	OnFailure *Step `json:"on_failure,omitempty"`
	OnAbort   *Step `json:"on_abort,omitempty"`
	OnError   *Step `json:"on_error,omitempty"`
	Ensure    *Step `json:"ensure,omitempty"`
}

// InParallelConfig is in_parallel: a list of steps, or {steps, limit,
// fail_fast}. It is written back in the object form.
type InParallelConfig struct {
	Steps    []Step `json:"steps,omitempty"`
	Limit    int    `json:"limit,omitempty"`
	FailFast bool   `json:"fail_fast,omitempty"`
}

// VersionConfig is a get step's version: "latest", "every", or a pinned
// version ({"ref": "abc"}).
type VersionConfig struct {
	Latest bool
	Every  bool
	Pinned map[string]string
}

// Version strategies as written in YAML.
const (
	VersionLatest = "latest"
	VersionEvery  = "every"
)

// MarshalJSON writes "latest", "every" or the pinned version.
func (v VersionConfig) MarshalJSON() ([]byte, error) {
	switch {
	case v.Every:
		return json.Marshal(VersionEvery)
	case v.Pinned != nil:
		return json.Marshal(v.Pinned)
	default:
		return json.Marshal(VersionLatest)
	}
}

// UnmarshalJSON reads "latest", "every" or a version object.
func (v *VersionConfig) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		switch s {
		case VersionLatest:
			*v = VersionConfig{Latest: true}
			return nil
		case VersionEvery:
			*v = VersionConfig{Every: true}
			return nil
		}
		return &json.UnsupportedValueError{Str: "version must be \"latest\", \"every\" or a version, not " + s}
	}
	var m map[string]string
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	*v = VersionConfig{Pinned: m}
	return nil
}

// Pipeline is a pipeline as the API lists it.
type Pipeline struct {
	ID            int64          `json:"id"`
	Name          string         `json:"name"`
	InstanceVars  map[string]any `json:"instance_vars,omitempty"`
	Paused        bool           `json:"paused"`
	PausedBy      string         `json:"paused_by,omitempty"`
	PausedAt      int64          `json:"paused_at,omitempty"`
	Public        bool           `json:"public"`
	Archived      bool           `json:"archived"`
	Groups        []GroupConfig  `json:"groups,omitempty"`
	TeamName      string         `json:"team_name"`
	Display       map[string]any `json:"display,omitempty"`
	ParentBuildID int64          `json:"parent_build_id,omitempty"`
	ParentJobID   int64          `json:"parent_job_id,omitempty"`
	LastUpdated   int64          `json:"last_updated,omitempty"`
}

// Job is a job as the API lists it.
type Job struct {
	ID                   int64          `json:"id"`
	Name                 string         `json:"name"`
	TeamName             string         `json:"team_name"`
	PipelineID           int64          `json:"pipeline_id"`
	PipelineName         string         `json:"pipeline_name"`
	PipelineInstanceVars map[string]any `json:"pipeline_instance_vars,omitempty"`
	Paused               bool           `json:"paused,omitempty"`
	PausedBy             string         `json:"paused_by,omitempty"`
	PausedAt             int64          `json:"paused_at,omitempty"`
	HasNewInputs         bool           `json:"has_new_inputs,omitempty"`
	Groups               []string       `json:"groups,omitempty"`
	DisableManualTrigger bool           `json:"disable_manual_trigger,omitempty"`
	FirstLoggedBuildID   int64          `json:"first_logged_build_id,omitempty"`
	FinishedBuild        *Build         `json:"finished_build,omitempty"`
	NextBuild            *Build         `json:"next_build,omitempty"`
	TransitionBuild      *Build         `json:"transition_build,omitempty"`
	Inputs               []JobInput     `json:"inputs,omitempty"`
	Outputs              []JobOutput    `json:"outputs,omitempty"`
}

// JobInput is a get step of a job, as the API lists it.
type JobInput struct {
	Name     string   `json:"name"`
	Resource string   `json:"resource"`
	Passed   []string `json:"passed,omitempty"`
	Trigger  bool     `json:"trigger,omitempty"`
}

// JobOutput is a put step of a job, as the API lists it.
type JobOutput struct {
	Name     string `json:"name"`
	Resource string `json:"resource"`
}

// Resource is a pipeline's resource as the API lists it.
type Resource struct {
	ID                   int64             `json:"id"`
	Name                 string            `json:"name"`
	PipelineID           int64             `json:"pipeline_id"`
	PipelineName         string            `json:"pipeline_name"`
	PipelineInstanceVars map[string]any    `json:"pipeline_instance_vars,omitempty"`
	TeamName             string            `json:"team_name"`
	Type                 string            `json:"type"`
	LastChecked          int64             `json:"last_checked,omitempty"`
	Icon                 string            `json:"icon,omitempty"`
	PinnedVersion        map[string]string `json:"pinned_version,omitempty"`
	PinnedInConfig       bool              `json:"pinned_in_config,omitempty"`
	PinComment           string            `json:"pin_comment,omitempty"`
	Build                *Build            `json:"build,omitempty"`
}

// MetadataField is one line of a version's metadata.
type MetadataField struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// ResourceVersion is one version of a resource as the API lists it.
type ResourceVersion struct {
	ID       int64             `json:"id"`
	Version  map[string]string `json:"version"`
	Metadata []MetadataField   `json:"metadata,omitempty"`
	Enabled  bool              `json:"enabled"`
}

// Each calls f for s and every step nested in it (in_parallel, do, try and
// the hooks), parents before children.
func (s *Step) Each(f func(*Step)) {
	if s == nil {
		return
	}
	f(s)
	if s.InParallel != nil {
		for i := range s.InParallel.Steps {
			s.InParallel.Steps[i].Each(f)
		}
	}
	for i := range s.Do {
		s.Do[i].Each(f)
	}
	for _, next := range []*Step{s.Try, s.OnSuccess, s.OnFailure, s.OnAbort, s.OnError, s.Ensure} {
		next.Each(f)
	}
}

// EachStep calls f for every step of the job's plan and then of its hooks.
func (j *JobConfig) EachStep(f func(*Step)) {
	for i := range j.Plan {
		j.Plan[i].Each(f)
	}
	for _, h := range []*Step{j.OnSuccess, j.OnFailure, j.OnAbort, j.OnError, j.Ensure} {
		h.Each(f)
	}
}
