package stepvars

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/porter-ci/porter/pkg/vars"
)

// A build's plan keeps its ((vars)) as written: each step fills them in
// when it runs, from the task's `vars:` and then the team's credentials, so
// the stored plan never holds a credential and a rotated Secret is used by
// the next step that reads it. Values from the credential manager are
// redacted from the build's events from then on.

// Step fills in the ((vars)) of one step.
type Step struct {
	// Static are the step's own vars (a task's `vars:`), looked up before
	// the credentials.
	Static map[string]any
	// Credentials is the team's credential manager, asked for only when a
	// step names a var.
	Credentials func() vars.Resolver
	// Locals is the build's root scope; an across run's comes with ctx.
	Locals *Scope
	// Sources reads the pipeline's var_sources: only a var that names one
	// costs the lookup.
	Sources func(ctx context.Context) (map[string]vars.Resolver, error)
	// Redact hears of every value the credentials and var sources gave,
	// before Interpolate returns.
	Redact func(secrets []string)
}

// Interpolate returns a copy of v with its vars filled in (v itself when it
// has none). The credentials it read are passed to Redact before it
// returns, so no event that shows them can be appended first. An undefined
// var is Concourse's "undefined vars: a, b".
func (s *Step) Interpolate(ctx context.Context, v any) (any, error) {
	if !ContainsVars(v) {
		return v, nil
	}
	rec := NewRecorder(s.Credentials())
	out, _, err := vars.Interpolate(ctx, v, &resolver{static: s.Static, scope: ScopeOf(ctx, s.Locals), sources: s.Sources, rec: rec})
	// Even a failed interpolation may have read some credentials: an
	// error message never shows them, but nothing is lost by hiding them.
	s.Redact(rec.Secrets())
	if err != nil {
		if undefined, ok := errors.AsType[*vars.UndefinedVarsError](err); ok {
			return nil, undefined
		}
		return nil, fmt.Errorf("interpolate ((vars)): %w", err)
	}
	return out, nil
}

// InterpolateMap interpolates a source or params map (nil stays nil).
func (s *Step) InterpolateMap(ctx context.Context, m map[string]any) (map[string]any, error) {
	if m == nil {
		return nil, nil
	}
	out, err := s.Interpolate(ctx, m)
	if err != nil {
		return nil, err
	}
	res, ok := out.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("interpolate ((vars)): a map became %T", out)
	}
	return res, nil
}

// InterpolateJSON interpolates a JSON document (a task's config), keeping
// its numbers as written.
func (s *Step) InterpolateJSON(ctx context.Context, doc json.RawMessage) (json.RawMessage, error) {
	if len(doc) == 0 || !HasVars(doc) {
		return doc, nil
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, fmt.Errorf("read the task config: %w", err)
	}
	out, err := s.Interpolate(ctx, tree)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("write the interpolated task config: %w", err)
	}
	return body, nil
}

// resolver resolves a step's ((vars)) by source: the build's local vars
// for ".", the pipeline's var_sources by name, and for the default source
// the step's static vars, then the team's credentials.
type resolver struct {
	static  vars.Static
	scope   *Scope
	sources func(ctx context.Context) (map[string]vars.Resolver, error)
	// rec records what credentials and var sources gave.
	rec *Recorder
}

func (r *resolver) Get(ctx context.Context, ref vars.Ref) (any, bool, error) {
	switch ref.Source {
	case LocalSource:
		v, ok := r.scope.Get(ref.Path)
		return v, ok, nil
	case "":
		if v, ok := r.static[ref.Path]; ok {
			return v, true, nil
		}
		return r.rec.Get(ctx, ref)
	}
	sources, err := r.sources(ctx)
	if err != nil {
		return nil, false, err
	}
	if src, ok := sources[ref.Source]; ok {
		return (&Recorder{r: src, sink: r.rec}).Get(ctx, vars.Ref{Path: ref.Path})
	}
	return nil, false, fmt.Errorf("var source %q is not in the pipeline's var_sources", ref.Source)
}
