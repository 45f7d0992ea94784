package exec

import (
	"context"
	"encoding/json"
	"time"

	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/atc/exec/setpipelinestep"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
)

// SetPipelineStep saves a pipeline's config from a file of an artifact, as
// Concourse's set_pipeline step (setpipelinestep.Step).
type SetPipelineStep struct{ Plan *concourse.Plan }

func (s SetPipelineStep) Run(ctx context.Context, x *RunState) (bool, error) {
	p := s.Plan
	d := x.delegate(p.ID)
	r := x.b.Record(p.ID, p.SetPipeline.Name, concourse.KindSetPipeline)
	if r.Finished() {
		// Saved before a restart; saving again would only repeat it.
		return stepOutcome(r.Status, r.Error)
	}
	in := podless{x: x, d: d, r: r}
	step := setpipelinestep.Step{Plan: p.SetPipeline, BaseTypes: x.r.baseTypeNames(),
		Build:    setpipelinestep.Build{ID: x.b.ID, Team: x.b.Team, TeamID: x.b.TeamID, Pipeline: x.b.Pipeline},
		Delegate: d, End: in, Files: in, Vars: in, Self: in, Store: x.r.db, Log: x.r.log}
	if x.r.engine != nil {
		step.Scheduler = x.r.engine
	}
	return step.Run(ctx)
}

// podless is what a step that runs no pod (set_pipeline) needs of its
// build: its artifacts, its vars, its pipeline, and ending it (its
// delegate and its record r).
type podless struct {
	x *RunState
	d StepDelegate
	r *buildstate.StepRecord
}

func (in podless) ReadArtifactFile(ctx context.Context, what, file string) ([]byte, error) {
	return in.x.readArtifactFile(ctx, what, file)
}

func (in podless) InterpolateJSON(ctx context.Context, doc json.RawMessage) (json.RawMessage, error) {
	return in.x.stepVars(nil).InterpolateJSON(ctx, doc)
}

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
