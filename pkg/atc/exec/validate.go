package exec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/porter-ci/porter/pkg/atc/exec/stepplan"
	"github.com/porter-ci/porter/pkg/atc/exec/taskplan"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/names"
	"github.com/porter-ci/porter/pkg/pipeline"
)

// ValidatePlan checks a one-off build's plan before anything is recorded:
// every step is one this server runs, every task config is valid, every
// uploaded input is the team's. The errors name the step.
func (s *Runner) ValidatePlan(ctx context.Context, team db.Team, plan *concourse.Plan) error {
	if err := pipeline.CheckPlanLimits(plan); err != nil {
		return badRequest{err}
	}
	var errs []error
	ids := map[concourse.PlanID]bool{}
	var check func(p *concourse.Plan)
	check = func(p *concourse.Plan) {
		if p.ID != "" {
			if ids[p.ID] {
				errs = append(errs, fmt.Errorf("plan id %q is used twice", p.ID))
			}
			ids[p.ID] = true
		}
		switch {
		case p.Do != nil, p.InParallel != nil, p.Retry != nil, p.OnSuccess != nil, p.OnFailure != nil,
			p.OnAbort != nil, p.OnError != nil, p.Ensure != nil, p.Try != nil:
		case p.Timeout != nil:
			if _, err := stepplan.PositiveDuration(p.Timeout.Duration); err != nil {
				errs = append(errs, fmt.Errorf("timeout: %w", err))
			}
		case p.Task != nil:
			if p.Task.Name != "" {
				if err := names.Check("task", p.Task.Name); err != nil {
					errs = append(errs, err)
					return
				}
			}
			if err := taskplan.Validate(p.Task); err != nil {
				errs = append(errs, err)
			} else if err := s.pods.CheckPlacement(requirements(team.Name, p.Task.Tags, taskplan.Platform(p.Task), true)); err != nil {
				errs = append(errs, fmt.Errorf("task %q: %w", p.Task.Name, err))
			}
		case p.ArtifactInput != nil:
			if err := names.Check("input", p.ArtifactInput.Name); err != nil {
				errs = append(errs, err)
				return
			}
			a, err := s.db.Artifact(ctx, p.ArtifactInput.ArtifactID)
			switch {
			case errors.Is(err, db.ErrNotFound) || (err == nil && a.TeamID != team.ID):
				errs = append(errs, fmt.Errorf("input %q: artifact %d does not exist in team %q", p.ArtifactInput.Name, p.ArtifactInput.ArtifactID, team.Name))
			case err != nil:
				errs = append(errs, fmt.Errorf("input %q: %w", p.ArtifactInput.Name, err))
			}
		case p.Get != nil, p.Put != nil, p.Check != nil:
			if err := stepplan.ValidateResource(p); err != nil {
				errs = append(errs, err)
			}
		case p.ArtifactOutput != nil:
			if p.ArtifactOutput.Name == "" {
				errs = append(errs, errors.New("an artifact_output step has no name"))
			} else if err := names.Check("output", p.ArtifactOutput.Name); err != nil {
				errs = append(errs, err)
			}
		case p.LoadVar != nil:
			if err := names.Check("load_var", p.LoadVar.Name); err != nil {
				errs = append(errs, err)
			} else if _, err := stepplan.LoadVarFormat(p.LoadVar); err != nil {
				errs = append(errs, err)
			} else if p.LoadVar.File == "" {
				errs = append(errs, fmt.Errorf("load_var %s: no file specified", p.LoadVar.Name))
			}
		case p.SetPipeline != nil:
			if p.SetPipeline.File == "" {
				errs = append(errs, fmt.Errorf("set_pipeline %s: no file specified", p.SetPipeline.Name))
			}
		case p.Across != nil:
			// The substep is checked as written; each run's copy differs
			// only in its ((.:vars)) and ids.
			var sub concourse.Plan
			if err := json.Unmarshal([]byte(p.Across.SubStepTemplate), &sub); err != nil {
				errs = append(errs, fmt.Errorf("across: the substep: %w", err))
				return
			}
			sub.Each(check)
		default:
			// Kinds that no step runs: refused as Run would refuse them.
			if _, err := stepFor(p.Kind(), p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	plan.Each(check)
	if len(errs) > 0 {
		return badRequest{errors.Join(errs...)}
	}
	return nil
}

// badRequest marks an error in what the client sent: the API answers it
// with 400.
type badRequest struct{ error }

func (badRequest) BadRequest() bool { return true }
func (e badRequest) Unwrap() error  { return e.error }
