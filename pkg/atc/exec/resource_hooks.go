package exec

import (
	"cmp"
	"context"
	"fmt"

	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
)

// recordCheck saves the versions (oldest first) a check step of b found,
// when b is a resource's check build and the step checks that resource,
// and wakes the scheduler if any is new. Other checks (of a resource
// type's image, in a job's or a one-off build) save nothing.
func (s *Runner) recordCheck(ctx context.Context, b *buildstate.Build, p *concourse.CheckPlan, versions []buildstate.Version) error {
	rec, err := s.db.JobBuildByID(ctx, b.ID)
	if err != nil {
		return fmt.Errorf("record the check's versions: %w", err)
	}
	if rec.ResourceID == 0 || len(versions) == 0 {
		return nil
	}
	if name := cmp.Or(p.Resource, p.Name); name != rec.ResourceName {
		return nil
	}
	vs := make([]db.NewVersion, len(versions))
	for i, v := range versions {
		vs[i] = db.NewVersion{Version: v.Version, Metadata: v.Metadata}
	}
	changed, err := s.db.SaveVersions(ctx, rec.ResourceID, vs)
	if err != nil {
		return fmt.Errorf("record the versions of %s: %w", rec.ResourceName, err)
	}
	if changed > 0 {
		s.engine.WakeScheduler()
	}
	return nil
}

// recordBuildVersion records the version a job build's get (input) or put
// (output) step named name used or produced, so that `passed:` sees it.
// Steps of one-off builds, and gets of images, record nothing.
func (s *Runner) recordBuildVersion(ctx context.Context, b *buildstate.Build, name, resource string, v buildstate.Version, input bool) error {
	rec, err := s.db.JobBuildByID(ctx, b.ID)
	if err != nil {
		return fmt.Errorf("record the version of %s: %w", name, err)
	}
	if rec.JobID == 0 || resource == "" {
		return nil // a one-off build's, or an image's (no pipeline resource)
	}
	r, err := s.db.LookupPipelineResource(ctx, rec.PipelineID, resource)
	if err != nil {
		return fmt.Errorf("record the version of %s: %w", name, err)
	}
	if err := s.db.SaveBuildVersion(ctx, rec.ID, rec.JobID, name, r.ID, db.NewVersion{Version: v.Version, Metadata: v.Metadata}, input); err != nil {
		return fmt.Errorf("record the version of %s: %w", name, err)
	}
	if !input {
		// A put's version is a new version of the resource: jobs
		// triggered by it may now run.
		s.engine.WakeScheduler()
	}
	return nil
}
