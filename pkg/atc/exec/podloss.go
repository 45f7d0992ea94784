package exec

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/atc/exec/stepplan"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/podspec"
)

// MaxPodAttempts is how many pods a step is given in all when its pods are
// lost under it (StepState.PodLost): a node drained twice in a row is
// bad luck, a third time is a problem someone must look at.
const MaxPodAttempts = 3

// stepPod is one step's pod as runStepPod creates it, and again when it is
// lost.
type stepPod struct {
	record *buildstate.StepRecord
	worker Worker
	// action is the step's; each attempt gets its own StepID (its pod,
	// Secret, blob prefix and event sequence are the attempt's own).
	action *action.Action
	// container is the step's container record but for its pod.
	container db.Container
	// secrets are the step's Secret values but for Redact, read for each
	// attempt.
	secrets  podspec.Secrets
	register func(stepID string) *StepState
	// attempt is the first pod's attempt: above 1 when a previous server's
	// pod of the step was lost.
	attempt int
	// restartable: a lost pod is replaced. Tasks, gets and checks are;
	// a put only with `restart_on_pod_loss: true` (it may have had an
	// effect outside before its pod went).
	restartable bool
	// declared is the step's first pod when it was declared ahead (nil:
	// the step declares its pods itself).
	declared *declaredPod
}

// runStepPod records the step's container, creates its pod and follows it
// to its end (fin nil: the server is stopping). A pod lost while the step
// ran is replaced by a new one, up to MaxPodAttempts, each loss said in the
// build's log; the new pod takes its inputs from the blobstore again. What
// the lost pod streamed stays shown once: the new attempt's events are
// numbered in its own step ID.
func (x *RunState) runStepPod(ctx context.Context, p *concourse.Plan, sp stepPod) (*StepState, *eventspb.StepFinished, error) {
	s, b, r, w, a := x.r, x.b, sp.record, sp.worker, sp.action
	d := x.delegate(p.ID)
	for attempt := max(sp.attempt, 1); ; attempt++ {
		var (
			st  *StepState
			fin *eventspb.StepFinished
		)
		if dp := sp.declared; dp != nil {
			// The pod was declared ahead: the step runs in it now.
			sp.declared = nil
			c := dp.container
			b.Update(func() {
				r.StepID, r.Worker, r.Container, r.Status, r.Gated = a.StepID, w.Name(), c.Handle, concourse.StatusStarted, true
				delete(b.State.Ahead, p.ID)
			})
			s.SaveState(ctx, b)
			st = dp.st
			if fin = x.startDeclared(ctx, dp); fin == nil {
				fin = s.engine.Supervise(ctx, st)
			}
		} else {
			var err error
			if st, fin, err = x.createAttempt(ctx, sp, a, attempt); err != nil {
				return nil, nil, err
			}
		}
		lost := st.podLost()
		if fin == nil || lost == nil || fin.GetResult() != eventspb.Result_RESULT_ERRORED || ctx.Err() != nil {
			return st, fin, nil
		}
		// The step's error (the loss) follows these lines.
		var msg string
		switch {
		case !sp.restartable:
			msg = fmt.Sprintf("its pod was lost; a %s is started again in a new pod only with `restart_on_pod_loss: true`", sp.container.Type)
		case attempt >= MaxPodAttempts:
			msg = fmt.Sprintf("the step lost %d pods: not starting it again", attempt)
		}
		if msg != "" {
			d.Say(msg + "\n")
			return st, fin, nil
		}
		d.Say(fmt.Sprintf(
			"%s; starting the step again in a new pod (attempt %d of %d)\n", lost.Error(), attempt+1, MaxPodAttempts))
		s.log.Info("step pod lost: starting the step again", "build", b.ID, "step", a.StepID, "kind", lost.Kind, "attempt", attempt+1)
		s.engine.Retire(st.id)
		next := *a
		next.StepID = nextAttemptID(a.StepID)
		a = &next
	}
}

// declaredPod is the first pod of a step that was declared ahead: the
// step runs in it once given the go-ahead.
type declaredPod struct {
	st        *StepState
	container db.Container
	proceed   *eventspb.Proceed
}

// startDeclared gives the declared pod its go-ahead (nil), or says why the
// step errored.
// Its container was claimed (waiting to created) before: runAhead.
func (x *RunState) startDeclared(ctx context.Context, dp *declaredPod) *eventspb.StepFinished {
	s := x.r
	if err := s.engine.Proceed(dp.st.ID(), dp.proceed); err != nil {
		return Errored(fmt.Sprintf("give the step's pod its go-ahead: %v", err))
	}
	return nil
}

// createAttempt records the container of one attempt of the step, creates
// its pod and follows it to its end.
func (x *RunState) createAttempt(ctx context.Context, sp stepPod, a *action.Action, attempt int) (*StepState, *eventspb.StepFinished, error) {
	s, b, r, w := x.r, x.b, sp.record, sp.worker
	c := sp.container
	c.PodName, c.StepID, c.State = podspec.Name(a.StepID), a.StepID, concourse.ContainerCreating
	c, err := s.recordContainer(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	b.Update(func() {
		r.StepID, r.Worker, r.Container, r.Status = a.StepID, w.Name(), c.Handle, concourse.StatusStarted
		if attempt > 1 {
			r.Attempt = attempt
		}
	})
	s.SaveState(ctx, b)
	st := sp.register(a.StepID)
	secrets := sp.secrets
	secrets.Redact = x.d.SecretValues()
	if err := s.createStepPod(ctx, w, a, secrets); err != nil {
		fin := Errored(err.Error())
		// An abort while the pod was being declared cancels the
		// declaration: the step was aborted, not broken.
		if cause := context.Cause(ctx); errors.Is(cause, ErrAborted) {
			fin = &eventspb.StepFinished{Result: eventspb.Result_RESULT_ABORTED, ExitStatus: -1, Error: cause.Error()}
		}
		return st, fin, nil
	}
	if err := s.retryDB(ctx, "record the container's state", func(ctx context.Context) error {
		return s.db.SetContainerState(ctx, c.Handle, concourse.ContainerCreated)
	}); err != nil {
		s.log.Warn("container state", "container", c.Handle, "err", err)
	}
	return st, s.engine.Supervise(ctx, st), nil
}

// recordContainer records a step's container (retrying while the database
// is away) and returns the record, with its handle.
func (s *Runner) recordContainer(ctx context.Context, c db.Container) (db.Container, error) {
	err := s.retryDB(ctx, "record the step's container", func(ctx context.Context) error {
		rec, err := s.db.CreateContainer(ctx, c)
		if err == nil {
			c = rec
		}
		return err
	})
	if err != nil {
		return db.Container{}, fmt.Errorf("record the container of %s %q: %w", c.Type, c.StepName, err)
	}
	return c, nil
}

// restartGone reports whether the pod a previous server left running for
// the step is gone (deleted, or never created, while no server followed it)
// and the step may start again in a new pod (restartable, attempts left);
// the build's log then says so.
func (x *RunState) restartGone(ctx context.Context, p *concourse.Plan, w Worker, rec buildstate.StepRecord, restartable bool) bool {
	attempt := max(rec.Attempt, 1)
	if !restartable || attempt >= MaxPodAttempts {
		return false
	}
	gone, err := x.r.pods.PodGone(ctx, w, rec.StepID)
	if err != nil || !gone {
		return false // resumeStep says why
	}
	x.delegate(p.ID).Say(fmt.Sprintf(
		"pod %s is gone: it was deleted, or never created, while the ATC was down; starting the step again in a new pod (attempt %d of %d)\n",
		podspec.Name(rec.StepID), attempt+1, MaxPodAttempts))
	x.r.log.Info("step pod gone at resume: starting the step again", "build", x.b.ID, "step", rec.StepID, "attempt", attempt+1)
	return true
}

// nextAttemptID is the step ID of a step's next pod: the same build and
// step name, a new random suffix.
func nextAttemptID(stepID string) string {
	i := strings.LastIndexByte(stepID, '-')
	return stepID[:i+1] + stepplan.RandomSuffix()
}
