package exec

import (
	"context"

	"github.com/porter-ci/porter/pkg/atc/exec/stepvars"
	"github.com/porter-ci/porter/pkg/atc/exec/taskplan"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/creds"
)

// prepareTask is the task as it runs (taskplan.Prepare): its `file:` read
// from the build's artifacts, its ((vars)) filled in.
func (x *RunState) prepareTask(ctx context.Context, tp *concourse.TaskPlan) (*concourse.TaskPlan, error) {
	return taskplan.Prepare(ctx, tp, x.stepVars(tp.Vars), func(ctx context.Context, tp *concourse.TaskPlan) ([]byte, error) {
		return taskplan.ReadFile(ctx, x.r.store, x.artifact, tp)
	})
}

// redactEventConfig is a task's event config as the build's state, events
// and audit trail may show it.
func redactEventConfig[T any](red *creds.Redactor, cfg T) T {
	if red == nil {
		return cfg
	}
	return stepvars.RedactValue(red, cfg)
}
