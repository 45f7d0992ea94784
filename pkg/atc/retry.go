package atc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/porter-ci/porter/pkg/db"
)

// dbRetryFor bounds how long a build waits for the database to come back
// (a restart, a failover) before the write is given up.
const dbRetryFor = 2 * time.Minute

// retryDB runs a database write of a running build until it succeeds, the
// error is one no retry changes (not found, conflict), the server stops or
// dbRetryFor has passed: a database restarted mid-build must not lose the
// build's record. Backoff doubles from 100 ms to 2 s, with jitter so that
// many builds do not retry in lockstep.
func (s *Server) retryDB(ctx context.Context, what string, write func(context.Context) error) error {
	ctx = context.WithoutCancel(ctx)
	deadline := time.Now().Add(dbRetryFor)
	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := write(ctx)
		if err == nil || errors.Is(err, db.ErrNotFound) || errors.Is(err, db.ErrConflict) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: gave up after %d attempts: %w", what, attempt, err)
		}
		s.log.Warn("database write failed; retrying", "what", what, "attempt", attempt, "err", err)
		select {
		case <-time.After(wait/2 + rand.N(wait)):
		case <-s.shutdownCtx().Done():
			return fmt.Errorf("%s: %w", what, err)
		}
		wait = min(2*wait, 2*time.Second)
	}
}
