// Package retry is the server's retry loops: jittered, capped backoff
// until an attempt is done, a deadline passes or the context ends, and the
// retrying of a build's database writes through an outage.
package retry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/porter-ci/porter/pkg/db"
)

// dbRetryFor bounds how long a build waits for the database to come back
// (a restart, a failover) before the write is given up.
const dbRetryFor = 2 * time.Minute

// Backoff is the backoff of the server's retry loops: doubling from
// first to most, each wait stretched by up to half of itself at random, so
// that the many builds (or replicas) that met the same outage do not all
// retry in the same instant.
func Backoff(first, most time.Duration) wait.Backoff {
	return wait.Backoff{Duration: first, Factor: 2, Jitter: 0.5, Steps: math.MaxInt32, Cap: most}
}

// Do runs attempt until it returns done, ctx ends (the last error is
// returned) or the deadline passes, waiting backoff's steps between tries.
// what and log name the attempts in the log.
func Do(ctx context.Context, backoff wait.Backoff, deadline time.Time, log *slog.Logger, what string, attempt func() (done bool, err error)) error {
	for n := 1; ; n++ {
		done, err := attempt()
		if done {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: gave up after %d attempts: %w", what, n, err)
		}
		delay := backoff.Step()
		log.Warn(what+" failed; retrying", "attempt", n, "in", delay, "err", err)
		timer := time.NewTimer(delay)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("%s: %w", what, err)
		}
	}
}

// DB runs a database write of a build's record until it succeeds, the
// error is one no retry changes (not found, conflict), shutdown (the
// server's context) ends or dbRetryFor has passed: a database restarted
// mid-build must not lose the build's record.
func DB(ctx, shutdown context.Context, log *slog.Logger, what string, write func(context.Context) error) error {
	ctx = context.WithoutCancel(ctx)
	return Do(shutdown, Backoff(100*time.Millisecond, 2*time.Second), time.Now().Add(dbRetryFor), log, what,
		func() (bool, error) {
			err := write(ctx)
			return err == nil || errors.Is(err, db.ErrNotFound) || errors.Is(err, db.ErrConflict), err
		})
}
