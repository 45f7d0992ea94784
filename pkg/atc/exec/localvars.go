package exec

import (
	"context"
	"fmt"

	"github.com/porter-ci/porter/pkg/atc/exec/stepvars"
	"github.com/porter-ci/porter/pkg/atc/exec/varsources"
	"github.com/porter-ci/porter/pkg/db"
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
	return varsources.Sources{Team: x.b.Team, Pipeline: x.b.Pipeline, Credentials: x.r.creds, Redactor: x.d,
		Guard: x.r.cfg.VarSourceGuard}.Resolvers(ctx, p.Config)
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
