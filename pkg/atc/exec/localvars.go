package exec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/porter-ci/porter/pkg/atc/exec/stepvars"
	"github.com/porter-ci/porter/pkg/creds"
	"github.com/porter-ci/porter/pkg/creds/vaultconfig"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/pipeline"
	"github.com/porter-ci/porter/pkg/vars"
)

// scope is the local vars the step running under ctx sees.
func (x *RunState) scope(ctx context.Context) *stepvars.Scope {
	return stepvars.ScopeOf(ctx, x.locals)
}

// varSources are the resolvers of the build's pipeline's var_sources,
// read once per build (none for a one-off build). Each resolver's values
// are recorded by rec, so they are redacted like credentials.
func (x *RunState) varSources(ctx context.Context) (map[string]vars.Resolver, error) {
	x.sourcesOnce.Do(func() {
		x.sources, x.sourcesErr = x.loadVarSources(ctx)
	})
	return x.sources, x.sourcesErr
}

func (x *RunState) loadVarSources(ctx context.Context) (map[string]vars.Resolver, error) {
	if x.b.Pipeline == "" || x.r == nil || x.r.db == nil {
		return nil, nil
	}
	p, err := x.buildPipeline(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the var_sources of pipeline %q: %w", x.b.Pipeline, err)
	}
	var cfg struct {
		VarSources []map[string]any `json:"var_sources"`
	}
	if err := json.Unmarshal(p.Config, &cfg); err != nil {
		return nil, fmt.Errorf("read the var_sources of pipeline %q: %w", x.b.Pipeline, err)
	}
	out := map[string]vars.Resolver{}
	for _, src := range cfg.VarSources {
		name, _ := src["name"].(string)
		typ, _ := src["type"].(string)
		switch typ {
		case "dummy":
			values, err := pipeline.DummyVars(src["config"])
			if err != nil {
				return nil, fmt.Errorf("var source %q: %w", name, err)
			}
			out[name] = vars.Static(values)
		case "vault":
			v, err := x.vaultSource(ctx, src["config"])
			if err != nil {
				return nil, fmt.Errorf("var source %q: %w", name, err)
			}
			out[name] = v
		default:
			// Validation refuses these when the pipeline is set.
			return nil, fmt.Errorf("var source %q: type %q is not supported by this server", name, typ)
		}
	}
	return out, nil
}

// buildPipeline is the pipeline of the build's job or check (by id: an
// instance of an instanced pipeline shares its name with the others).
func (x *RunState) buildPipeline(ctx context.Context) (db.Pipeline, error) {
	jb, err := x.r.db.JobBuildByID(ctx, x.b.ID)
	if err != nil {
		return db.Pipeline{}, err
	}
	return x.r.db.PipelineByID(ctx, jb.PipelineID)
}

// vaultSource is a var_source of type vault. Its config may name ((vars))
// (its client_token above all): they come from the team's credential
// manager, as in Concourse, and are redacted like any credential.
func (x *RunState) vaultSource(ctx context.Context, config any) (vars.Resolver, error) {
	if m, ok := config.(map[string]any); ok && stepvars.ContainsVars(m) {
		filled, used, err := vars.Interpolate(ctx, m, creds.Resolver{K: x.r.creds, Team: x.b.Team, Pipeline: x.b.Pipeline})
		if used != nil {
			x.d.Redact(used.Redactions())
		}
		if err != nil {
			return nil, fmt.Errorf("fill in the ((vars)) of its config: %w", err)
		}
		config = filled
	}
	cfg, problems := vaultconfig.FromVarSource(config)
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	v, err := creds.NewVault(cfg, creds.WithDialControl(x.r.cfg.VarSourceGuard.Control))
	if err != nil {
		return nil, err
	}
	return v.Source(x.b.Team, x.b.Pipeline), nil
}
