package exec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/names"
	"github.com/porter-ci/porter/pkg/pipeline"
	"github.com/porter-ci/porter/pkg/vars"
)

// stepOutput writes a step's stdout or stderr lines (its delegate's
// Stdout or Stderr).
type stepOutput func(msg string)

func (o stepOutput) printf(format string, args ...any) { o(fmt.Sprintf(format, args...)) }

// setPipeline saves a pipeline's config from a file of an artifact, as
// Concourse's set_pipeline step: the config's ((vars)) that the step's
// instance_vars, vars and var_files have are filled in (in that order of
// precedence), the rest are left for the pipeline's builds; the diff
// against the saved config goes to the build's log; a config that is not
// valid fails the step. The pipeline remembers this job and build.
type SetPipelineStep struct{ Plan *concourse.Plan }

func (s SetPipelineStep) Run(ctx context.Context, x *RunState) (bool, error) {
	p := s.Plan
	d := x.delegate(p.ID)
	r := x.b.Record(p.ID, p.SetPipeline.Name, concourse.KindSetPipeline)
	if r.Finished() {
		// Saved before a restart; saving again would only repeat it.
		return stepOutcome(r.Status, r.Error)
	}
	d.Initializing()
	sp, err := x.interpolateSetPipeline(ctx, p.SetPipeline)
	if err != nil {
		return x.failStep(ctx, d, r, err)
	}
	stdout, stderr := stepOutput(d.Stdout), stepOutput(d.Stderr)
	fail := func() (bool, error) {
		d.Finished(false)
		x.b.Update(func() { r.Status, r.EndTime = concourse.StatusFailed, time.Now().Unix() })
		x.r.SaveState(ctx, x.b)
		return false, nil
	}

	if sp.Name == "self" {
		if x.b.Pipeline == "" {
			return x.failStep(ctx, d, r, errors.New("set_pipeline: self: only a job's build has a pipeline of its own"))
		}
		self, err := x.buildPipeline(ctx)
		if err != nil {
			return x.failStep(ctx, d, r, fmt.Errorf("set_pipeline: self: %w", err))
		}
		// A pipeline sets itself, instance vars and all, in its own team.
		sp.Name, sp.InstanceVars, sp.Team = self.Name, self.InstanceVars, ""
	}
	if err := names.Check("pipeline", sp.Name); err != nil {
		stderr.printf("ERROR: %v\n", err)
		return fail()
	}
	if sp.Team != "" {
		if err := names.CheckTeam(sp.Team); err != nil {
			stderr.printf("ERROR: team name %v\n", err)
			return fail()
		}
	}
	ref := db.PipelineRef{Name: sp.Name, InstanceVars: sp.InstanceVars}
	body, err := x.readArtifactFile(ctx, "set_pipeline "+sp.Name, sp.File)
	if err != nil {
		return x.failStep(ctx, d, r, err)
	}
	d.Starting()

	cfg, err := x.pipelineConfig(ctx, sp, body)
	if err != nil {
		stderr.printf("error parsing pipeline:\n%v\n", err)
		return fail()
	}
	warnings, problems := pipeline.Validate(cfg, pipeline.Options{BaseTypes: x.r.baseTypeNames()})
	for _, w := range warnings {
		stderr.printf("WARNING: %s\n", w.Message)
	}
	if len(problems) > 0 {
		stderr.printf("invalid pipeline:\n")
		for _, e := range problems {
			stderr.printf("- %s", e)
		}
		return fail()
	}

	team, err := x.targetTeam(ctx, sp.Team)
	if err != nil {
		return x.failStep(ctx, d, r, err)
	}
	var from int64
	existing := &concourse.Config{}
	current, err := x.r.db.PipelineInstance(ctx, team.ID, ref)
	found := err == nil
	switch {
	case errors.Is(err, db.ErrNotFound):
	case err != nil:
		return x.failStep(ctx, d, r, fmt.Errorf("set_pipeline %s: read the current config: %w", sp.Name, err))
	default:
		from = current.ConfigVersion
		if err := json.Unmarshal(current.Config, existing); err != nil {
			return x.failStep(ctx, d, r, fmt.Errorf("set_pipeline %s: read the current config: %w", sp.Name, err))
		}
	}
	parent, err := x.pipelineParent(ctx)
	if err != nil {
		return x.failStep(ctx, d, r, err)
	}

	var diff strings.Builder
	if !pipeline.Diff(&diff, existing, cfg) {
		stdout.printf("no changes to apply.\n")
		if found {
			if err := x.r.db.SetPipelineParent(ctx, current.ID, parent); err != nil {
				return x.failStep(ctx, d, r, fmt.Errorf("set_pipeline %s: %w", sp.Name, err))
			}
		}
		d.SetPipelineChanged(false)
		return x.endSetPipeline(ctx, d, r)
	}
	stdout.printf("%s", diff.String())
	stdout.printf("setting pipeline: %s\n", ref)
	d.SetPipelineChanged(true)
	saved, _, err := x.r.db.SavePipelineFromBuild(ctx, team.ID, ref, *cfg, from, parent)
	switch {
	case errors.Is(err, db.ErrSetByNewerBuild):
		stderr.printf("\x1b[1;33mWARNING: the pipeline was not saved because it was already saved by a newer build\x1b[0m\n")
		return x.endSetPipeline(ctx, d, r)
	case err != nil:
		return x.failStep(ctx, d, r, fmt.Errorf("set_pipeline %s: %w", sp.Name, err))
	}
	stdout.printf("done\n")
	x.r.log.InfoContext(ctx, "pipeline set by a build", "team", team.Name, "pipeline", ref.String(), "id", saved.ID,
		"build", x.b.ID, "config_version", saved.ConfigVersion)
	if x.r.engine != nil {
		// New resources are due for their first check, new jobs for
		// scheduling.
		x.r.engine.WakeScheduler()
	}
	return x.endSetPipeline(ctx, d, r)
}

func (x *RunState) endSetPipeline(ctx context.Context, d StepDelegate, r *buildstate.StepRecord) (bool, error) {
	d.Finished(true)
	x.b.Update(func() { r.Status, r.EndTime = concourse.StatusSucceeded, time.Now().Unix() })
	x.r.SaveState(ctx, x.b)
	return true, nil
}

// interpolateSetPipeline fills in the ((vars)) of the step's own fields.
func (x *RunState) interpolateSetPipeline(ctx context.Context, sp *concourse.SetPipelinePlan) (*concourse.SetPipelinePlan, error) {
	body, err := json.Marshal(sp)
	if err != nil {
		return nil, fmt.Errorf("set_pipeline %s: %w", sp.Name, err)
	}
	filled, err := x.stepVars(nil).InterpolateJSON(ctx, body)
	if err != nil {
		return nil, fmt.Errorf("set_pipeline %s: %w", sp.Name, err)
	}
	out := &concourse.SetPipelinePlan{}
	if err := json.Unmarshal(filled, out); err != nil {
		return nil, fmt.Errorf("set_pipeline %s: %w", sp.Name, err)
	}
	return out, nil
}

// pipelineConfig reads the config a set_pipeline step sets.
func (x *RunState) pipelineConfig(ctx context.Context, sp *concourse.SetPipelinePlan, body []byte) (*concourse.Config, error) {
	var static vars.Multi
	if len(sp.InstanceVars) > 0 {
		static = append(static, vars.Static(maps.Clone(sp.InstanceVars)))
	}
	if len(sp.Vars) > 0 {
		static = append(static, vars.Static(sp.Vars))
	}
	for _, f := range sp.VarFiles {
		b, err := x.readArtifactFile(ctx, "set_pipeline "+sp.Name+": var_files", f)
		if err != nil {
			return nil, err
		}
		values := map[string]any{}
		if err := yaml.Unmarshal(b, &values); err != nil {
			return nil, fmt.Errorf("var_files %s: %w", f, err)
		}
		static = append(static, vars.Static(values))
	}
	if len(static) > 0 {
		var err error
		if body, err = vars.InterpolateTemplateDefined(ctx, body, static); err != nil {
			return nil, err
		}
	}
	return pipeline.Parse(body)
}

// targetTeam is the team a set_pipeline step sets a pipeline in: the
// build's, or another one when the build's team is the main team.
func (x *RunState) targetTeam(ctx context.Context, name string) (db.Team, error) {
	if name == "" || name == x.b.Team {
		return db.Team{ID: x.b.TeamID, Name: x.b.Team}, nil
	}
	if x.b.Team != auth.MainTeam {
		return db.Team{}, fmt.Errorf("only the %s team can set another team's pipeline", auth.MainTeam)
	}
	t, err := x.r.db.Team(ctx, name)
	if errors.Is(err, db.ErrNotFound) {
		return db.Team{}, fmt.Errorf("team %s not found", name)
	}
	if err != nil {
		return db.Team{}, fmt.Errorf("team %s: %w", name, err)
	}
	return t, nil
}

// pipelineParent is the job and build a set_pipeline step of this build
// sets pipelines for.
func (x *RunState) pipelineParent(ctx context.Context) (db.PipelineParent, error) {
	jb, err := x.r.db.JobBuildByID(ctx, x.b.ID)
	if err != nil {
		return db.PipelineParent{}, fmt.Errorf("set_pipeline: the build's job: %w", err)
	}
	return db.PipelineParent{JobID: jb.JobID, BuildID: x.b.ID}, nil
}
