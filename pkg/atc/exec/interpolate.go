package exec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/creds"
	"github.com/porter-ci/porter/pkg/vars"
)

// A build's plan keeps its ((vars)) as written: each step fills them in
// when it runs, from the task's `vars:` and then the team's credentials, so
// the stored plan never holds a credential and a rotated Secret is used by
// the next step that reads it. Values from the credential manager are
// redacted from the build's events from then on.

// secretRecorder remembers every value the credential manager gave, so
// they can be redacted and kept out of the pod spec.
type secretRecorder struct {
	r vars.Resolver
	// sink, when set, is the recorder that keeps the values instead.
	sink *secretRecorder

	mu     sync.Mutex
	values []any
}

func (s *secretRecorder) Get(ctx context.Context, ref vars.Ref) (any, bool, error) {
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

// secrets are the texts to redact: each value the credential manager gave
// and every string inside one with fields (all of a Secret's keys, not
// only the fields that were used).
func (s *secretRecorder) secrets() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := map[string]bool{}
	for _, v := range s.values {
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

// stepVars fills in the ((vars)) of one step: static ones (a task's
// `vars:`) first, then the team's credentials for the build's pipeline.
type stepVars struct {
	x      *executor
	static map[string]any
}

func (x *executor) stepVars(static map[string]any) *stepVars {
	return &stepVars{x: x, static: static}
}

// interpolate returns a copy of v with its vars filled in (v itself when it
// has none). The credentials it read are redacted from the build's events
// before it returns, so no event that shows them can be appended first. An
// undefined var is Concourse's "undefined vars: a, b".
func (sv *stepVars) interpolate(ctx context.Context, v any) (any, error) {
	if !containsVars(v) {
		return v, nil
	}
	b := sv.x.b
	rec := &secretRecorder{r: creds.Resolver{K: sv.x.r.credentials(), Team: b.Team, Pipeline: b.Pipeline}}
	out, _, err := vars.Interpolate(ctx, v, sv.resolver(ctx, rec))
	// Even a failed interpolation may have read some credentials: an
	// error message never shows them, but nothing is lost by hiding them.
	b.Log.Redact(rec.secrets())
	if err != nil {
		var undefined *vars.UndefinedVarsError
		if errors.As(err, &undefined) {
			return nil, undefined
		}
		return nil, fmt.Errorf("interpolate ((vars)): %w", err)
	}
	return out, nil
}

// containsVars says whether any string of v (map keys too) names a var.
func containsVars(v any) bool {
	switch n := v.(type) {
	case map[string]any:
		for k, x := range n {
			if hasVars([]byte(k)) || containsVars(x) {
				return true
			}
		}
	case []any:
		for _, x := range n {
			if containsVars(x) {
				return true
			}
		}
	case string:
		return hasVars([]byte(n))
	}
	return false
}

// interpolateMap interpolates a source or params map (nil stays nil).
func (sv *stepVars) interpolateMap(ctx context.Context, m map[string]any) (map[string]any, error) {
	if m == nil {
		return nil, nil
	}
	out, err := sv.interpolate(ctx, m)
	if err != nil {
		return nil, err
	}
	res, ok := out.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("interpolate ((vars)): a map became %T", out)
	}
	return res, nil
}

// interpolateJSON interpolates a JSON document (a task's config), keeping
// its numbers as written.
func (sv *stepVars) interpolateJSON(ctx context.Context, doc json.RawMessage) (json.RawMessage, error) {
	if len(doc) == 0 || !hasVars(doc) {
		return doc, nil
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, fmt.Errorf("read the task config: %w", err)
	}
	out, err := sv.interpolate(ctx, tree)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("write the interpolated task config: %w", err)
	}
	return body, nil
}

// hasVars says whether text names any ((var)).
func hasVars(text []byte) bool { return len(vars.Names(string(text))) > 0 }

// splitSecretParams moves every param of a whose value shows a credential
// out of the action (which the pod spec, PORTER_ACTION and the audit trail
// show) into the returned map, which travels in the step's Secret.
func splitSecretParams(a *action.Action, red *creds.Redactor) map[string]string {
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

// redactValue redacts every string of a JSON-encodable value (an event's
// payload, a task's event config). Map keys are the payload's structure and
// are left alone.
func redactValue[T any](red *creds.Redactor, v T) T {
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
