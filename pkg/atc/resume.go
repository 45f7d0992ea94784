package atc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/atc/exec/reuse"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
)

// notResumable says why a build cannot be resumed: a conflict (the API's
// 409) whose message is the reason alone.
type notResumable string

func (e notResumable) Error() string { return string(e) }

func (e notResumable) Is(target error) bool { return target == db.ErrConflict }

// ResumeBuild makes a new build of rec's job that resumes rec, a failed or
// errored build: named as rerun-build names it (N.1), with rec's inputs
// and rec's own plan (not the job's config as it is now), it reuses the
// steps of rec that succeeded (package reuse) and runs from the step that
// failed. The scheduler starts it as any pending build.
func (e APIEngine) ResumeBuild(ctx context.Context, rec db.Build, createdBy string) (db.JobBuild, error) {
	jb, err := e.s.db.JobBuildByID(ctx, rec.ID)
	if err != nil {
		return db.JobBuild{}, fmt.Errorf("resume build %d: %w", rec.ID, err)
	}
	if jb.JobID == 0 {
		return db.JobBuild{}, notResumable(fmt.Sprintf("resume build %d: only a job's build can be resumed (run a one-off build again with fly execute)", rec.ID))
	}
	if jb.Status != concourse.StatusFailed && jb.Status != concourse.StatusErrored {
		return db.JobBuild{}, notResumable(fmt.Sprintf("resume build %s of %s/%s: it is %s; only a failed or errored build can be resumed",
			jb.Name, jb.PipelineName, jb.JobName, jb.Status))
	}
	if len(jb.Plan) == 0 {
		return db.JobBuild{}, notResumable(fmt.Sprintf("resume build %s of %s/%s: it never started, so nothing of it can be reused (rerun it)",
			jb.Name, jb.PipelineName, jb.JobName))
	}
	var plan concourse.Plan
	if err := json.Unmarshal(jb.Plan, &plan); err != nil {
		return db.JobBuild{}, fmt.Errorf("resume build %d: decode its plan: %w", rec.ID, err)
	}
	var failed buildstate.BuildState
	if len(jb.State) > 0 {
		if err := json.Unmarshal(jb.State, &failed); err != nil {
			return db.JobBuild{}, fmt.Errorf("resume build %d: decode its state: %w", rec.ID, err)
		}
	}
	seeded := reuse.Seed(&plan, failed, jb.Name)
	if err := e.s.reusedOutputsExist(ctx, seeded); err != nil {
		return db.JobBuild{}, fmt.Errorf("resume build %s of %s/%s: %w", jb.Name, jb.PipelineName, jb.JobName, err)
	}
	state, err := json.Marshal(seeded)
	if err != nil {
		return db.JobBuild{}, fmt.Errorf("resume build %d: encode the state it starts from: %w", rec.ID, err)
	}
	nb, err := e.s.db.ResumeJobBuild(ctx, jb, createdBy, db.Resume{Plan: jb.Plan, State: state})
	if err != nil {
		return db.JobBuild{}, fmt.Errorf("resume build %d: %w", rec.ID, err)
	}
	e.s.log.Info("build resumed", "build", rec.ID, "resumed_by", nb.ID, "name", nb.Name, "reused_steps", len(seeded.Steps))
	e.s.wakeScheduler()
	return nb, nil
}

// reusedOutputsExist checks that the outputs of the steps a resumed build
// reuses are still in the blobstore. They are kept while a build that
// names them in its state is unfinished or ended within the artifact
// retention (gc: ReferencedArtifactKeys), so this fails only for a build
// that ended longer ago.
func (s *Server) reusedOutputsExist(ctx context.Context, st buildstate.BuildState) error {
	for id, r := range st.Steps {
		for name, a := range r.Outputs {
			_, err := s.store.Stat(ctx, a.Key)
			switch {
			case errors.Is(err, blobstore.ErrNotFound):
				return notResumable(fmt.Sprintf("step %q (plan %s): its output %q is no longer stored (the artifact retention is over); rerun the build instead",
					r.Name, id, name))
			case err != nil:
				return fmt.Errorf("step %q (plan %s): look up its output %q: %w", r.Name, id, name, err)
			}
		}
	}
	return nil
}

// resumedState is the state a build that resumes another starts from
// (recorded when it was made) and the build it resumes; nothing for
// another build.
func (s *Server) resumedState(ctx context.Context, rec db.JobBuild) (buildstate.BuildState, *buildstate.BuildRef, error) {
	var st buildstate.BuildState
	if rec.ResumedFrom == 0 {
		return st, nil, nil
	}
	if len(rec.State) > 0 {
		if err := json.Unmarshal(rec.State, &st); err != nil {
			return st, nil, fmt.Errorf("build %d: decode the state it resumes from: %w", rec.ID, err)
		}
	}
	from, err := s.db.Build(ctx, rec.ResumedFrom)
	if err != nil {
		return st, nil, fmt.Errorf("build %d: the build it resumes: %w", rec.ID, err)
	}
	return st, &buildstate.BuildRef{ID: from.ID, Name: from.Name, AuditID: blobstore.AuditID(from.ID, from.CreateTime)}, nil
}
