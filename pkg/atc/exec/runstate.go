package exec

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/atc/exec/compositestep"
	"github.com/porter-ci/porter/pkg/atc/exec/lookahead"
	"github.com/porter-ci/porter/pkg/atc/exec/stepvars"
	"github.com/porter-ci/porter/pkg/atc/exec/taskimage"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/vars"
	"go.opentelemetry.io/otel/trace"
)

// Step is one step of a build's plan, as Concourse's exec.Step: it runs
// with its build's state and succeeds (ok), fails (!ok) or errors (err);
// an abort is the error ErrAborted.
type Step interface {
	Run(ctx context.Context, state *RunState) (bool, error)
}

// RunState is what the steps of one build share while it runs: its
// artifacts so far, its local vars, its pipeline's var_sources, and the
// delegates its steps report through.
type RunState struct {
	r *Runner
	b *buildstate.Build
	// d reports for the build (the engine's BuildDelegate).
	d BuildDelegate

	// leaf runs the steps that do work (tasks, artifact steps, ...); the
	// composite steps above it are pure control flow, tested with fakes.
	leaf func(ctx context.Context, p *concourse.Plan, step Step) (bool, error)

	mu sync.Mutex
	// artifacts are the build's named artifacts so far.
	artifacts map[string]api.ArtifactRef
	// fetched is what the get that made an artifact fetched (see
	// noteFetched), for tasks whose image: names it.
	fetched map[string]taskimage.Fetched

	// ahead are the pods declared ahead of their tasks' turn, aheadSpans
	// the step spans begun for them (mu).
	ahead      lookahead.Pods[*aheadPod]
	aheadSpans map[concourse.PlanID]trace.Span
	// prepared are tasks from a file read before their turn (mu).
	prepared map[concourse.PlanID]*concourse.TaskPlan

	// locals are the build's local vars (load_var's); an across run
	// carries its own child scope in its context.
	locals *stepvars.Scope
	// sources are the pipeline's var_sources, read once.
	sourcesOnce sync.Once
	sources     map[string]vars.Resolver
	sourcesErr  error
}

func newRunState(r *Runner, b *buildstate.Build) *RunState {
	x := &RunState{r: r, b: b, artifacts: map[string]api.ArtifactRef{}, locals: stepvars.NewScope()}
	if r != nil && r.delegates != nil {
		x.d = r.delegates.BuildDelegate(b)
	}
	x.leaf = x.observed(func(ctx context.Context, p *concourse.Plan, step Step) (bool, error) {
		x.showReused(ctx, p)
		return step.Run(ctx, x)
	})
	return x
}

// delegate reports for the step of plan id.
func (x *RunState) delegate(id concourse.PlanID) StepDelegate { return x.d.StepDelegate(id) }

// shutdownCtx is the server's: hooks detached from an aborted build still
// stop with the server.
func (x *RunState) shutdownCtx() context.Context {
	return x.r.shutdownCtx()
}

func (x *RunState) artifact(name string) (api.ArtifactRef, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	a, ok := x.artifacts[name]
	return a, ok
}

func (x *RunState) setArtifact(name string, a api.ArtifactRef) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.artifacts[name] = a
	delete(x.fetched, name)
}

// interrupted is the error of a context that ended, by its cause.
func interrupted(ctx context.Context) error {
	if cause := context.Cause(ctx); cause != nil {
		return cause
	}
	return ctx.Err()
}

// Run runs the step of plan p: composite steps run their own steps
// through Run again, the others through the leaf seam.
func (x *RunState) Run(ctx context.Context, p *concourse.Plan) (bool, error) {
	if ctx.Err() != nil {
		return false, interrupted(ctx)
	}
	kind := p.Kind()
	if c, ok := compositestep.For(kind, p); ok {
		return c.Run(ctx, composites{x})
	}
	step, err := stepFor(kind, p)
	if err != nil {
		return false, fmt.Errorf("plan %s: %w", p.ID, err)
	}
	if kind.Composite() {
		return step.Run(ctx, x)
	}
	return x.leaf(ctx, p, step)
}

// stepFor is the step that runs plan p of kind k.
func stepFor(k concourse.StepKind, p *concourse.Plan) (Step, error) {
	switch k {
	case concourse.KindAcross:
		return AcrossStep{Plan: p}, nil
	case concourse.KindArtifactInput:
		return ArtifactInputStep{Plan: p}, nil
	case concourse.KindArtifactOutput:
		return ArtifactOutputStep{Plan: p}, nil
	case concourse.KindTask:
		return TaskStep{Plan: p}, nil
	case concourse.KindGet:
		return GetStep{Plan: p}, nil
	case concourse.KindPut:
		return PutStep{Plan: p}, nil
	case concourse.KindCheck:
		return CheckStep{Plan: p}, nil
	case concourse.KindLoadVar:
		return LoadVarStep{Plan: p}, nil
	case concourse.KindSetPipeline:
		return SetPipelineStep{Plan: p}, nil
	case concourse.KindRun:
		return nil, errors.New("run steps (Concourse's prototypes) are not supported by this server")
	}
	return nil, errors.New("the plan has no step")
}

// composites is the build's run as compositestep.Steps.
type composites struct{ x *RunState }

func (c composites) Run(ctx context.Context, p *concourse.Plan) (bool, error) { return c.x.Run(ctx, p) }

func (c composites) Detached(ctx context.Context) (context.Context, func()) { return c.x.detached(ctx) }

func (c composites) DeclareAhead(ctx context.Context, current *concourse.Plan, rest []concourse.Plan) {
	c.x.declareAhead(ctx, current, rest)
}

func (c composites) WithdrawAhead(ctx context.Context, rest []concourse.Plan, why string) {
	c.x.withdrawAhead(ctx, rest, why)
}

// detached is a context for hooks that run after an abort: it no longer
// ends with the build's, only when the server stops.
func (x *RunState) detached(ctx context.Context) (context.Context, func()) {
	hctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(x.shutdownCtx(), func() { cancel(ErrShutdown) })
	return hctx, func() { stop(); cancel(nil) }
}

// BuildResult is a build's status from its plan's outcome.
func BuildResult(ok bool, err error) concourse.BuildStatus {
	switch {
	case errors.Is(err, ErrAborted):
		return concourse.StatusAborted
	case err != nil:
		return concourse.StatusErrored
	case !ok:
		return concourse.StatusFailed
	}
	return concourse.StatusSucceeded
}
