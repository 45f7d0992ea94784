package exec

import (
	"context"

	"github.com/porter-ci/porter/pkg/atc/exec/loadvarstep"
	"github.com/porter-ci/porter/pkg/concourse"
)

// LoadVarStep reads a file of an artifact into a local var of the build
// (loadvarstep.Step).
type LoadVarStep struct{ Plan *concourse.Plan }

func (s LoadVarStep) Run(ctx context.Context, x *RunState) (bool, error) {
	p := s.Plan
	d := x.delegate(p.ID)
	r := x.b.Record(p.ID, p.LoadVar.Name, concourse.KindLoadVar)
	in := podless{x: x, d: d, r: r}
	return loadvarstep.Step{Plan: p.LoadVar, Quiet: r.Finished(), Delegate: d, End: in, Files: in, Locals: in, Redactor: in}.Run(ctx)
}
