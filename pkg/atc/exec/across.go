package exec

import (
	"context"

	"github.com/porter-ci/porter/pkg/atc/exec/acrossstep"
	"github.com/porter-ci/porter/pkg/concourse"
)

// AcrossStep runs its substep once for every combination of its vars'
// values, as Concourse's across step (acrossstep.Step).
type AcrossStep struct{ Plan *concourse.Plan }

func (s AcrossStep) Run(ctx context.Context, x *RunState) (bool, error) {
	p := s.Plan
	d := x.delegate(p.ID)
	r := x.b.Record(p.ID, "across", concourse.KindAcross)
	in := podless{x: x, d: d, r: r}
	return acrossstep.Step{Plan: p, Announce: !r.Finished() && r.Status == "", Delegate: d, Record: in, Locals: in, Vars: in, Steps: x}.Run(ctx)
}
