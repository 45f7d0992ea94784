package atc

import (
	"encoding/json"
	"time"

	"github.com/porter-ci/porter/pkg/atc/buildlog"
	"github.com/porter-ci/porter/pkg/atc/exec"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/creds"
	"github.com/porter-ci/porter/pkg/events"
)

// logDelegates are the steps' delegates (exec.DelegateFactory): what the
// steps report becomes Concourse's build events in the build's log.
type logDelegates struct{}

var _ exec.DelegateFactory = logDelegates{}

func (logDelegates) BuildDelegate(b *buildstate.Build) exec.BuildDelegate {
	return buildDelegate{log: b.Log}
}

// buildDelegate reports for one build into its log.
type buildDelegate struct{ log *buildlog.Log }

func (d buildDelegate) StepDelegate(id concourse.PlanID) exec.StepDelegate {
	return stepDelegate{log: d.log, origin: events.Origin{ID: string(id)}}
}

func (d buildDelegate) Redact(secrets []string)   { d.log.Redact(secrets) }
func (d buildDelegate) Redactor() *creds.Redactor { return d.log.Redactor() }
func (d buildDelegate) SecretValues() []string    { return d.log.SecretValues() }

// stepDelegate reports for one step of a build into its log.
type stepDelegate struct {
	log    *buildlog.Log
	origin events.Origin
}

func now() int64 { return time.Now().Unix() }

func (d stepDelegate) source(s string) events.Origin {
	o := d.origin
	o.Source = s
	return o
}

func (d stepDelegate) Initializing() {
	d.log.Append(events.Initialize{Origin: d.origin, Time: now()})
}

func (d stepDelegate) Starting() { d.log.Append(events.Start{Origin: d.origin, Time: now()}) }

func (d stepDelegate) InitializeTask(cfg events.TaskConfig) {
	d.log.Append(events.InitializeTask{Time: now(), Origin: d.origin, Config: cfg})
}

func (d stepDelegate) InitializeGet() {
	d.log.Append(events.InitializeGet{Time: now(), Origin: d.origin})
}

func (d stepDelegate) InitializePut() {
	d.log.Append(events.InitializePut{Time: now(), Origin: d.origin})
}

func (d stepDelegate) InitializeCheck(name string) {
	d.log.Append(events.InitializeCheck{Time: now(), Origin: d.origin, Name: name})
}

func (d stepDelegate) SelectedWorker(name string) {
	d.log.Append(events.SelectedWorker{Time: now(), Origin: d.origin, WorkerName: name})
}

func (d stepDelegate) ImageCheck(plan json.RawMessage) {
	d.log.Append(events.ImageCheck{Time: now(), Origin: d.origin, Plan: plan})
}

func (d stepDelegate) AcrossSubsteps(substeps []json.RawMessage) {
	d.log.Append(events.AcrossSubsteps{Time: now(), Origin: d.origin, Substeps: substeps})
}

func (d stepDelegate) Stdout(msg string) {
	d.log.Append(events.Log{Time: now(), Origin: d.source(events.OriginSourceStdout), Payload: msg})
}

func (d stepDelegate) Stderr(msg string) {
	d.log.Append(events.Log{Time: now(), Origin: d.source(events.OriginSourceStderr), Payload: msg})
}

func (d stepDelegate) Say(msg string) {
	d.log.Append(events.Log{Time: now(), Origin: d.origin, Payload: msg})
}

func (d stepDelegate) PodEvent(stepID string, seq uint64, ev events.Event) {
	d.log.AppendStep(stepID, seq, ev)
}

func (d stepDelegate) PodEnded(evs []events.Event) {
	for _, ev := range evs {
		d.log.Append(ev)
	}
}

func (d stepDelegate) FinishGet(exitStatus int, version map[string]string, metadata []events.MetadataField) {
	d.log.Append(events.FinishGet{Time: now(), Origin: d.origin, ExitStatus: exitStatus, Version: version, Metadata: metadata})
}

func (d stepDelegate) FinishPut(exitStatus int, version map[string]string, metadata []events.MetadataField) {
	d.log.Append(events.FinishPut{Time: now(), Origin: d.origin, ExitStatus: exitStatus, Version: version, Metadata: metadata})
}

func (d stepDelegate) SetPipelineChanged(changed bool) {
	d.log.Append(events.SetPipelineChanged{Origin: d.origin, Changed: changed})
}

func (d stepDelegate) Finished(succeeded bool) {
	d.log.Append(events.Finish{Origin: d.origin, Time: now(), Succeeded: succeeded})
}

func (d stepDelegate) Errored(msg string) {
	d.log.Append(events.Error{Time: now(), Origin: d.origin, Message: msg})
}
