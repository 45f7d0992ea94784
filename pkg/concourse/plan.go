package concourse

import "encoding/json"

// PlanID names a step of a build plan; events carry it as origin.id.
type PlanID string

// Plan is one node of a build plan, as `fly execute` and the scheduler
// write it: exactly one of the step fields is set.
type Plan struct {
	ID       PlanID `json:"id"`
	Attempts []int  `json:"attempts,omitempty"`

	Get   *GetPlan   `json:"get,omitempty"`
	Put   *PutPlan   `json:"put,omitempty"`
	Check *CheckPlan `json:"check,omitempty"`
	Task  *TaskPlan  `json:"task,omitempty"`

	Do         *DoPlan         `json:"do,omitempty"`
	InParallel *InParallelPlan `json:"in_parallel,omitempty"`
	Across     *AcrossPlan     `json:"across,omitempty"`

	OnSuccess *HookPlan `json:"on_success,omitempty"`
	OnFailure *HookPlan `json:"on_failure,omitempty"`
	OnAbort   *HookPlan `json:"on_abort,omitempty"`
	OnError   *HookPlan `json:"on_error,omitempty"`
	Ensure    *HookPlan `json:"ensure,omitempty"`

	Try     *TryPlan     `json:"try,omitempty"`
	Timeout *TimeoutPlan `json:"timeout,omitempty"`
	Retry   *DoPlan      `json:"retry,omitempty"`

	// Used by `fly execute`: an uploaded directory as an input, and an
	// output to download when the build ends.
	ArtifactInput  *ArtifactInputPlan  `json:"artifact_input,omitempty"`
	ArtifactOutput *ArtifactOutputPlan `json:"artifact_output,omitempty"`

	SetPipeline *SetPipelinePlan `json:"set_pipeline,omitempty"`
	LoadVar     *LoadVarPlan     `json:"load_var,omitempty"`

	// Run (prototypes) is not run by this server yet; kept to refuse it
	// by name.
	Run json.RawMessage `json:"run,omitempty"`
}

// LoadVarPlan reads a file of an artifact into the local var Name,
// usable as ((.:Name)) by the later steps of the build.
type LoadVarPlan struct {
	Name string `json:"name"`
	File string `json:"file"`
	// Format is json, yaml (yml), trim or raw; "" picks it by the file's
	// extension, trim for any other.
	Format string `json:"format,omitempty"`
	// Reveal keeps the value out of the build log's redaction.
	Reveal bool `json:"reveal,omitempty"`
}

// SetPipelinePlan saves a pipeline's config from a file of an artifact.
type SetPipelinePlan struct {
	// Name is the pipeline, "self" for the build's own.
	Name         string         `json:"name"`
	File         string         `json:"file"`
	Team         string         `json:"team,omitempty"`
	Vars         map[string]any `json:"vars,omitempty"`
	VarFiles     []string       `json:"var_files,omitempty"`
	InstanceVars map[string]any `json:"instance_vars,omitempty"`
}

// AcrossPlan runs its substep once for every combination of its vars'
// values, each as the local vars ((.:name)) of that run.
type AcrossPlan struct {
	Vars []AcrossVar `json:"vars"`
	// SubStepTemplate is the substep's plan as JSON, its ((.:vars)) not
	// yet filled in; every run gets its own copy with its own ids.
	SubStepTemplate string `json:"substep_template"`
	FailFast        bool   `json:"fail_fast,omitempty"`
}

// AcrossVar is one var of an across step: its values (a list, or a
// ((var)) that is one) and how many of them run at once (0: all).
type AcrossVar struct {
	Var         string `json:"name"`
	Values      any    `json:"values,omitempty"`
	MaxInFlight int    `json:"max_in_flight,omitempty"`
}

// DoPlan runs steps in order.
type DoPlan []Plan

// InParallelPlan runs steps at once.
type InParallelPlan struct {
	Steps    []Plan `json:"steps"`
	Limit    int    `json:"limit,omitempty"`
	FailFast bool   `json:"fail_fast,omitempty"`
}

// HookPlan is on_success, on_failure, on_abort, on_error and ensure: Next
// runs after Step under the hook's condition. In JSON the hook's step is
// named after the hook ({"step": ..., "ensure": ...}), see MarshalJSON.
type HookPlan struct {
	Step Plan
	Next Plan
	// Hook is the JSON name of Next ("ensure", "on_success", ...).
	Hook string
}

// TryPlan runs a step and succeeds whatever it does.
type TryPlan struct {
	Step Plan `json:"step"`
}

// TimeoutPlan bounds a step's duration.
type TimeoutPlan struct {
	Step     Plan   `json:"step"`
	Duration string `json:"duration"`
}

// ArtifactInputPlan names an uploaded artifact in the build.
type ArtifactInputPlan struct {
	ArtifactID int64  `json:"artifact_id"`
	Name       string `json:"name"`
}

// ArtifactOutputPlan keeps an artifact of the build for download.
type ArtifactOutputPlan struct {
	Name string `json:"name"`
}

// TaskPlan runs a task.
type TaskPlan struct {
	Name       string   `json:"name"`
	Privileged bool     `json:"privileged"`
	Hermetic   bool     `json:"hermetic"`
	Tags       []string `json:"tags,omitempty"`
	ConfigPath string   `json:"config_path,omitempty"`
	// Config is the task config (Concourse's task file, as JSON).
	Config            json.RawMessage   `json:"config,omitempty"`
	Limits            json.RawMessage   `json:"container_limits,omitempty"`
	ImageArtifactName string            `json:"image,omitempty"`
	Vars              map[string]any    `json:"vars,omitempty"`
	Params            map[string]any    `json:"params,omitempty"`
	InputMapping      map[string]string `json:"input_mapping,omitempty"`
	OutputMapping     map[string]string `json:"output_mapping,omitempty"`
	Timeout           string            `json:"timeout,omitempty"`
	ResourceTypes     json.RawMessage   `json:"resource_types,omitempty"`
}

// TypeImage says how a resource step's image is obtained.
type TypeImage struct {
	CheckPlan  *Plan  `json:"check_plan,omitempty"`
	GetPlan    *Plan  `json:"get_plan,omitempty"`
	BaseType   string `json:"base_type,omitempty"`
	Privileged bool   `json:"privileged,omitempty"`
}

// GetPlan fetches a resource version.
type GetPlan struct {
	Name        string            `json:"name,omitempty"`
	Type        string            `json:"type"`
	Source      map[string]any    `json:"source"`
	TypeImage   TypeImage         `json:"image"`
	Version     map[string]string `json:"version,omitempty"`
	VersionFrom *PlanID           `json:"version_from,omitempty"`
	Params      map[string]any    `json:"params,omitempty"`
	Resource    string            `json:"resource,omitempty"`
	Tags        []string          `json:"tags,omitempty"`
	Timeout     string            `json:"timeout,omitempty"`
}

// PutPlan pushes to a resource.
type PutPlan struct {
	Name      string          `json:"name"`
	Type      string          `json:"type"`
	Source    map[string]any  `json:"source"`
	TypeImage TypeImage       `json:"image"`
	Params    map[string]any  `json:"params,omitempty"`
	Inputs    json.RawMessage `json:"inputs,omitempty"`
	Resource  string          `json:"resource,omitempty"`
	Tags      []string        `json:"tags,omitempty"`
	Timeout   string          `json:"timeout,omitempty"`
	// RestartOnPodLoss: see Step.RestartOnPodLoss.
	RestartOnPodLoss bool `json:"restart_on_pod_loss,omitempty"`
}

// CheckPlan finds a resource's versions.
type CheckPlan struct {
	Name        string            `json:"name"`
	Type        string            `json:"type"`
	Source      map[string]any    `json:"source"`
	TypeImage   TypeImage         `json:"image"`
	FromVersion map[string]string `json:"from_version,omitempty"`
	Resource    string            `json:"resource,omitempty"`
	Timeout     string            `json:"timeout,omitempty"`
	Tags        []string          `json:"tags,omitempty"`
}

// hookNames are the JSON names of HookPlan's Next, by Plan field.
const (
	HookOnSuccess = "on_success"
	HookOnFailure = "on_failure"
	HookOnAbort   = "on_abort"
	HookOnError   = "on_error"
	HookEnsure    = "ensure"
)

// MarshalJSON writes {"step": ..., "<hook>": ...}.
func (h HookPlan) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]Plan{"step": h.Step, h.Hook: h.Next})
}

// UnmarshalJSON reads {"step": ..., "<hook>": ...} with any hook name; the
// Plan decoder sets Hook from the field it was found in.
func (h *HookPlan) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	for k, v := range m {
		var p Plan
		if err := json.Unmarshal(v, &p); err != nil {
			return err
		}
		if k == "step" {
			h.Step = p
		} else {
			h.Hook, h.Next = k, p
		}
	}
	return nil
}

// Each calls f for every node of the plan, parents before children.
func (p *Plan) Each(f func(*Plan)) {
	f(p)
	for _, child := range p.Children() {
		child.Each(f)
	}
}

// Children are the plan's direct sub-plans, in order.
func (p *Plan) Children() []*Plan {
	var out []*Plan
	list := func(ps []Plan) {
		for i := range ps {
			out = append(out, &ps[i])
		}
	}
	if p.Do != nil {
		list(*p.Do)
	}
	if p.Retry != nil {
		list(*p.Retry)
	}
	if p.InParallel != nil {
		list(p.InParallel.Steps)
	}
	for _, h := range []*HookPlan{p.OnSuccess, p.OnFailure, p.OnAbort, p.OnError, p.Ensure} {
		if h != nil {
			out = append(out, &h.Step, &h.Next)
		}
	}
	if p.Try != nil {
		out = append(out, &p.Try.Step)
	}
	if p.Timeout != nil {
		out = append(out, &p.Timeout.Step)
	}
	return out
}
