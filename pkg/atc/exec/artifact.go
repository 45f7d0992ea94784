package exec

import (
	"context"
	"fmt"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
)

// ArtifactInputStep names an uploaded artifact (fly execute -i) in the
// build.
type ArtifactInputStep struct{ Plan *concourse.Plan }

func (s ArtifactInputStep) Run(ctx context.Context, x *RunState) (bool, error) {
	in := s.Plan.ArtifactInput
	a, err := x.r.db.Artifact(ctx, in.ArtifactID)
	if err != nil {
		return false, fmt.Errorf("artifact %d for input %q: %w", in.ArtifactID, in.Name, err)
	}
	if a.TeamID != x.b.TeamID {
		return false, fmt.Errorf("artifact %d for input %q belongs to another team", in.ArtifactID, in.Name)
	}
	x.setArtifact(in.Name, api.ArtifactRef{Key: a.Key, Digest: a.Digest, Size: a.Size})
	return true, nil
}

// ArtifactOutputStep keeps a named artifact of the build for download
// (fly execute -o).
type ArtifactOutputStep struct{ Plan *concourse.Plan }

func (s ArtifactOutputStep) Run(ctx context.Context, x *RunState) (bool, error) {
	p := s.Plan
	name := p.ArtifactOutput.Name
	a, ok := x.artifact(name)
	if !ok {
		return false, fmt.Errorf("output %q: no step of the build produced it", name)
	}
	r := x.b.Record(p.ID, name, concourse.KindArtifactOutput)
	if r.Finished() {
		return true, nil
	}
	if err := x.r.retryDB(ctx, "keep an output", func(ctx context.Context) error {
		_, err := x.r.db.CreateArtifact(ctx, db.Artifact{TeamID: x.b.TeamID, BuildID: x.b.ID, Name: name,
			Key: a.Key, Digest: a.Digest, Size: a.Size, WorkerName: x.r.cfg.ArtifactWorker})
		return err
	}); err != nil {
		return false, fmt.Errorf("keep output %q: %w", name, err)
	}
	x.b.Update(func() { r.Status = concourse.StatusSucceeded })
	x.r.SaveState(ctx, x.b)
	return true, nil
}
