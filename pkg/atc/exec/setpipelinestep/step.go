// Package setpipelinestep is the set_pipeline step, as Concourse's
// atc/exec/set_pipeline_step.go: it saves a pipeline's config from a file
// of an artifact. What it needs of the build it runs in (its artifacts,
// its vars, its pipeline, its delegate and its step's record) comes through
// small interfaces, which exec implements.
package setpipelinestep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/names"
	"github.com/porter-ci/porter/pkg/pipeline"
	"github.com/porter-ci/porter/pkg/vars"
)

// Build is the build the step runs in.
type Build struct {
	ID     int64
	Team   string
	TeamID int
	// Pipeline is the name of a job build's pipeline ("" for a one-off
	// build).
	Pipeline string
}

// Delegate reports what the step does (exec's StepDelegate).
type Delegate interface {
	Initializing()
	Starting()
	Stdout(msg string)
	Stderr(msg string)
	SetPipelineChanged(changed bool)
}

// Ender ends the step: its delegate's Finished or Errored, and its record.
type Ender interface {
	// Finished ends the step as succeeded or failed: (succeeded, nil).
	Finished(ctx context.Context, succeeded bool) (bool, error)
	// Errored ends the step as errored with err: (false, err).
	Errored(ctx context.Context, err error) (bool, error)
}

// FileReader reads "<artifact>/<path>" from the build's artifacts; what
// names the step for errors.
type FileReader interface {
	ReadArtifactFile(ctx context.Context, what, file string) ([]byte, error)
}

// Interpolator fills in the ((vars)) of a JSON document with the step's
// vars.
type Interpolator interface {
	InterpolateJSON(ctx context.Context, doc json.RawMessage) (json.RawMessage, error)
}

// BuildPipeline is the pipeline of the build (a job build's).
type BuildPipeline interface {
	BuildPipeline(ctx context.Context) (db.Pipeline, error)
}

// Store is what the step reads and records in the database (*db.DB).
type Store interface {
	Team(ctx context.Context, name string) (db.Team, error)
	JobBuildByID(ctx context.Context, id int64) (db.JobBuild, error)
	PipelineInstance(ctx context.Context, teamID int, ref db.PipelineRef) (db.Pipeline, error)
	SavePipelineFromBuild(ctx context.Context, teamID int, ref db.PipelineRef, cfg concourse.Config, from int64, parent db.PipelineParent) (db.Pipeline, bool, error)
	SetPipelineParent(ctx context.Context, id int64, parent db.PipelineParent) error
}

// Scheduler is woken when a pipeline changes.
type Scheduler interface {
	WakeScheduler()
}

// stepOutput writes a step's stdout or stderr lines (its delegate's
// Stdout or Stderr).
type stepOutput func(msg string)

func (o stepOutput) printf(format string, args ...any) { o(fmt.Sprintf(format, args...)) }

// Step saves a pipeline's config from a file of an artifact, as
// Concourse's set_pipeline step: the config's ((vars)) that the step's
// instance_vars, vars and var_files have are filled in (in that order of
// precedence), the rest are left for the pipeline's builds; the diff
// against the saved config goes to the build's log; a config that is not
// valid fails the step. The pipeline remembers this job and build.
type Step struct {
	Plan  *concourse.SetPipelinePlan
	Build Build
	// BaseTypes are the names of the resource types the workers provide.
	BaseTypes []string

	Delegate Delegate
	End      Ender
	Files    FileReader
	Vars     Interpolator
	Self     BuildPipeline
	Store    Store
	// Scheduler is woken once a pipeline is saved (nil: none).
	Scheduler Scheduler
	Log       *slog.Logger
}

// Run runs the step, from its start (a step its build finished before a
// restart is not run again).
func (s Step) Run(ctx context.Context) (bool, error) {
	d := s.Delegate
	d.Initializing()
	sp, err := s.interpolate(ctx, s.Plan)
	if err != nil {
		return s.End.Errored(ctx, err)
	}
	stdout, stderr := stepOutput(d.Stdout), stepOutput(d.Stderr)
	fail := func() (bool, error) { return s.End.Finished(ctx, false) }

	if sp.Name == "self" {
		if s.Build.Pipeline == "" {
			return s.End.Errored(ctx, errors.New("set_pipeline: self: only a job's build has a pipeline of its own"))
		}
		self, err := s.Self.BuildPipeline(ctx)
		if err != nil {
			return s.End.Errored(ctx, fmt.Errorf("set_pipeline: self: %w", err))
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
	body, err := s.Files.ReadArtifactFile(ctx, "set_pipeline "+sp.Name, sp.File)
	if err != nil {
		return s.End.Errored(ctx, err)
	}
	d.Starting()

	cfg, err := s.pipelineConfig(ctx, sp, body)
	if err != nil {
		stderr.printf("error parsing pipeline:\n%v\n", err)
		return fail()
	}
	warnings, problems := pipeline.Validate(cfg, pipeline.Options{BaseTypes: s.BaseTypes})
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

	team, err := s.targetTeam(ctx, sp.Team)
	if err != nil {
		return s.End.Errored(ctx, err)
	}
	var from int64
	existing := &concourse.Config{}
	current, err := s.Store.PipelineInstance(ctx, team.ID, ref)
	found := err == nil
	switch {
	case errors.Is(err, db.ErrNotFound):
	case err != nil:
		return s.End.Errored(ctx, fmt.Errorf("set_pipeline %s: read the current config: %w", sp.Name, err))
	default:
		from = current.ConfigVersion
		if err := json.Unmarshal(current.Config, existing); err != nil {
			return s.End.Errored(ctx, fmt.Errorf("set_pipeline %s: read the current config: %w", sp.Name, err))
		}
	}
	parent, err := s.pipelineParent(ctx)
	if err != nil {
		return s.End.Errored(ctx, err)
	}

	var diff strings.Builder
	if !pipeline.Diff(&diff, existing, cfg) {
		stdout.printf("no changes to apply.\n")
		if found {
			if err := s.Store.SetPipelineParent(ctx, current.ID, parent); err != nil {
				return s.End.Errored(ctx, fmt.Errorf("set_pipeline %s: %w", sp.Name, err))
			}
		}
		d.SetPipelineChanged(false)
		return s.End.Finished(ctx, true)
	}
	stdout.printf("%s", diff.String())
	stdout.printf("setting pipeline: %s\n", ref)
	d.SetPipelineChanged(true)
	saved, _, err := s.Store.SavePipelineFromBuild(ctx, team.ID, ref, *cfg, from, parent)
	switch {
	case errors.Is(err, db.ErrSetByNewerBuild):
		stderr.printf("\x1b[1;33mWARNING: the pipeline was not saved because it was already saved by a newer build\x1b[0m\n")
		return s.End.Finished(ctx, true)
	case err != nil:
		return s.End.Errored(ctx, fmt.Errorf("set_pipeline %s: %w", sp.Name, err))
	}
	stdout.printf("done\n")
	s.Log.InfoContext(ctx, "pipeline set by a build", "team", team.Name, "pipeline", ref.String(), "id", saved.ID,
		"build", s.Build.ID, "config_version", saved.ConfigVersion)
	if s.Scheduler != nil {
		// New resources are due for their first check, new jobs for
		// scheduling.
		s.Scheduler.WakeScheduler()
	}
	return s.End.Finished(ctx, true)
}

// interpolate fills in the ((vars)) of the step's own fields.
func (s Step) interpolate(ctx context.Context, sp *concourse.SetPipelinePlan) (*concourse.SetPipelinePlan, error) {
	body, err := json.Marshal(sp)
	if err != nil {
		return nil, fmt.Errorf("set_pipeline %s: %w", sp.Name, err)
	}
	filled, err := s.Vars.InterpolateJSON(ctx, body)
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
func (s Step) pipelineConfig(ctx context.Context, sp *concourse.SetPipelinePlan, body []byte) (*concourse.Config, error) {
	var static vars.Multi
	if len(sp.InstanceVars) > 0 {
		static = append(static, vars.Static(maps.Clone(sp.InstanceVars)))
	}
	if len(sp.Vars) > 0 {
		static = append(static, vars.Static(sp.Vars))
	}
	for _, f := range sp.VarFiles {
		b, err := s.Files.ReadArtifactFile(ctx, "set_pipeline "+sp.Name+": var_files", f)
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
func (s Step) targetTeam(ctx context.Context, name string) (db.Team, error) {
	if name == "" || name == s.Build.Team {
		return db.Team{ID: s.Build.TeamID, Name: s.Build.Team}, nil
	}
	if s.Build.Team != auth.MainTeam {
		return db.Team{}, fmt.Errorf("only the %s team can set another team's pipeline", auth.MainTeam)
	}
	t, err := s.Store.Team(ctx, name)
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
func (s Step) pipelineParent(ctx context.Context) (db.PipelineParent, error) {
	jb, err := s.Store.JobBuildByID(ctx, s.Build.ID)
	if err != nil {
		return db.PipelineParent{}, fmt.Errorf("set_pipeline: the build's job: %w", err)
	}
	return db.PipelineParent{JobID: jb.JobID, BuildID: s.Build.ID}, nil
}
