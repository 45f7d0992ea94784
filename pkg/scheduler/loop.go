package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/porter-ci/porter/pkg/db"
)

// DefaultTick is how often a Loop looks even when nothing woke it: events
// of other servers sharing the database (a trigger through another server,
// a build another server finished) are seen within it.
const DefaultTick = time.Second

// lockRetry is how soon a Loop retries when another server held the
// scheduler lock as it was woken.
const lockRetry = 100 * time.Millisecond

// Loop runs the Checker's and the Scheduler's passes, each under the
// database's scheduler lock so that one server at a time does it, whenever
// it is woken and at least every Tick.
type Loop struct {
	DB        *db.DB
	Scheduler *Scheduler
	Checker   *Checker
	Tick      time.Duration // 0: DefaultTick
	Log       *slog.Logger

	wake chan struct{}
}

// NewLoop makes a Loop ready to be woken before it runs.
func NewLoop(d *db.DB, s *Scheduler, c *Checker, log *slog.Logger) *Loop {
	return &Loop{DB: d, Scheduler: s, Checker: c, Log: log, wake: make(chan struct{}, 1)}
}

// Wake makes the loop look now: a version was saved, a build ended, a job
// was triggered or unpaused, a config was saved. It never blocks.
func (l *Loop) Wake() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Run loops until ctx ends.
func (l *Loop) Run(ctx context.Context) {
	every := l.Tick
	if every <= 0 {
		every = DefaultTick
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	retry := time.NewTimer(0) // a first pass at once
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
		case <-tick.C:
		case <-retry.C:
		}
		ran, err := l.Pass(ctx)
		if err != nil && ctx.Err() == nil {
			l.Log.Warn("scheduling", "err", err)
		}
		if !ran && ctx.Err() == nil {
			// Servers that lost the lock together retry apart.
			retry.Reset(wait.Jitter(lockRetry, 1))
		}
	}
}

// The components (`fly get-components`) a Loop runs: Concourse's names.
const (
	ComponentScheduler = "scheduler"
	ComponentScanner   = "scanner" // the periodic checks
)

// Pass starts the due checks and schedules the jobs once if it gets the
// lock; ran says whether it did. A paused component (`fly
// pause-component`) is skipped.
func (l *Loop) Pass(ctx context.Context) (ran bool, err error) {
	release, ok, err := l.DB.TryLock(ctx, db.LockScheduler)
	if err != nil || !ok {
		return false, err
	}
	defer release()
	every := l.Tick
	if every <= 0 {
		every = DefaultTick
	}
	// Two statements a pass, whatever the components: which are paused,
	// and which ran.
	paused, err := l.DB.PausedComponents(ctx)
	if err != nil {
		return true, err
	}
	var errs []error
	var done []string
	for _, c := range []struct {
		name string
		tick func(context.Context) error
	}{{ComponentScanner, l.Checker.Tick}, {ComponentScheduler, l.Scheduler.Tick}} {
		if paused[c.name] {
			continue
		}
		errs = append(errs, c.tick(ctx))
		done = append(done, c.name)
	}
	errs = append(errs, l.DB.ComponentsRan(ctx, done, every, time.Now()))
	return true, errors.Join(errs...)
}
