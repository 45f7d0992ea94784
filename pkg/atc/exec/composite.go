package exec

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/porter-ci/porter/pkg/atc/exec/parallel"
	"github.com/porter-ci/porter/pkg/concourse"
)

// The composite steps: control flow over the steps they hold, which they
// run through RunState.Run.

// DoStep runs its steps in order, stopping at the first that does not
// succeed.
type DoStep struct{ Steps []concourse.Plan }

func (s DoStep) Run(ctx context.Context, x *RunState) (bool, error) {
	for i := range s.Steps {
		x.declareAhead(ctx, &s.Steps[i], s.Steps[i+1:])
		ok, err := x.Run(ctx, &s.Steps[i])
		if err != nil || !ok {
			x.withdrawAhead(ctx, s.Steps[i+1:], notRunReason(err))
			return ok, err
		}
	}
	return true, nil
}

// notRunReason is why the steps after one that did not succeed do not run.
func notRunReason(err error) string {
	switch {
	case errors.Is(err, ErrAborted):
		return "the build was aborted"
	case errors.Is(err, ErrTimeout):
		return "an earlier step timed out"
	case err != nil:
		return "an earlier step errored"
	}
	return "an earlier step failed"
}

// InParallelStep runs steps at once, at most limit at a time; with
// fail_fast a failure stops the steps still running (as an abort would).
type InParallelStep struct{ Plan *concourse.InParallelPlan }

func (s InParallelStep) Run(ctx context.Context, x *RunState) (bool, error) {
	p := s.Plan
	return parallel.Run(ctx, len(p.Steps), p.Limit, p.FailFast, func(ctx context.Context, i int) (bool, error) {
		return x.Run(ctx, &p.Steps[i])
	})
}

// RetryStep runs its attempts in turn until one succeeds (attempts:).
type RetryStep struct{ Attempts []concourse.Plan }

func (s RetryStep) Run(ctx context.Context, x *RunState) (ok bool, err error) {
	for i := range s.Attempts {
		ok, err = x.Run(ctx, &s.Attempts[i])
		if (ok && err == nil) || ctx.Err() != nil {
			break
		}
	}
	return ok, err
}

// EnsureStep runs its hook however its step ended.
type EnsureStep struct{ Hook *concourse.HookPlan }

func (s EnsureStep) Run(ctx context.Context, x *RunState) (bool, error) {
	ok, err := x.Run(ctx, &s.Hook.Step)
	// The hook runs even when the step was aborted; only a stopping
	// server skips it (the resumed build runs it).
	hookCtx := ctx
	if cause := context.Cause(ctx); errors.Is(cause, ErrAborted) || errors.Is(cause, ErrTimeout) {
		var release func()
		hookCtx, release = x.detached(ctx)
		defer release()
	}
	hookOK, hookErr := x.Run(hookCtx, &s.Hook.Next)
	return ok && hookOK, errors.Join(err, hookErr)
}

// OnSuccessStep runs its hook when its step succeeded.
type OnSuccessStep struct{ Hook *concourse.HookPlan }

func (s OnSuccessStep) Run(ctx context.Context, x *RunState) (bool, error) {
	ok, err := x.Run(ctx, &s.Hook.Step)
	if err != nil || !ok {
		return ok, err
	}
	return x.Run(ctx, &s.Hook.Next)
}

// OnFailureStep runs its hook when its step failed; the step still fails.
type OnFailureStep struct{ Hook *concourse.HookPlan }

func (s OnFailureStep) Run(ctx context.Context, x *RunState) (bool, error) {
	ok, err := x.Run(ctx, &s.Hook.Step)
	if err == nil && !ok {
		_, hookErr := x.Run(ctx, &s.Hook.Next)
		return false, hookErr
	}
	return ok, err
}

// OnErrorStep runs its hook when its step errored (not when aborted).
type OnErrorStep struct{ Hook *concourse.HookPlan }

func (s OnErrorStep) Run(ctx context.Context, x *RunState) (bool, error) {
	ok, err := x.Run(ctx, &s.Hook.Step)
	if err != nil && !errors.Is(err, ErrAborted) {
		hookCtx, release := x.detached(ctx)
		defer release()
		_, hookErr := x.Run(hookCtx, &s.Hook.Next)
		return false, errors.Join(err, hookErr)
	}
	return ok, err
}

// OnAbortStep runs its hook when its step was aborted.
type OnAbortStep struct{ Hook *concourse.HookPlan }

func (s OnAbortStep) Run(ctx context.Context, x *RunState) (bool, error) {
	ok, err := x.Run(ctx, &s.Hook.Step)
	if errors.Is(err, ErrAborted) {
		hookCtx, release := x.detached(ctx)
		defer release()
		_, hookErr := x.Run(hookCtx, &s.Hook.Next)
		return false, errors.Join(err, hookErr)
	}
	return ok, err
}

// TryStep succeeds whatever its step did, but for an abort.
type TryStep struct{ Plan *concourse.TryPlan }

func (s TryStep) Run(ctx context.Context, x *RunState) (bool, error) {
	_, err := x.Run(ctx, &s.Plan.Step)
	if errors.Is(err, ErrAborted) {
		return false, err
	}
	return true, nil
}

// TimeoutStep fails its step when it runs longer than its duration.
type TimeoutStep struct{ Plan *concourse.TimeoutPlan }

func (s TimeoutStep) Run(ctx context.Context, x *RunState) (bool, error) {
	d, err := time.ParseDuration(s.Plan.Duration)
	if err != nil {
		return false, fmt.Errorf("timeout %q: %w", s.Plan.Duration, err)
	}
	tctx, cancel := context.WithTimeoutCause(ctx, d, ErrTimeout)
	defer cancel()
	ok, err := x.Run(tctx, &s.Plan.Step)
	if errors.Is(err, ErrTimeout) {
		// A step that ran out of time failed; it did not error.
		return false, nil
	}
	return ok, err
}
