// Package planvalidate checks a one-off build's plan (fly execute's)
// before the build is recorded, so a plan the server cannot run is
// refused with 400 naming the step, not recorded as an errored build.
package planvalidate

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
	"github.com/porter-ci/porter/pkg/worker"
)

// Placement says whether some worker can run a step with these
// requirements.
type Placement func(req worker.Requirements) error

// Artifacts finds an uploaded artifact (db.ErrNotFound: none).
type Artifacts func(ctx context.Context, id int64) (db.Artifact, error)

// Plan checks a one-off build's plan before anything is recorded: every
// step is one this server runs, every task config is valid and can be
// placed, every uploaded input is the team's. The errors name the step;
// they are the client's (the error has BadRequest).
func Plan(ctx context.Context, placement Placement, artifacts Artifacts, team db.Team, plan *concourse.Plan) error {
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
			} else if err := placement(worker.StepRequirements(team.Name, p.Task.Tags, taskplan.Platform(p.Task), true)); err != nil {
				errs = append(errs, fmt.Errorf("task %q: %w", p.Task.Name, err))
			}
		case p.ArtifactInput != nil:
			if err := names.Check("input", p.ArtifactInput.Name); err != nil {
				errs = append(errs, err)
				return
			}
			a, err := artifacts(ctx, p.ArtifactInput.ArtifactID)
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
		case p.Run != nil:
			errs = append(errs, errors.New("run steps (Concourse's prototypes) are not supported by this server"))
		default:
			errs = append(errs, errors.New("a step of the plan has no kind this server knows"))
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
