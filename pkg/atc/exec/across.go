package exec

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/porter-ci/porter/pkg/atc/exec/parallel"
	"github.com/porter-ci/porter/pkg/atc/exec/stepvars"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/pipeline"
)

// across runs its substep once for every combination of its vars' values,
// as Concourse's across step: each run is a copy of the substep's plan with
// the run's ((.:vars)) filled in and ids of its own ("<id>/<run>/<n>"),
// announced in an across-substeps event, and also sees the values as local
// vars (a task file read later may use them). The runs of each var's
// values go max_in_flight at a time, the first var outermost; with
// fail_fast a failure stops the runs still going.
type AcrossStep struct{ Plan *concourse.Plan }

func (s AcrossStep) Run(ctx context.Context, x *RunState) (bool, error) {
	p := s.Plan
	ap := p.Across
	d := x.delegate(p.ID)
	r := x.b.Record(p.ID, "across", concourse.KindAcross)
	values := make([][]any, len(ap.Vars))
	announce := !r.Finished() && r.Status == ""
	for i, v := range ap.Vars {
		if _, shadowed := x.scope(ctx).Get(v.Var); shadowed && announce {
			d.Stderr(fmt.Sprintf("\x1b[1;33mWARNING: across step shadows local var '%s'\x1b[0m\n", v.Var))
		}
		list, err := x.acrossValues(ctx, v)
		if err != nil {
			return x.failStep(ctx, d, r, err)
		}
		values[i] = list
	}
	combos := pipeline.AcrossCombinations(values)
	if len(combos) > pipeline.MaxAcrossCombinations {
		return x.failStep(ctx, d, r, fmt.Errorf("across: %d combinations of values (the limit is %d)", len(combos), pipeline.MaxAcrossCombinations))
	}
	substeps := make([]concourse.Plan, len(combos))
	public := make([]json.RawMessage, len(combos))
	for i, combo := range combos {
		sub, err := pipeline.AcrossSubstep(ctx, p.ID, i, ap, combo)
		if err != nil {
			return x.failStep(ctx, d, r, err)
		}
		substeps[i] = sub
		// Concourse's shape: the run's public plan with its values.
		body, err := json.Marshal(map[string]any{"step": concourse.PublicPlan(&sub), "values": combo})
		if err != nil {
			return x.failStep(ctx, d, r, fmt.Errorf("across: %w", err))
		}
		public[i] = body
	}
	if announce {
		d.AcrossSubsteps(public)
		x.b.Update(func() { r.Status = concourse.StatusStarted })
		x.r.SaveState(ctx, x.b)
	}
	run := func(ctx context.Context, i int) (bool, error) {
		scope := x.scope(ctx).Child()
		for j, v := range ap.Vars {
			// The values are public (the substeps show them), so they are
			// not redacted.
			scope.Set(v.Var, combos[i][j])
		}
		return x.Run(stepvars.WithScope(ctx, scope), &substeps[i])
	}
	ok, err := x.acrossLevel(ctx, ap, values, 0, 0, len(combos), run)
	x.b.Update(func() { r.Status, r.EndTime = BuildResult(ok, err), time.Now().Unix() })
	x.r.SaveState(ctx, x.b)
	return ok, err
}

// acrossLevel runs the combinations [lo, hi) that share the values of the
// vars before level: the values of var level go max_in_flight at a time,
// each over the combinations of the vars after it.
func (x *RunState) acrossLevel(ctx context.Context, ap *concourse.AcrossPlan, values [][]any, level, lo, hi int, run func(context.Context, int) (bool, error)) (bool, error) {
	n := len(values[level])
	per := (hi - lo) / n
	last := level == len(ap.Vars)-1
	return parallel.Run(ctx, n, ap.Vars[level].MaxInFlight, ap.FailFast, func(ctx context.Context, i int) (bool, error) {
		if last {
			return run(ctx, lo+i)
		}
		return x.acrossLevel(ctx, ap, values, level+1, lo+i*per, lo+(i+1)*per, run)
	})
}

// acrossValues are a var's values: the list as written, or the list a
// ((var)) holds (a load_var's, say).
func (x *RunState) acrossValues(ctx context.Context, v concourse.AcrossVar) ([]any, error) {
	val := v.Values
	if s, ok := val.(string); ok {
		filled, err := x.stepVars(nil).Interpolate(ctx, s)
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
