package exec

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atc/exec/stepvars"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/vars"
)

// executor runs one build's plan. Its outcome follows Concourse: a step
// succeeds (ok), fails (!ok) or errors (err); an abort is the error
// ErrAborted.
type executor struct {
	r *Runner
	b *Build

	// leaf runs the steps that do work (tasks, artifact steps); the
	// composite steps above it are pure control flow, tested with fakes.
	leaf func(ctx context.Context, p *concourse.Plan) (bool, error)

	mu sync.Mutex
	// artifacts are the build's named artifacts so far.
	artifacts map[string]api.ArtifactRef
	// fetched is what the get that made an artifact fetched (see
	// noteFetched), for tasks whose image: names it.
	fetched map[string]fetchedVersion

	// locals are the build's local vars (load_var's); an across run
	// carries its own child scope in its context.
	locals *stepvars.Scope
	// sources are the pipeline's var_sources, read once.
	sourcesOnce sync.Once
	sources     map[string]vars.Resolver
	sourcesErr  error
}

func newExecutor(r *Runner, b *Build) *executor {
	x := &executor{r: r, b: b, artifacts: map[string]api.ArtifactRef{}, locals: stepvars.NewScope()}
	x.leaf = x.observed(x.work)
	return x
}

// shutdownCtx is the server's: hooks detached from an aborted build still
// stop with the server.
func (x *executor) shutdownCtx() context.Context {
	return x.r.shutdownCtx()
}

func (x *executor) artifact(name string) (api.ArtifactRef, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	a, ok := x.artifacts[name]
	return a, ok
}

func (x *executor) setArtifact(name string, a api.ArtifactRef) {
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

func (x *executor) run(ctx context.Context, p *concourse.Plan) (bool, error) {
	if ctx.Err() != nil {
		return false, interrupted(ctx)
	}
	switch {
	case p.Do != nil:
		return x.do(ctx, *p.Do)
	case p.InParallel != nil:
		return x.inParallel(ctx, p.InParallel)
	case p.Retry != nil:
		var ok bool
		var err error
		for _, attempt := range *p.Retry {
			ok, err = x.run(ctx, &attempt)
			if (ok && err == nil) || ctx.Err() != nil {
				break
			}
		}
		return ok, err
	case p.Ensure != nil:
		ok, err := x.run(ctx, &p.Ensure.Step)
		// The hook runs even when the step was aborted; only a stopping
		// server skips it (the resumed build runs it).
		hookCtx := ctx
		if cause := context.Cause(ctx); errors.Is(cause, ErrAborted) || errors.Is(cause, ErrTimeout) {
			var release func()
			hookCtx, release = x.detached(ctx)
			defer release()
		}
		hookOK, hookErr := x.run(hookCtx, &p.Ensure.Next)
		return ok && hookOK, errors.Join(err, hookErr)
	case p.OnSuccess != nil:
		ok, err := x.run(ctx, &p.OnSuccess.Step)
		if err != nil || !ok {
			return ok, err
		}
		return x.run(ctx, &p.OnSuccess.Next)
	case p.OnFailure != nil:
		ok, err := x.run(ctx, &p.OnFailure.Step)
		if err == nil && !ok {
			_, hookErr := x.run(ctx, &p.OnFailure.Next)
			return false, hookErr
		}
		return ok, err
	case p.OnError != nil:
		ok, err := x.run(ctx, &p.OnError.Step)
		if err != nil && !errors.Is(err, ErrAborted) {
			hookCtx, release := x.detached(ctx)
			defer release()
			_, hookErr := x.run(hookCtx, &p.OnError.Next)
			return false, errors.Join(err, hookErr)
		}
		return ok, err
	case p.OnAbort != nil:
		ok, err := x.run(ctx, &p.OnAbort.Step)
		if errors.Is(err, ErrAborted) {
			hookCtx, release := x.detached(ctx)
			defer release()
			_, hookErr := x.run(hookCtx, &p.OnAbort.Next)
			return false, errors.Join(err, hookErr)
		}
		return ok, err
	case p.Try != nil:
		_, err := x.run(ctx, &p.Try.Step)
		if errors.Is(err, ErrAborted) {
			return false, err
		}
		return true, nil
	case p.Across != nil:
		return x.across(ctx, p)
	case p.Timeout != nil:
		d, err := time.ParseDuration(p.Timeout.Duration)
		if err != nil {
			return false, fmt.Errorf("timeout %q: %w", p.Timeout.Duration, err)
		}
		tctx, cancel := context.WithTimeoutCause(ctx, d, ErrTimeout)
		defer cancel()
		ok, err := x.run(tctx, &p.Timeout.Step)
		if errors.Is(err, ErrTimeout) {
			// A step that ran out of time failed; it did not error.
			return false, nil
		}
		return ok, err
	}
	return x.leaf(ctx, p)
}

// work runs a step that does work.
func (x *executor) work(ctx context.Context, p *concourse.Plan) (bool, error) {
	switch {
	case p.ArtifactInput != nil:
		return x.artifactInput(ctx, p)
	case p.ArtifactOutput != nil:
		return x.artifactOutput(ctx, p)
	case p.Task != nil:
		return x.task(ctx, p)
	case p.Get != nil:
		return x.get(ctx, x.r.cfg.BaseResourceTypeDefaults.Apply(p))
	case p.Put != nil:
		return x.put(ctx, x.r.cfg.BaseResourceTypeDefaults.Apply(p))
	case p.Check != nil:
		return x.check(ctx, x.r.cfg.BaseResourceTypeDefaults.Apply(p))
	case p.LoadVar != nil:
		return x.loadVar(ctx, p)
	case p.SetPipeline != nil:
		return x.setPipeline(ctx, p)
	}
	return false, fmt.Errorf("plan %s: %w", p.ID, unsupportedStep(p))
}

// detached is a context for hooks that run after an abort: it no longer
// ends with the build's, only when the server stops.
func (x *executor) detached(ctx context.Context) (context.Context, func()) {
	hctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(x.shutdownCtx(), func() { cancel(ErrShutdown) })
	return hctx, func() { stop(); cancel(nil) }
}

func (x *executor) do(ctx context.Context, steps []concourse.Plan) (bool, error) {
	for i := range steps {
		ok, err := x.run(ctx, &steps[i])
		if err != nil || !ok {
			return ok, err
		}
	}
	return true, nil
}

// inParallel runs steps at once, at most limit at a time; with fail_fast a
// failure stops the steps still running (as an abort would).
func (x *executor) inParallel(ctx context.Context, p *concourse.InParallelPlan) (bool, error) {
	return x.parallel(ctx, len(p.Steps), p.Limit, p.FailFast, func(ctx context.Context, i int) (bool, error) {
		return x.run(ctx, &p.Steps[i])
	})
}

// artifactInput names an uploaded artifact in the build.
func (x *executor) artifactInput(ctx context.Context, p *concourse.Plan) (bool, error) {
	in := p.ArtifactInput
	a, err := x.r.db.Artifact(ctx, in.ArtifactID)
	if err != nil {
		return false, fmt.Errorf("artifact %d for input %q: %w", in.ArtifactID, in.Name, err)
	}
	if a.TeamID != x.b.TeamID {
		return false, fmt.Errorf("artifact %d for input %q belongs to another team", in.ArtifactID, in.Name)
	}
	x.setArtifact(in.Name, api.ArtifactRef{Key: a.Key, Digest: a.Digest, Size: a.Size})
	return true, nil
}

// artifactOutput keeps a named artifact of the build for download.
func (x *executor) artifactOutput(ctx context.Context, p *concourse.Plan) (bool, error) {
	name := p.ArtifactOutput.Name
	a, ok := x.artifact(name)
	if !ok {
		return false, fmt.Errorf("output %q: no step of the build produced it", name)
	}
	r := x.b.record(p.ID, name, "artifact_output")
	if r.finished() {
		return true, nil
	}
	if err := x.r.retryDB(ctx, "keep an output", func(ctx context.Context) error {
		_, err := x.r.db.CreateArtifact(ctx, db.Artifact{TeamID: x.b.TeamID, BuildID: x.b.ID, Name: name,
			Key: a.Key, Digest: a.Digest, Size: a.Size, WorkerName: x.r.artifactWorker()})
		return err
	}); err != nil {
		return false, fmt.Errorf("keep output %q: %w", name, err)
	}
	x.b.Update(func() { r.Status = concourse.StatusSucceeded })
	x.r.SaveState(ctx, x.b)
	return true, nil
}

// unsupportedStep says which kind of step this server cannot run yet.
func unsupportedStep(p *concourse.Plan) error {
	kind := "an empty step"
	switch {
	case p.Get != nil:
		kind = "get"
	case p.Put != nil:
		kind = "put"
	case p.Check != nil:
		kind = "check"
	case p.Across != nil:
		kind = "across"
	case p.Run != nil:
		kind = "run"
	case p.SetPipeline != nil:
		kind = "set_pipeline"
	case p.LoadVar != nil:
		kind = "load_var"
	}
	return fmt.Errorf("%s steps are not supported by this server yet", kind)
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
