package exec

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/atc/checkpods"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/atc/exec/stepplan"
	"github.com/porter-ci/porter/pkg/atc/exec/taskimage"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/hijack"
	"github.com/porter-ci/porter/pkg/podspec"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// RetireCheckPod takes the check pod of stepID out of the pool before a
// person's intercept session opens in it: from then on it runs no new
// check, so nothing they change in it sees another check's request.
func (r *Runner) RetireCheckPod(stepID string) {
	if r.checkPods != nil && r.checkPods.Retire(stepID) {
		r.log.Info("check pod retired: intercepted", "pod", podspec.Name(stepID))
	}
}

// Check pods (checkpods.Pool): a pod declared up front like any step's,
// its image the resource type's and its action idle, that runs every check
// of its key as a session instead of one pod per check. The first check
// that needs one creates it, as that build's step (its log says why a pod
// waits for room, or fails); nothing runs in the background: a pod past
// its use is replaced on the next check and ends at its keep-alive, and
// garbage collection keeps it until then (gc.KeptCheckPod).

// acquireCheckPod returns the step ID of a ready check pod for a's key,
// creating it (as the caller's step) when there is none to take checks.
func (x *RunState) acquireCheckPod(ctx context.Context, p *concourse.Plan, r *buildstate.StepRecord, w Worker, a *action.Action) (checkpods.Lease, error) {
	key := checkpods.Key{Team: x.b.Team, Pipeline: x.b.PipelineID, Worker: w.Name(), Image: a.Image, Tags: strings.Join(a.Tags, ","), Platform: a.Platform}
	return x.r.checkPods.Acquire(ctx, key,
		func() string { return podspec.CheckPodStepID(x.b.Team, stepplan.RandomSuffix()) },
		func(stepID string) error { return x.startCheckPod(ctx, p, r, w, a, stepID) })
}

// startCheckPod declares the check pod as the caller's step and waits
// until its sidecar reports the (idle) step done: from then on it serves
// sessions.
func (x *RunState) startCheckPod(ctx context.Context, p *concourse.Plan, r *buildstate.StepRecord, w Worker, a *action.Action, stepID string) error {
	s, b := x.r, x.b
	act := *a
	act.StepID, act.StepName, act.Idle = stepID, "checks", true
	// The pod serves the team's checks, not the first one's build: its
	// labels, audit trail and blobstore scope say so.
	act.Build = action.Build{ID: "checks", Name: "checks", Team: b.Team}
	act.KeepAlive = action.Duration{Duration: s.checkPods.Lifetime}
	act.Timeout, act.StdinSecret, act.Stdin = action.Duration{}, false, nil
	// The pod's record is the team's, not the first check's build's: it
	// serves every build's checks (fly containers lists it without one).
	c := db.Container{TeamID: b.TeamID, PlanID: podspec.CheckPodPlanID, StepName: "checks", Type: concourse.KindCheck,
		WorkerName: w.Name(), Namespace: w.Namespace(), PodName: podspec.Name(act.StepID), StepID: act.StepID,
		State: concourse.ContainerCreating, WorkingDirectory: act.WorkDir}
	c, err := s.recordContainer(ctx, c)
	if err != nil {
		return err
	}
	st := x.registerResourceStep(w, act.StepID, p.ID, concourse.KindCheck)
	if err := s.createStepPod(ctx, w, &act, podspec.Secrets{}); err != nil {
		return fmt.Errorf("create check pod %s: %w", podspec.Name(act.StepID), err)
	}
	if err := s.retryDB(ctx, "record the check pod's state", func(ctx context.Context) error {
		return s.db.SetContainerState(ctx, c.Handle, concourse.ContainerCreated)
	}); err != nil {
		s.log.Warn("container state", "container", c.Handle, "err", err)
	}
	fin := s.engine.Supervise(ctx, st)
	if fin == nil || ctx.Err() != nil || fin.GetResult() != eventspb.Result_RESULT_SUCCEEDED {
		// Failed, or its build ended while it started: no check will run in it.
		s.pods.DeletePod(context.WithoutCancel(ctx), w, act.StepID)
		if err := interrupted(ctx); err != nil {
			return err
		}
		return fmt.Errorf("check pod %s: %s", podspec.Name(act.StepID), fin.GetError())
	}
	s.log.Info("check pod ready", "worker", w.Name(), "pod", podspec.Name(act.StepID), "image", act.Image, "team", b.Team)
	return nil
}

// runPooledCheck runs a check as a session in its key's check pod: the
// request on stdin, stderr as the check's log, stdout its response. The
// check has a container record of its own, on the pod, so that `fly
// intercept --check` reaches the pod while it is the resource's latest.
func (x *RunState) runPooledCheck(ctx context.Context, p *concourse.Plan, r *buildstate.StepRecord, w Worker, a *action.Action, stdin []byte, name string) *eventspb.StepFinished {
	s, b := x.r, x.b
	d := x.delegate(p.ID)
	lease, err := x.acquireCheckPod(ctx, p, r, w, a)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			return interruptedFinish(cause)
		}
		return Errored(err.Error())
	}
	defer lease.Release()
	podStep := lease.StepID
	// A task image's check has no record: there is nothing in it to
	// intercept (its own pod would go as soon as it reported).
	var c db.Container
	if !strings.HasSuffix(string(p.ID), taskimage.CheckSuffix) {
		c = db.Container{TeamID: b.TeamID, BuildID: b.ID, BuildName: b.Name, PlanID: string(p.ID), StepName: name, Type: concourse.KindCheck,
			WorkerName: w.Name(), Namespace: w.Namespace(), PodName: podspec.Name(podStep), StepID: podStep,
			State: concourse.ContainerCreated, WorkingDirectory: a.WorkDir}
		if c, err = s.recordContainer(ctx, c); err != nil {
			return Errored(err.Error())
		}
	}
	b.Update(func() { r.Worker, r.Container, r.Status = w.Name(), c.Handle, concourse.StatusStarted })
	s.SaveState(ctx, b)
	s.log.Info("check run in a check pod", "build", b.ID, "step", name, "pod", podspec.Name(podStep))

	if s.tracer != nil {
		// The check's process, which no sidecar span covers here.
		var span trace.Span
		ctx, span = s.tracer.Start(ctx, "run in check pod", trace.WithAttributes(
			attribute.String("k8s.pod.name", podspec.Name(podStep)), attribute.String("porter.run.path", a.Run.Path)))
		defer span.End()
	}
	runCtx := ctx
	if a.Timeout.Duration > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeoutCause(ctx, a.Timeout.Duration, ErrTimeout)
		defer cancel()
	}
	res, err := checkpods.Run(runCtx, func(ctx context.Context, open *eventspb.SessionOpen) (hijack.Session, error) {
		return s.checkPods.Sessions.OpenSession(ctx, podStep, open)
	}, a.Run.Path, stdin, func(data []byte) {
		d.Stderr(string(data))
	})
	switch {
	case errors.Is(err, ErrTimeout) && ctx.Err() == nil:
		return &eventspb.StepFinished{Result: eventspb.Result_RESULT_FAILED, ExitStatus: -1, Error: fmt.Sprintf("timeout %s exceeded", a.Timeout.Duration)}
	case errors.Is(err, checkpods.ErrGone):
		return Errored(fmt.Sprintf("check %q: its check pod %s went away", name, podspec.Name(podStep)))
	case err != nil && context.Cause(runCtx) != nil:
		return interruptedFinish(context.Cause(runCtx))
	case err != nil:
		return Errored(fmt.Sprintf("run check %q in check pod %s: %v", name, podspec.Name(podStep), err))
	}
	return res.Finished(name, a.Run.Path)
}

// interruptedFinish is how a step stopped by cause ends; nil when the
// server is stopping (the next one runs the check again).
func interruptedFinish(cause error) *eventspb.StepFinished {
	if errors.Is(cause, ErrShutdown) {
		return nil
	}
	result := eventspb.Result_RESULT_ERRORED
	if errors.Is(cause, ErrAborted) {
		result = eventspb.Result_RESULT_ABORTED
	}
	return &eventspb.StepFinished{Result: result, ExitStatus: -1, Error: cause.Error()}
}

// pooledCheckEnded shows the end of a pooled check as podEnded does a
// pod's.
func (x *RunState) pooledCheckEnded(p *concourse.Plan, r *buildstate.StepRecord, fin *eventspb.StepFinished) {
	if msg := fin.GetError(); msg != "" && fin.GetResult() != eventspb.Result_RESULT_SUCCEEDED && fin.GetResult() != eventspb.Result_RESULT_ABORTED {
		x.delegate(p.ID).Errored(msg)
	}
	x.b.Update(func() {
		if fin.GetExitStatus() >= 0 {
			code := int(fin.GetExitStatus())
			r.ExitStatus = &code
		}
	})
}
