package exec

import (
	"context"

	"github.com/porter-ci/porter/pkg/atc/exec/planvalidate"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
)

// ValidatePlan checks a one-off build's plan before anything is recorded
// (planvalidate.Plan), against this server's workers and the team's
// artifacts.
func (s *Runner) ValidatePlan(ctx context.Context, team db.Team, plan *concourse.Plan) error {
	return planvalidate.Plan(ctx, s.pods.CheckPlacement, s.db.Artifact, team, plan)
}
