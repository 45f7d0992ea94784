package exec

import (
	"context"
	"errors"

	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
)

// Why a build's context ended: an abort, a step's timeout, or (any other
// cause) the server shutting down, after which the build is resumed.
var (
	ErrAborted = errors.New("aborted")
	ErrTimeout = errors.New("timeout exceeded")
	// ErrShutdown is the cause of a build context ended by the server
	// stopping.
	ErrShutdown = errors.New("the server is stopping")
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
