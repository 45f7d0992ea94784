// Package compositestep is the control-flow steps of a build's plan (do,
// in_parallel, attempts, the hooks, try, timeout): they decide which of
// the steps they hold run, and run them through Steps.
package compositestep

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/atc/exec/parallel"
	"github.com/porter-ci/porter/pkg/concourse"
)

// Steps runs the steps a composite step holds (exec's RunState).
type Steps interface {
	Run(ctx context.Context, p *concourse.Plan) (bool, error)
	// Detached is a context for hooks that run after an abort or a
	// timeout: it ends only when the server stops.
	Detached(ctx context.Context) (context.Context, func())
	// DeclareAhead declares the pods of the steps after current that can
	// be; WithdrawAhead withdraws them when they are not to run, and why.
	DeclareAhead(ctx context.Context, current *concourse.Plan, rest []concourse.Plan)
	WithdrawAhead(ctx context.Context, rest []concourse.Plan, why string)
}

// Step is a composite step.
type Step interface {
	Run(ctx context.Context, s Steps) (bool, error)
}

// For is the composite step of plan p of kind k (ok false: k is not one
// of this package's).
func For(k concourse.StepKind, p *concourse.Plan) (step Step, ok bool) {
	switch k {
	case concourse.KindDo:
		return Do{Steps: *p.Do}, true
	case concourse.KindInParallel:
		return InParallel{Plan: p.InParallel}, true
	case concourse.KindRetry:
		return Retry{Attempts: *p.Retry}, true
	case concourse.KindEnsure:
		return Ensure{Hook: p.Ensure}, true
	case concourse.KindOnSuccess:
		return OnSuccess{Hook: p.OnSuccess}, true
	case concourse.KindOnFailure:
		return OnFailure{Hook: p.OnFailure}, true
	case concourse.KindOnError:
		return OnError{Hook: p.OnError}, true
	case concourse.KindOnAbort:
		return OnAbort{Hook: p.OnAbort}, true
	case concourse.KindTry:
		return Try{Plan: p.Try}, true
	case concourse.KindTimeout:
		return Timeout{Plan: p.Timeout}, true
	}
	return nil, false
}

// Do runs its steps in order, stopping at the first that does not
// succeed.
type Do struct{ Steps []concourse.Plan }

func (d Do) Run(ctx context.Context, s Steps) (bool, error) {
	for i := range d.Steps {
		s.DeclareAhead(ctx, &d.Steps[i], d.Steps[i+1:])
		ok, err := s.Run(ctx, &d.Steps[i])
		if err != nil || !ok {
			s.WithdrawAhead(ctx, d.Steps[i+1:], NotRunReason(err))
			return ok, err
		}
	}
	return true, nil
}

// NotRunReason is why the steps after one that did not succeed do not run.
func NotRunReason(err error) string {
	switch {
	case errors.Is(err, buildstate.ErrAborted):
		return "the build was aborted"
	case errors.Is(err, buildstate.ErrTimeout):
		return "an earlier step timed out"
	case err != nil:
		return "an earlier step errored"
	}
	return "an earlier step failed"
}

// InParallel runs steps at once, at most limit at a time; with fail_fast a
// failure stops the steps still running (as an abort would).
type InParallel struct{ Plan *concourse.InParallelPlan }

func (ip InParallel) Run(ctx context.Context, s Steps) (bool, error) {
	p := ip.Plan
	return parallel.Run(ctx, len(p.Steps), p.Limit, p.FailFast, func(ctx context.Context, i int) (bool, error) {
		return s.Run(ctx, &p.Steps[i])
	})
}

// Retry runs its attempts in turn until one succeeds (attempts:).
type Retry struct{ Attempts []concourse.Plan }

func (r Retry) Run(ctx context.Context, s Steps) (ok bool, err error) {
	for i := range r.Attempts {
		ok, err = s.Run(ctx, &r.Attempts[i])
		if (ok && err == nil) || ctx.Err() != nil {
			break
		}
	}
	return ok, err
}

// Ensure runs its hook however its step ended.
type Ensure struct{ Hook *concourse.HookPlan }

func (e Ensure) Run(ctx context.Context, s Steps) (bool, error) {
	ok, err := s.Run(ctx, &e.Hook.Step)
	// The hook runs even when the step was aborted; only a stopping
	// server skips it (the resumed build runs it).
	hookCtx := ctx
	if cause := context.Cause(ctx); errors.Is(cause, buildstate.ErrAborted) || errors.Is(cause, buildstate.ErrTimeout) {
		var release func()
		hookCtx, release = s.Detached(ctx)
		defer release()
	}
	hookOK, hookErr := s.Run(hookCtx, &e.Hook.Next)
	return ok && hookOK, errors.Join(err, hookErr)
}

// OnSuccess runs its hook when its step succeeded.
type OnSuccess struct{ Hook *concourse.HookPlan }

func (o OnSuccess) Run(ctx context.Context, s Steps) (bool, error) {
	ok, err := s.Run(ctx, &o.Hook.Step)
	if err != nil || !ok {
		return ok, err
	}
	return s.Run(ctx, &o.Hook.Next)
}

// OnFailure runs its hook when its step failed; the step still fails.
type OnFailure struct{ Hook *concourse.HookPlan }

func (o OnFailure) Run(ctx context.Context, s Steps) (bool, error) {
	ok, err := s.Run(ctx, &o.Hook.Step)
	if err == nil && !ok {
		_, hookErr := s.Run(ctx, &o.Hook.Next)
		return false, hookErr
	}
	return ok, err
}

// OnError runs its hook when its step errored (not when aborted).
type OnError struct{ Hook *concourse.HookPlan }

func (o OnError) Run(ctx context.Context, s Steps) (bool, error) {
	ok, err := s.Run(ctx, &o.Hook.Step)
	if err != nil && !errors.Is(err, buildstate.ErrAborted) {
		hookCtx, release := s.Detached(ctx)
		defer release()
		_, hookErr := s.Run(hookCtx, &o.Hook.Next)
		return false, errors.Join(err, hookErr)
	}
	return ok, err
}

// OnAbort runs its hook when its step was aborted.
type OnAbort struct{ Hook *concourse.HookPlan }

func (o OnAbort) Run(ctx context.Context, s Steps) (bool, error) {
	ok, err := s.Run(ctx, &o.Hook.Step)
	if errors.Is(err, buildstate.ErrAborted) {
		hookCtx, release := s.Detached(ctx)
		defer release()
		_, hookErr := s.Run(hookCtx, &o.Hook.Next)
		return false, errors.Join(err, hookErr)
	}
	return ok, err
}

// Try succeeds whatever its step did, but for an abort.
type Try struct{ Plan *concourse.TryPlan }

func (t Try) Run(ctx context.Context, s Steps) (bool, error) {
	_, err := s.Run(ctx, &t.Plan.Step)
	if errors.Is(err, buildstate.ErrAborted) {
		return false, err
	}
	return true, nil
}

// Timeout fails its step when it runs longer than its duration.
type Timeout struct{ Plan *concourse.TimeoutPlan }

func (t Timeout) Run(ctx context.Context, s Steps) (bool, error) {
	d, err := time.ParseDuration(t.Plan.Duration)
	if err != nil {
		return false, fmt.Errorf("timeout %q: %w", t.Plan.Duration, err)
	}
	tctx, cancel := context.WithTimeoutCause(ctx, d, buildstate.ErrTimeout)
	defer cancel()
	ok, err := s.Run(tctx, &t.Plan.Step)
	if errors.Is(err, buildstate.ErrTimeout) {
		// A step that ran out of time failed; it did not error.
		return false, nil
	}
	return ok, err
}
