package stepvars

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/creds"
	"github.com/porter-ci/porter/pkg/vars"
)

// Recorder remembers every value its resolver gave, so they can be
// redacted and kept out of the pod spec.
type Recorder struct {
	r vars.Resolver
	// sink, when set, is the recorder that keeps the values instead.
	sink *Recorder

	mu     sync.Mutex
	values []any
}

// Get is r's value, recorded.
func (s *Recorder) Get(ctx context.Context, ref vars.Ref) (any, bool, error) {
	v, found, err := s.r.Get(ctx, ref)
	if found && err == nil {
		keep := s
		if s.sink != nil {
			keep = s.sink
		}
		keep.mu.Lock()
		keep.values = append(keep.values, v)
		keep.mu.Unlock()
	}
	return v, found, err
}

// Secrets are the texts to redact: each value the credential manager gave
// and every string inside one with fields (all of a Secret's keys, not
// only the fields that were used).
func (s *Recorder) Secrets() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Secrets(s.values...)
}

// Secrets are the texts to redact to hide values: every string inside
// them, sorted.
func Secrets(values ...any) []string {
	set := map[string]bool{}
	for _, v := range values {
		collectSecrets(v, set)
	}
	delete(set, "")
	return slices.Sorted(maps.Keys(set))
}

func collectSecrets(v any, set map[string]bool) {
	switch n := v.(type) {
	case map[string]any:
		for _, x := range n {
			collectSecrets(x, set)
		}
	case []any:
		for _, x := range n {
			collectSecrets(x, set)
		}
	case string:
		set[n] = true
	case nil:
	default:
		set[fmt.Sprint(n)] = true
	}
}

// NewRecorder records what r gives.
func NewRecorder(r vars.Resolver) *Recorder { return &Recorder{r: r} }

// ContainsVars says whether any string of v (map keys too) names a var.
func ContainsVars(v any) bool {
	switch n := v.(type) {
	case map[string]any:
		for k, x := range n {
			if HasVars([]byte(k)) || ContainsVars(x) {
				return true
			}
		}
	case []any:
		for _, x := range n {
			if ContainsVars(x) {
				return true
			}
		}
	case string:
		return HasVars([]byte(n))
	}
	return false
}

// HasVars says whether text names any ((var)).
func HasVars(text []byte) bool { return len(vars.Names(string(text))) > 0 }

// SplitSecretParams moves every param of a whose value shows a credential
// out of the action (which the pod spec, PORTER_ACTION and the audit trail
// show) into the returned map, which travels in the step's Secret.
func SplitSecretParams(a *action.Action, red *creds.Redactor) map[string]string {
	var secret map[string]string
	for _, name := range slices.Sorted(maps.Keys(a.Params)) {
		v := a.Params[name]
		if red.Redact(v) == v {
			continue
		}
		if secret == nil {
			secret = map[string]string{}
		}
		secret[name] = v
		delete(a.Params, name)
		a.SecretParams = append(a.SecretParams, name)
	}
	return secret
}

// RedactValue redacts every string of a JSON-encodable value (an event's
// payload, a task's event config). Map keys are the payload's structure and
// are left alone.
func RedactValue[T any](red *creds.Redactor, v T) T {
	body, err := json.Marshal(v)
	if err != nil {
		return v
	}
	redacted, err := red.JSON(body)
	if err != nil {
		return v
	}
	var out T
	if err := json.Unmarshal(redacted, &out); err != nil {
		return v
	}
	return out
}
