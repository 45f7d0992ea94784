package exec

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/atc/exec/stepvars"
	"github.com/porter-ci/porter/pkg/atc/exec/taskplan"
	"github.com/porter-ci/porter/pkg/atc/stepevents"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/podwatch"
	"github.com/porter-ci/porter/pkg/worker"
)

// StepState is what the server tracks of a running step pod.
type StepState struct {
	id       string // the pod's step ID
	worker   Worker
	b        *buildstate.Build
	d        StepDelegate
	finished chan *eventspb.StepFinished

	mu sync.Mutex
	// ev turns the step's sidecar events into build events.
	ev stepevents.Translator
	// lost is the loss of the step's pod under it (PodLost),
	// if that is how it ended.
	lost *podwatch.Failure
}

// PodLost notes that the step's pod was lost under it (the runtime
// decides what counts as lost): the step may start again in a new pod.
func (st *StepState) PodLost(f *podwatch.Failure) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.lost = f
}

// podLost is the loss of the step's pod, or nil.
func (st *StepState) podLost() *podwatch.Failure {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.lost
}

// ID is the step's pod's step ID.
func (st *StepState) ID() string { return st.id }

// Worker runs the step's pod (nil: its worker is unknown).
func (st *StepState) Worker() Worker { return st.worker }

// PlanID is the step's plan ID in its build.
func (st *StepState) PlanID() concourse.PlanID { return st.ev.PlanID }

// Build is the step's build.
func (st *StepState) Build() *buildstate.Build { return st.b }

// Finished receives the step's end as its sidecar reports it.
func (st *StepState) Finished() <-chan *eventspb.StepFinished { return st.finished }

func (x *RunState) registerStep(w Worker, id string, planID concourse.PlanID, cfg events.TaskConfig) *StepState {
	st := NewStepState(x.b, x.delegate(planID), w, id, planID, cfg)
	x.r.engine.RegisterStep(st)
	return st
}

// NewStepState is the state of a task step (w nil: its worker is unknown),
// reporting through d.
func NewStepState(b *buildstate.Build, d StepDelegate, w Worker, id string, planID concourse.PlanID, cfg events.TaskConfig) *StepState {
	return &StepState{id: id, worker: w, b: b, d: d, ev: stepevents.Translator{PlanID: planID, EventConfig: cfg}, finished: make(chan *eventspb.StepFinished, 1)}
}

// replay gives a step recorded as finished its outcome again, with its
// outputs. Only a resumed build replays a step, so its pod is retired here:
// the timer that would have removed it died with the server that ran it.
func (x *RunState) replay(rec buildstate.StepRecord) (bool, error) {
	if rec.StepID != "" {
		x.r.engine.Retire(rec.StepID)
	}
	for name, a := range rec.Outputs {
		x.setArtifact(name, a)
	}
	return stepOutcome(rec.Status, rec.Error)
}

// TaskStep runs a task as one pod, or follows its pod again after a
// restart, or replays its recorded result.
type TaskStep struct{ Plan *concourse.Plan }

func (step TaskStep) Run(ctx context.Context, x *RunState) (bool, error) {
	p := step.Plan
	s, b, tp := x.r, x.b, p.Task
	d := x.delegate(p.ID)
	r := x.b.Record(p.ID, tp.Name, concourse.KindTask)
	var (
		rec  buildstate.StepRecord
		done bool
	)
	b.Update(func() { rec, done = *r, r.Finished() })
	if done {
		return x.replay(rec)
	}
	var fin *eventspb.StepFinished
	attempt := 1
	if rec.StepID != "" {
		// The credentials the step read are redacted again from what its
		// pod still logs (the redactions died with the previous server).
		_, _ = x.prepareTask(ctx, tp)
		w, err := s.pods.Worker(rec.Worker)
		if err != nil {
			return x.endTask(ctx, p, r, x.registerStep(nil, rec.StepID, p.ID, rec.EventConfig), Errored(err.Error()))
		}
		if !x.restartGone(ctx, p, w, rec, true) {
			st := x.registerStep(w, rec.StepID, p.ID, rec.EventConfig)
			if fin = x.proceedAgain(ctx, w, rec); fin == nil {
				fin = s.resumeStep(ctx, w, st, rec.StepID)
			}
			return x.endTask(ctx, p, r, st, fin)
		}
		attempt = max(rec.Attempt, 1) + 1
	}

	if ok, err, handled := x.runAhead(ctx, p, r); handled {
		return ok, err
	}

	a, eventConfig, pull, secretParams, err := x.resolvePreparedTask(ctx, p)
	var w Worker
	if err == nil {
		w, err = s.placeStep(ctx, b, d, privilegedRequirements(worker.StepRequirements(b.Team, tp.Tags, eventConfig.Platform, true), tp.Privileged))
		if ctx.Err() != nil {
			return x.stoppedWaiting(ctx, r)
		}
	}
	if err != nil {
		d.Errored(err.Error())
		b.Update(func() { r.Status, r.Error = concourse.StatusErrored, err.Error() })
		s.SaveState(ctx, b)
		return false, err
	}
	d.InitializeTask(eventConfig)
	d.SelectedWorker(w.Name())
	b.Update(func() { r.EventConfig = eventConfig })
	st, fin, err := x.runStepPod(ctx, p, stepPod{record: r, worker: w, action: a, restartable: true, attempt: attempt,
		container: x.taskContainer(p, w, a),
		secrets:   podspec.Secrets{ImagePull: pull, Params: secretParams},
		register:  func(id string) *StepState { return x.registerStep(w, id, p.ID, eventConfig) }})
	if err != nil {
		return false, err
	}
	return x.endTask(ctx, p, r, st, fin)
}

// taskContainer is the record of task p's container on w, but for its pod.
func (x *RunState) taskContainer(p *concourse.Plan, w Worker, a *action.Action) db.Container {
	b := x.b
	return db.Container{TeamID: b.TeamID, BuildID: b.ID, BuildName: b.Name, PlanID: string(p.ID), StepName: p.Task.Name,
		Type: concourse.KindTask, WorkerName: w.Name(), Namespace: w.Namespace(), WorkingDirectory: a.WorkDir, User: a.Run.User}
}

// Errored is the end of a step that errored with msg.
func Errored(msg string) *eventspb.StepFinished {
	return &eventspb.StepFinished{Result: eventspb.Result_RESULT_ERRORED, ExitStatus: -1, Error: msg}
}

// stepOutcome is the executor's view of a step's status.
func stepOutcome(status concourse.BuildStatus, msg string) (bool, error) {
	switch status {
	case concourse.StatusSucceeded:
		return true, nil
	case concourse.StatusFailed:
		return false, nil
	case concourse.StatusAborted:
		return false, ErrAborted
	}
	if msg == "" {
		msg = "the step errored"
	}
	return false, errors.New(msg)
}

// endTask records how a task ended (fin nil: the server is stopping and
// the step is left to the next one).
func (x *RunState) endTask(ctx context.Context, p *concourse.Plan, r *buildstate.StepRecord, st *StepState, fin *eventspb.StepFinished) (bool, error) {
	s, b := x.r, x.b
	if fin == nil {
		return false, interrupted(ctx)
	}
	status := buildStatus(fin.GetResult())
	x.delegate(p.ID).PodEnded(st.endEvents(fin, time.Now().Unix()))
	outputs := map[string]api.ArtifactRef{}
	for _, o := range fin.GetOutputs() {
		outputs[o.GetName()] = api.ArtifactRef{Key: o.GetKey(), Digest: o.GetDigest(), Size: o.GetSize()}
	}
	b.Update(func() {
		r.Status, r.Error, r.AuditKey, r.EndTime = status, fin.GetError(), fin.GetAuditKey(), time.Now().Unix()
		if fin.GetExitStatus() >= 0 {
			code := int(fin.GetExitStatus())
			r.ExitStatus = &code
		}
		if len(outputs) > 0 {
			r.Outputs = outputs
		}
	})
	s.SaveState(ctx, b)
	for name, a := range outputs {
		x.setArtifact(name, a)
	}
	s.engine.Retire(st.id)
	if cause := context.Cause(ctx); cause != nil && status == concourse.StatusAborted {
		// Stopped by a timeout or a failing sibling rather than a person.
		return false, cause
	}
	return stepOutcome(status, fin.GetError())
}

// resolvePreparedTask resolves the task as it runs (prepareTask): params
// that show credentials leave the action for the step's Secret, and the
// event config shows them redacted.
func (x *RunState) resolvePreparedTask(ctx context.Context, p *concourse.Plan) (*action.Action, events.TaskConfig, *podspec.RegistryAuth, map[string]string, error) {
	return x.resolvePreparedTaskWith(ctx, p, x.artifact)
}

// resolvePreparedTaskWith is resolvePreparedTask, the task's inputs found
// by artifact.
func (x *RunState) resolvePreparedTaskWith(ctx context.Context, p *concourse.Plan, artifact func(string) (api.ArtifactRef, bool)) (*action.Action, events.TaskConfig, *podspec.RegistryAuth, map[string]string, error) {
	x.mu.Lock()
	tp, read := x.prepared[p.ID]
	delete(x.prepared, p.ID)
	x.mu.Unlock()
	if !read {
		var err error
		if tp, err = x.prepareTask(ctx, p.Task); err != nil {
			return nil, events.TaskConfig{}, nil, nil, err
		}
	}
	prepared := *p
	prepared.Task = tp
	a, eventConfig, pull, err := x.resolveTask(ctx, &prepared, artifact)
	if err != nil {
		return nil, events.TaskConfig{}, nil, nil, err
	}
	red := x.d.Redactor()
	return a, redactEventConfig(red, eventConfig), pull, stepvars.SplitSecretParams(a, red), nil
}

// resolveTask turns a task step into an action, the way Concourse checks a
// task before anything runs: a bad config or a missing input fails here,
// before any pod exists (but for its image's check). pull is the login the
// kubelet pulls the task's image with (nil: none).
func (x *RunState) resolveTask(ctx context.Context, p *concourse.Plan, artifact func(string) (api.ArtifactRef, bool)) (*action.Action, events.TaskConfig, *podspec.RegistryAuth, error) {
	tp := p.Task
	cfg, params, err := taskplan.Config(tp)
	if err != nil {
		return nil, events.TaskConfig{}, nil, err
	}
	if err := x.r.pods.CheckPlacement(privilegedRequirements(worker.StepRequirements(x.b.Team, tp.Tags, cfg.Platform, true), tp.Privileged)); err != nil {
		return nil, events.TaskConfig{}, nil, err
	}
	b := x.b
	a, err := taskplan.Action(tp, cfg, params, artifact, x.identity(), taskplan.CacheScope{Team: b.Team, Pipeline: taskCachePipeline(b), Job: b.Job})
	if err != nil {
		return nil, events.TaskConfig{}, nil, err
	}
	// Last: only a task that can run pays its image's check.
	image, err := x.taskImage(ctx, p, cfg)
	if err != nil {
		return nil, events.TaskConfig{}, nil, err
	}
	a.Image = image.Ref
	return a, taskplan.EventConfig(cfg, image.Ref), image.Pull, nil
}

// buildStatus is the status a step result gives.
func buildStatus(r eventspb.Result) concourse.BuildStatus {
	switch r {
	case eventspb.Result_RESULT_SUCCEEDED:
		return concourse.StatusSucceeded
	case eventspb.Result_RESULT_FAILED:
		return concourse.StatusFailed
	case eventspb.Result_RESULT_ABORTED:
		return concourse.StatusAborted
	}
	return concourse.StatusErrored
}

// taskCachePipeline is the pipeline segment of b's task cache keys ("" for
// a one-off build).
func taskCachePipeline(b *buildstate.Build) string {
	if b.Pipeline == "" {
		return ""
	}
	return blobstore.TaskCachePipeline(b.Pipeline, b.InstanceVars)
}
