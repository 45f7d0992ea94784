package exec

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/creds"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/worker"
)

// reports records what a build's steps report, one line per report
// ("<plan id> <what>"), and the values the build was told to redact.
type reports struct {
	mu      sync.Mutex
	lines   []string
	secrets []string
}

func (r *reports) BuildDelegate(*buildstate.Build) BuildDelegate { return r }

func (r *reports) StepDelegate(id concourse.PlanID) StepDelegate {
	return reporter{r: r, id: id}
}

func (r *reports) Redact(secrets []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range secrets {
		if !slices.Contains(r.secrets, s) {
			r.secrets = append(r.secrets, s)
		}
	}
}

func (r *reports) Redactor() *creds.Redactor {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.secrets) == 0 {
		return nil
	}
	return creds.NewRedactor(r.secrets)
}

func (r *reports) SecretValues() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.secrets)
}

func (r *reports) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lines)
}

type reporter struct {
	r  *reports
	id concourse.PlanID
}

func (p reporter) add(format string, args ...any) {
	p.r.mu.Lock()
	defer p.r.mu.Unlock()
	p.r.lines = append(p.r.lines, string(p.id)+" "+fmt.Sprintf(format, args...))
}

func (p reporter) Initializing()                        { p.add("initializing") }
func (p reporter) Starting()                            { p.add("starting") }
func (p reporter) InitializeTask(cfg events.TaskConfig) { p.add("initialize-task") }
func (p reporter) InitializeGet()                       { p.add("initialize-get") }
func (p reporter) InitializePut()                       { p.add("initialize-put") }
func (p reporter) InitializeCheck(name string)          { p.add("initialize-check %s", name) }
func (p reporter) SelectedWorker(name string)           { p.add("selected-worker %s", name) }
func (p reporter) ImageCheck(plan json.RawMessage)      { p.add("image-check %s", plan) }
func (p reporter) AcrossSubsteps(s []json.RawMessage)   { p.add("across-substeps %d", len(s)) }
func (p reporter) Stdout(msg string)                    { p.add("stdout %q", msg) }
func (p reporter) Stderr(msg string)                    { p.add("stderr %q", msg) }
func (p reporter) Say(msg string)                       { p.add("say %q", msg) }
func (p reporter) PodEvent(stepID string, seq uint64, ev events.Event) {
	p.add("pod-event %s %d %T", stepID, seq, ev)
}
func (p reporter) PodEnded(evs []events.Event) {
	for _, ev := range evs {
		p.add("pod-ended %T", ev)
	}
}
func (p reporter) FinishGet(exit int, v map[string]string, _ []events.MetadataField) {
	p.add("finish-get %d %v", exit, v)
}
func (p reporter) FinishPut(exit int, v map[string]string, _ []events.MetadataField) {
	p.add("finish-put %d %v", exit, v)
}
func (p reporter) SetPipelineChanged(changed bool) { p.add("set-pipeline-changed %v", changed) }
func (p reporter) Finished(succeeded bool)         { p.add("finished %v", succeeded) }
func (p reporter) Errored(msg string)              { p.add("errored %s", msg) }

// fakeWorker is a worker of fakeRuntime.
type fakeWorker struct {
	name, namespace string
	baseTypes       map[string]string
}

func (w fakeWorker) Name() string      { return w.name }
func (w fakeWorker) Namespace() string { return w.namespace }
func (w fakeWorker) BaseResourceType(name string) (string, bool) {
	image, ok := w.baseTypes[name]
	return image, ok
}

// fakeRuntime places every step on its one worker and creates no pod: for
// tests of what the steps resolve before a pod exists.
type fakeRuntime struct {
	worker fakeWorker
	// refuse, if set, is CheckPlacement's answer.
	refuse error
}

func (r fakeRuntime) Worker(name string) (Worker, error) {
	if name != r.worker.name {
		return nil, fmt.Errorf("no worker %q", name)
	}
	return r.worker, nil
}
func (r fakeRuntime) CheckPlacement(worker.Requirements) error { return r.refuse }
func (r fakeRuntime) Place(context.Context, worker.Requirements, func(string)) (Worker, error) {
	return r.worker, r.refuse
}
func (r fakeRuntime) CreatePod(context.Context, Worker, *action.Action, podspec.Secrets) error {
	return fmt.Errorf("fakeRuntime creates no pods")
}
func (r fakeRuntime) PodGone(context.Context, Worker, string) (bool, error) { return true, nil }
func (r fakeRuntime) DeletePod(context.Context, Worker, string)             {}
func (r fakeRuntime) StepCredentials(context.Context, Worker, *action.Action) (*eventspb.BlobstoreCredentials, error) {
	return nil, fmt.Errorf("fakeRuntime mints no credentials")
}

func (r fakeRuntime) DeclaredAction(context.Context, Worker, string) (*action.Action, error) {
	return nil, fmt.Errorf("fakeRuntime declares no pods")
}
