// Package delegate is how exec's steps report what they do, as
// Concourse's steps do through their delegates: a step says what happened
// (initializing, a worker chosen, a line to show, finished, errored), and
// the engine, which implements the delegates, decides how that reaches the
// build's event stream. No step touches a build's log.
package delegate

import (
	"encoding/json"

	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/creds"
	"github.com/porter-ci/porter/pkg/events"
)

// Factory gives each build's steps their delegates (the engine).
type Factory interface {
	BuildDelegate(b *buildstate.Build) Build
}

// Build reports for a whole build.
type Build interface {
	// StepDelegate reports for the step with plan ID id.
	StepDelegate(id concourse.PlanID) Step
	// Redact hides secrets from the build's events from now on (and from
	// what its steps' pods print, through SecretValues).
	Redact(secrets []string)
	// Redactor redacts what the build has been told to hide.
	Redactor() *creds.Redactor
	// SecretValues are the values redacted so far, for a step's pod to
	// redact from its own output.
	SecretValues() []string
}

// Step reports for one step. Times are the delegate's.
type Step interface {
	// Initializing: a step without a process of its own (load_var,
	// set_pipeline) is being prepared; Starting: it runs.
	Initializing()
	Starting()
	// InitializeTask, InitializeGet, InitializePut and InitializeCheck: a
	// step of that kind is being prepared.
	InitializeTask(cfg events.TaskConfig)
	InitializeGet()
	InitializePut()
	InitializeCheck(name string)
	// SelectedWorker: the step runs on that worker.
	SelectedWorker(name string)
	// ImageCheck: the check of a task's image, whose public plan this is.
	ImageCheck(plan json.RawMessage)
	// AcrossSubsteps: an across step's runs, as public plans.
	AcrossSubsteps(substeps []json.RawMessage)
	// Stdout and Stderr show a line the server writes as the step's
	// output; Say one without a stream (the server's own remark).
	Stdout(msg string)
	Stderr(msg string)
	Say(msg string)
	// PodEvent shows one event of the step's pod (sidecar sequence seq of
	// stepID; ev nil: nothing to show for it).
	PodEvent(stepID string, seq uint64, ev events.Event)
	// PodEnded shows the events that the end of the step's pod adds.
	PodEnded(evs []events.Event)
	// FinishGet and FinishPut: a get or put ended with exitStatus, having
	// fetched or made version (nil when it failed).
	FinishGet(exitStatus int, version map[string]string, metadata []events.MetadataField)
	FinishPut(exitStatus int, version map[string]string, metadata []events.MetadataField)
	// SetPipelineChanged says whether set_pipeline changed its pipeline.
	SetPipelineChanged(changed bool)
	// Finished: a step without a process of its own ended.
	Finished(succeeded bool)
	// Errored: the step errored with msg.
	Errored(msg string)
}
