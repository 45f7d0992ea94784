package exec

import (
	"context"

	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
)

// Why a build's context ended (buildstate.ErrAborted and the others).
var (
	ErrAborted  = buildstate.ErrAborted
	ErrTimeout  = buildstate.ErrTimeout
	ErrShutdown = buildstate.ErrShutdown
)

// SaveState writes the build's state to the database.
func (s *Runner) SaveState(ctx context.Context, b *buildstate.Build) {
	body, err := b.MarshalState()
	if err == nil {
		err = s.retryDB(ctx, "save the build's state", func(ctx context.Context) error { return s.db.SaveBuildState(ctx, b.ID, body) })
	}
	if err != nil {
		s.log.Error("save build state", "build", b.ID, "err", err)
	}
}
