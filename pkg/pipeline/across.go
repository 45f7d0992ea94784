package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/vars"
)

// MaxAcrossCombinations bounds the substeps one across step may run: each
// is a plan the build keeps in memory and, for most, a pod.
const MaxAcrossCombinations = 1000

// acrossVarConfig is one var of a step's `across:` as written.
type acrossVarConfig struct {
	Var         string          `json:"var"`
	Values      json.RawMessage `json:"values"`
	MaxInFlight json.RawMessage `json:"max_in_flight"`
}

// ParseAcross reads a step's `across:`: a list of {var, values,
// max_in_flight}. values is a list or a ((var)) that holds one;
// max_in_flight is a positive number or "all" (absent: 1, one at a time,
// as in Concourse).
func ParseAcross(raw json.RawMessage) ([]concourse.AcrossVar, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	var cfgs []acrossVarConfig
	if err := dec.Decode(&cfgs); err != nil {
		return nil, fmt.Errorf("across: want a list of {var, values, max_in_flight}: %w", err)
	}
	if len(cfgs) == 0 {
		return nil, errors.New("across: no vars")
	}
	seen := map[string]bool{}
	combinations := 1
	out := make([]concourse.AcrossVar, 0, len(cfgs))
	for i, c := range cfgs {
		if c.Var == "" {
			return nil, fmt.Errorf("across[%d]: var is missing", i)
		}
		if seen[c.Var] {
			return nil, fmt.Errorf("across[%d]: var '%s' is repeated", i, c.Var)
		}
		seen[c.Var] = true
		v := concourse.AcrossVar{Var: c.Var, MaxInFlight: 1}
		var values any
		vd := json.NewDecoder(bytes.NewReader(c.Values))
		vd.UseNumber()
		if len(c.Values) == 0 || vd.Decode(&values) != nil {
			return nil, fmt.Errorf("across var '%s': values are missing", c.Var)
		}
		switch n := values.(type) {
		case []any:
			if len(n) == 0 {
				return nil, fmt.Errorf("across var '%s': values is an empty list", c.Var)
			}
			combinations *= len(n)
		case string:
			if len(vars.Names(n)) != 1 {
				return nil, fmt.Errorf("across var '%s': values must be a list or a ((var)) holding one, not %q", c.Var, n)
			}
		default:
			return nil, fmt.Errorf("across var '%s': values must be a list or a ((var)) holding one", c.Var)
		}
		v.Values = values
		if len(c.MaxInFlight) > 0 && string(c.MaxInFlight) != "null" {
			var all string
			var n int
			switch {
			case json.Unmarshal(c.MaxInFlight, &all) == nil && all == "all":
				v.MaxInFlight = 0
			case json.Unmarshal(c.MaxInFlight, &n) == nil && n > 0:
				v.MaxInFlight = n
			default:
				return nil, fmt.Errorf("across var '%s': max_in_flight must be a positive number or \"all\", not %s", c.Var, c.MaxInFlight)
			}
		}
		out = append(out, v)
	}
	if combinations > MaxAcrossCombinations {
		return nil, fmt.Errorf("across: %d combinations of values (the limit is %d)", combinations, MaxAcrossCombinations)
	}
	return out, nil
}

// AcrossCombinations lists every combination of an across step's
// values, the first var's slowest.
func AcrossCombinations(values [][]any) [][]any {
	combos := [][]any{{}}
	for _, vs := range values {
		next := make([][]any, 0, len(combos)*len(vs))
		for _, c := range combos {
			for _, v := range vs {
				next = append(next, append(append([]any{}, c...), v))
			}
		}
		combos = next
	}
	return combos
}

// localOnly resolves just the across run's values: every other var stays
// as written, for the steps to fill in when they run.
type localOnly map[string]any

func (l localOnly) Get(_ context.Context, ref vars.Ref) (any, bool, error) {
	if ref.Source != vars.LocalSource {
		return nil, false, nil
	}
	v, ok := l[ref.Path]
	return v, ok, nil
}

// AcrossSubstep is run i of an across step's substep: its ((.:vars)) filled in and its
// ids made its own, a get's version_from following the ids it names.
func AcrossSubstep(ctx context.Context, id concourse.PlanID, i int, ap *concourse.AcrossPlan, combo []any) (concourse.Plan, error) {
	local := localOnly{}
	for j, v := range ap.Vars {
		local[v.Var] = combo[j]
	}
	body, err := vars.InterpolateTemplateDefined(ctx, []byte(ap.SubStepTemplate), local)
	if err != nil {
		return concourse.Plan{}, fmt.Errorf("across: fill in the substep: %w", err)
	}
	var sub concourse.Plan
	if err := json.Unmarshal(body, &sub); err != nil {
		return concourse.Plan{}, fmt.Errorf("across: read the substep: %w", err)
	}
	mapped := map[concourse.PlanID]concourse.PlanID{}
	n := 0
	sub.Each(func(p *concourse.Plan) {
		to := concourse.PlanID(fmt.Sprintf("%s/%d/%d", id, i, n))
		mapped[p.ID] = to
		p.ID = to
		n++
	})
	sub.Each(func(p *concourse.Plan) {
		if p.Get != nil && p.Get.VersionFrom != nil {
			if to, ok := mapped[*p.Get.VersionFrom]; ok {
				p.Get.VersionFrom = &to
			}
		}
	})
	return sub, nil
}
