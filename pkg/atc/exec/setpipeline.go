package exec

import (
	"context"

	"github.com/porter-ci/porter/pkg/atc/exec/setpipelinestep"
	"github.com/porter-ci/porter/pkg/concourse"
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
		Delegate: d, End: in, Files: in, Vars: in, Self: in, Store: x.r.db, Scheduler: x.r.engine, Log: x.r.log}
	return step.Run(ctx)
}
