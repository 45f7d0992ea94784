package pipeline

import (
	"bytes"
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
