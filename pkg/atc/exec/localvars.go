package exec

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/pipeline"
	"github.com/porter-ci/porter/pkg/vars"
)

// localSource is the var source of a build's local vars: ((.:name)).
const localSource = "."

// localScope holds a build's local vars: those load_var set, and across's
// for one of its runs. A run of an across step sees its own values over
// the build's; what it loads stays in its scope, as in Concourse.
type localScope struct {
	parent *localScope

	mu   sync.Mutex
	vars map[string]any
}

func (s *localScope) child() *localScope {
	return &localScope{parent: s, vars: map[string]any{}}
}

func (s *localScope) set(name string, v any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.vars[name] = v
}

func (s *localScope) get(name string) (any, bool) {
	for sc := s; sc != nil; sc = sc.parent {
		sc.mu.Lock()
		v, ok := sc.vars[name]
		sc.mu.Unlock()
		if ok {
			return v, true
		}
	}
	return nil, false
}

type scopeKey struct{}

// withScope is ctx for the steps of one across run.
func withScope(ctx context.Context, s *localScope) context.Context {
	return context.WithValue(ctx, scopeKey{}, s)
}

// scope is the local vars the step running under ctx sees.
func (x *executor) scope(ctx context.Context) *localScope {
	if s, ok := ctx.Value(scopeKey{}).(*localScope); ok {
		return s
	}
	return x.locals
}

// buildVars resolves a step's ((vars)) by source: the build's local vars
// for ".", the pipeline's var_sources by name, and for the default source
// the step's static vars, then the team's credentials.
type buildVars struct {
	static vars.Static
	scope  *localScope
	// sources reads the pipeline's var_sources: only a var that names
	// one costs the lookup.
	sources func(ctx context.Context) (map[string]vars.Resolver, error)
	// rec records what credentials and var sources gave.
	rec *secretRecorder
}

func (r *buildVars) Get(ctx context.Context, ref vars.Ref) (any, bool, error) {
	switch ref.Source {
	case localSource:
		v, ok := r.scope.get(ref.Path)
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
		return (&secretRecorder{r: src, sink: r.rec}).Get(ctx, vars.Ref{Path: ref.Path})
	}
	return nil, false, fmt.Errorf("var source %q is not in the pipeline's var_sources", ref.Source)
}

// varSources are the resolvers of the build's pipeline's var_sources,
// read once per build (none for a one-off build). Each resolver's values
// are recorded by rec, so they are redacted like credentials.
func (x *executor) varSources(ctx context.Context) (map[string]vars.Resolver, error) {
	x.sourcesOnce.Do(func() {
		x.sources, x.sourcesErr = x.loadVarSources(ctx)
	})
	return x.sources, x.sourcesErr
}

func (x *executor) loadVarSources(ctx context.Context) (map[string]vars.Resolver, error) {
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
		default:
			// Validation refuses these when the pipeline is set.
			return nil, fmt.Errorf("var source %q: type %q is not supported by this server", name, typ)
		}
	}
	return out, nil
}

// resolver is what a step's ((vars)) are filled in from; what it reads
// from credentials and var sources is recorded in rec for redaction.
func (sv *stepVars) resolver(ctx context.Context, rec *secretRecorder) vars.Resolver {
	return &buildVars{static: sv.static, scope: sv.x.scope(ctx), sources: sv.x.varSources, rec: rec}
}

// buildPipeline is the pipeline of the build's job or check (by id: an
// instance of an instanced pipeline shares its name with the others).
func (x *executor) buildPipeline(ctx context.Context) (db.Pipeline, error) {
	jb, err := x.r.db.JobBuildByID(ctx, x.b.ID)
	if err != nil {
		return db.Pipeline{}, err
	}
	return x.r.db.PipelineByID(ctx, jb.PipelineID)
}
