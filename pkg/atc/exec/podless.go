package exec

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/porter-ci/porter/pkg/atc/exec/artifactfile"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/atc/exec/stepvars"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
)

// podless is what a step that runs no pod of its own (load_var,
// set_pipeline, across) needs of its build: its artifacts, its vars, its
// pipeline, and its record r and delegate d.
type podless struct {
	x *RunState
	d StepDelegate
	r *buildstate.StepRecord
}

func (in podless) ReadArtifactFile(ctx context.Context, what, file string) ([]byte, error) {
	return artifactfile.Read(ctx, in.x.r.store, in.x.artifact, what, file)
}

func (in podless) InterpolateJSON(ctx context.Context, doc json.RawMessage) (json.RawMessage, error) {
	return in.x.stepVars(nil).InterpolateJSON(ctx, doc)
}

func (in podless) Interpolate(ctx context.Context, v any) (any, error) {
	return in.x.stepVars(nil).Interpolate(ctx, v)
}

func (in podless) Scope(ctx context.Context) *stepvars.Scope { return in.x.scope(ctx) }

func (in podless) SetVar(ctx context.Context, name string, value any) {
	in.x.scope(ctx).Set(name, value)
}

func (in podless) Redact(secrets []string) { in.x.d.Redact(secrets) }

func (in podless) BuildPipeline(ctx context.Context) (db.Pipeline, error) {
	return in.x.buildPipeline(ctx)
}

func (in podless) Errored(ctx context.Context, err error) (bool, error) {
	return in.x.failStep(ctx, in.d, in.r, err)
}

// Finished ends the step as succeeded or failed.
func (in podless) Finished(ctx context.Context, succeeded bool) (bool, error) {
	status := concourse.StatusFailed
	if succeeded {
		status = concourse.StatusSucceeded
	}
	in.d.Finished(succeeded)
	in.x.b.Update(func() { in.r.Status, in.r.EndTime = status, time.Now().Unix() })
	in.x.r.SaveState(ctx, in.x.b)
	return succeeded, nil
}

// Started: an across step announced its runs.
func (in podless) Started(ctx context.Context) {
	in.x.b.Update(func() { in.r.Status = concourse.StatusStarted })
	in.x.r.SaveState(ctx, in.x.b)
}

// Ended: an across step's runs ended.
func (in podless) Ended(ctx context.Context, ok bool, err error) {
	in.x.b.Update(func() { in.r.Status, in.r.EndTime = BuildResult(ok, err), time.Now().Unix() })
	in.x.r.SaveState(ctx, in.x.b)
}

// failStep ends a step that runs no pod as errored, with err in the build.
func (x *RunState) failStep(ctx context.Context, d StepDelegate, r *buildstate.StepRecord, err error) (bool, error) {
	if errors.Is(err, ErrAborted) || errors.Is(err, ErrShutdown) || errors.Is(err, ErrTimeout) {
		return false, err
	}
	d.Errored(err.Error())
	x.b.Update(func() { r.Status, r.Error, r.EndTime = concourse.StatusErrored, err.Error(), time.Now().Unix() })
	x.r.SaveState(ctx, x.b)
	return false, err
}
