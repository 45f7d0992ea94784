// Package acrossstep is the across step, as Concourse's
// atc/exec/across_step.go: it runs its substep once for every combination
// of its vars' values. What it needs of the build it runs in (its local
// vars, its steps, its delegate and its step's record) comes through small
// interfaces, which exec implements.
package acrossstep

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/porter-ci/porter/pkg/atc/exec/parallel"
	"github.com/porter-ci/porter/pkg/atc/exec/stepvars"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/pipeline"
)

// Delegate reports what the step does (exec's StepDelegate).
type Delegate interface {
	Stderr(msg string)
	AcrossSubsteps(substeps []json.RawMessage)
}

// Record is the step's record in the build's state.
type Record interface {
	// Started: the runs are announced.
	Started(ctx context.Context)
	// Ended: the runs ended, with the outcome (ok, err).
	Ended(ctx context.Context, ok bool, err error)
	// Errored ends the step as errored with err: (false, err).
	Errored(ctx context.Context, err error) (bool, error)
}

// Locals are the build's local vars: those of the across run the step
// running under ctx is in.
type Locals interface {
	Scope(ctx context.Context) *stepvars.Scope
}

// Interpolator fills in the ((vars)) of a value with the step's vars.
type Interpolator interface {
	Interpolate(ctx context.Context, v any) (any, error)
}

// Runner runs a step of the build (exec's RunState).
type Runner interface {
	Run(ctx context.Context, p *concourse.Plan) (bool, error)
}

// Step runs its substep once for every combination of its vars' values,
// as Concourse's across step: each run is a copy of the substep's plan with
// the run's ((.:vars)) filled in and ids of its own ("<id>/<run>/<n>"),
// announced in an across-substeps event, and also sees the values as local
// vars (a task file read later may use them). The runs of each var's
// values go max_in_flight at a time, the first var outermost; with
// fail_fast a failure stops the runs still going.
type Step struct {
	Plan *concourse.Plan
	// Announce: the runs are not announced yet (they were before a
	// restart).
	Announce bool

	Delegate Delegate
	Record   Record
	Locals   Locals
	Vars     Interpolator
	Steps    Runner
}

// Run runs the step.
func (s Step) Run(ctx context.Context) (bool, error) {
	p := s.Plan
	ap := p.Across
	d := s.Delegate
	values := make([][]any, len(ap.Vars))
	for i, v := range ap.Vars {
		if _, shadowed := s.Locals.Scope(ctx).Get(v.Var); shadowed && s.Announce {
			d.Stderr(fmt.Sprintf("\x1b[1;33mWARNING: across step shadows local var '%s'\x1b[0m\n", v.Var))
		}
		list, err := s.acrossValues(ctx, v)
		if err != nil {
			return s.Record.Errored(ctx, err)
		}
		values[i] = list
	}
	combos := pipeline.AcrossCombinations(values)
	if len(combos) > pipeline.MaxAcrossCombinations {
		return s.Record.Errored(ctx, fmt.Errorf("across: %d combinations of values (the limit is %d)", len(combos), pipeline.MaxAcrossCombinations))
	}
	substeps := make([]concourse.Plan, len(combos))
	public := make([]json.RawMessage, len(combos))
	for i, combo := range combos {
		sub, err := pipeline.AcrossSubstep(ctx, p.ID, i, ap, combo)
		if err != nil {
			return s.Record.Errored(ctx, err)
		}
		substeps[i] = sub
		// Concourse's shape: the run's public plan with its values.
		body, err := json.Marshal(map[string]any{"step": concourse.PublicPlan(&sub), "values": combo})
		if err != nil {
			return s.Record.Errored(ctx, fmt.Errorf("across: %w", err))
		}
		public[i] = body
	}
	if s.Announce {
		d.AcrossSubsteps(public)
		s.Record.Started(ctx)
	}
	run := func(ctx context.Context, i int) (bool, error) {
		scope := s.Locals.Scope(ctx).Child()
		for j, v := range ap.Vars {
			// The values are public (the substeps show them), so they are
			// not redacted.
			scope.Set(v.Var, combos[i][j])
		}
		return s.Steps.Run(stepvars.WithScope(ctx, scope), &substeps[i])
	}
	ok, err := s.acrossLevel(ctx, ap, values, 0, 0, len(combos), run)
	s.Record.Ended(ctx, ok, err)
	return ok, err
}

// acrossLevel runs the combinations [lo, hi) that share the values of the
// vars before level: the values of var level go max_in_flight at a time,
// each over the combinations of the vars after it.
func (s Step) acrossLevel(ctx context.Context, ap *concourse.AcrossPlan, values [][]any, level, lo, hi int, run func(context.Context, int) (bool, error)) (bool, error) {
	n := len(values[level])
	per := (hi - lo) / n
	last := level == len(ap.Vars)-1
	return parallel.Run(ctx, n, ap.Vars[level].MaxInFlight, ap.FailFast, func(ctx context.Context, i int) (bool, error) {
		if last {
			return run(ctx, lo+i)
		}
		return s.acrossLevel(ctx, ap, values, level+1, lo+i*per, lo+(i+1)*per, run)
	})
}

// acrossValues are a var's values: the list as written, or the list a
// ((var)) holds (a load_var's, say).
func (s Step) acrossValues(ctx context.Context, v concourse.AcrossVar) ([]any, error) {
	val := v.Values
	if str, ok := val.(string); ok {
		filled, err := s.Vars.Interpolate(ctx, str)
		if err != nil {
			return nil, fmt.Errorf("across var '%s': %w", v.Var, err)
		}
		val = filled
	}
	list, ok := val.([]any)
	if !ok {
		return nil, fmt.Errorf("across var '%s': values must be a list, not %s", v.Var, describeValue(val))
	}
	return list, nil
}

func describeValue(v any) string {
	switch v.(type) {
	case map[string]any:
		return "a map"
	case string:
		return "a string"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}
