package atc

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/porter-ci/porter/pkg/creds"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/pipeline"
	"github.com/porter-ci/porter/pkg/vars"
)

// InterpolateString fills in the ((vars)) of s (a resource's
// webhook_token) from pipeline p's dummy var_sources and its team's
// credential manager, as Concourse evaluates a webhook token. Vault
// var_sources are not read here: their client is a build's.
func (e APIEngine) InterpolateString(ctx context.Context, p db.Pipeline, s string) (string, error) {
	if len(vars.Names(s)) == 0 {
		return s, nil
	}
	r := pipelineVars{creds: creds.Resolver{K: e.s.credentials(), Team: p.TeamName, Pipeline: p.Name}}
	var cfg struct {
		VarSources []struct {
			Name   string `json:"name"`
			Type   string `json:"type"`
			Config any    `json:"config"`
		} `json:"var_sources"`
	}
	if err := json.Unmarshal(p.Config, &cfg); err != nil {
		return "", fmt.Errorf("pipeline %s: decode its var_sources: %w", p.Name, err)
	}
	for _, src := range cfg.VarSources {
		if src.Type != "dummy" {
			continue
		}
		values, err := pipeline.DummyVars(src.Config)
		if err != nil {
			return "", fmt.Errorf("pipeline %s: var source %q: %w", p.Name, src.Name, err)
		}
		if r.sources == nil {
			r.sources = map[string]vars.Resolver{}
		}
		r.sources[src.Name] = vars.Static(values)
	}
	out, _, err := vars.Interpolate(ctx, s, r)
	if err != nil {
		return "", err
	}
	switch v := out.(type) {
	case string:
		return v, nil
	case map[string]any, []any, nil:
		return "", fmt.Errorf("%s is not a string", s)
	default:
		return fmt.Sprint(v), nil
	}
}

// pipelineVars resolves a pipeline's ((vars)) outside a build: a named
// var source's from that source, the others from the credential manager.
type pipelineVars struct {
	sources map[string]vars.Resolver
	creds   vars.Resolver
}

func (r pipelineVars) Get(ctx context.Context, ref vars.Ref) (any, bool, error) {
	if ref.Source == "" {
		return r.creds.Get(ctx, ref)
	}
	src, ok := r.sources[ref.Source]
	if !ok {
		return nil, false, fmt.Errorf("((%s)): var source %q is not a dummy var source of the pipeline", ref, ref.Source)
	}
	return src.Get(ctx, vars.Ref{Path: ref.Path, Fields: ref.Fields})
}
