package buildlog

import (
	"context"
	"iter"
	"time"

	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events"
)

// Builds is what following a build's events needs of the server running
// builds.
type Builds interface {
	// Running returns the log of a build this server runs and a channel
	// closed once the build has ended (ok false: it runs no such build).
	Running(buildID int64) (log *Log, done <-chan struct{}, ok bool)
	// Build reads a build's record, whose status says whether it has ended.
	Build(ctx context.Context, buildID int64) (db.Build, error)
	// Started returns a channel closed when this server next starts
	// running a build (any build): a follower of a build not yet running
	// here looks again at once rather than at its next poll.
	Started() <-chan struct{}
}

// Follower follows builds' events: live from the log of a build this
// server runs, else from the stored log, polled while another server runs
// the build.
type Follower struct {
	logs        *Logs
	builds      Builds
	statusGrace time.Duration
}

// NewFollower follows the logs of builds.
func NewFollower(logs *Logs, builds Builds) *Follower {
	return &Follower{logs: logs, builds: builds, statusGrace: statusGrace}
}

// pollStored is how often the stored log of a build another server runs
// is read again.
const pollStored = time.Second

// Events yields build's records after ID from, in order, in batches as they
// become durable (the first at once, possibly empty), until the build has
// ended and every record was yielded, ctx ends, or reading the log fails
// (logged). build is the build's record as the caller read it.
func (f *Follower) Events(ctx context.Context, build db.Build, from uint64) iter.Seq[[]Record] {
	return func(yield func([]Record) bool) {
		// from follows the records yielded.
		next := func(recs []Record) bool {
			if len(recs) > 0 {
				from = recs[len(recs)-1].ID
			}
			return yield(recs)
		}
		f.stored(ctx, build, &from, next)
	}
}

// live follows a build this server runs until it ends.
func (f *Follower) live(ctx context.Context, buildID int64, l *Log, done <-chan struct{}, from *uint64, yield func([]Record) bool) {
	for {
		// Whether the build had ended is read before the records, so the
		// records read include everything it ever logged.
		var finished bool
		select {
		case <-done:
			finished = true
		default:
		}
		recs, changed, err := l.Since(ctx, *from)
		if err != nil {
			f.logs.log.Warn("read build events", "build", buildID, "err", err)
			return
		}
		if !yield(recs) || finished {
			return
		}
		select {
		case <-changed:
		case <-done:
		case <-ctx.Done():
			return
		}
	}
}

// stored follows a build's stored log: a finished build's, or one another
// server runs or nobody runs yet (a job build the scheduler has not
// started), polled until it ends, or until this server runs it.
func (f *Follower) stored(ctx context.Context, build db.Build, from *uint64, yield func([]Record) bool) {
	ended := false // a final status event was yielded
	for first := true; ; first = false {
		// Taken before looking whether the build runs here, so that a
		// start in between still ends the wait below.
		started := f.builds.Started()
		// The record is read before looking whether the build runs here:
		// a build this server finishes is recorded finished before its
		// last events are durable, and leaves the running set after.
		if !first {
			var err error
			if build, err = f.builds.Build(ctx, build.ID); err != nil {
				return
			}
		}
		if l, done, ok := f.builds.Running(build.ID); ok {
			f.live(ctx, build.ID, l, done, from, yield)
			return
		}
		finished := build.Status.Finished()
		recs, err := f.logs.Stored(ctx, build.ID, *from)
		if err != nil {
			f.logs.log.Warn("read build events", "build", build.ID, "err", err)
			return
		}
		ended = ended || endsBuild(recs)
		if !yield(recs) {
			return
		}
		if finished {
			if !ended {
				f.endWithoutStatus(ctx, build, from, yield)
			}
			return
		}
		if !f.waitStored(ctx, build.ID, started) {
			return
		}
	}
}

// statusGrace is how long a follower of a build recorded finished waits for
// its stored status event. The server that ran it records the end before it
// stores that event, so another server's follower can get between the two.
const statusGrace = 3 * time.Second

// endWithoutStatus ends the events of a finished build whose stored log has
// no status event (yet): the event once it is stored, else, after
// statusGrace, one made from the record. That is the case of a server killed
// between recording the end and storing the event, and of a log reaped by
// retention. Without a status event fly exits 0 whatever the build's end.
func (f *Follower) endWithoutStatus(ctx context.Context, build db.Build, from *uint64, yield func([]Record) bool) {
	deadline := time.Now().Add(f.statusGrace)
	if time.Since(build.EndTime) > time.Minute {
		deadline = time.Time{} // long over: the event will not come now
	}
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(f.statusGrace / 10):
		}
		recs, err := f.logs.Stored(ctx, build.ID, *from)
		if err != nil {
			f.logs.log.Warn("read build events", "build", build.ID, "err", err)
			return
		}
		if !yield(recs) || endsBuild(recs) {
			return
		}
	}
	end := build.EndTime
	if end.IsZero() {
		end = time.Now()
	}
	env, err := events.NewEnvelope(events.Status{Status: build.Status, Time: end.Unix()})
	if err != nil {
		f.logs.log.Warn("make the status event of a finished build", "build", build.ID, "err", err)
		return
	}
	f.logs.log.Warn("build finished without a stored status event; sending one from its record",
		"build", build.ID, "status", build.Status)
	yield([]Record{{ID: *from + 1, Event: &env}})
}

// endsBuild reports whether recs hold a final status event.
func endsBuild(recs []Record) bool {
	for _, r := range recs {
		if r.Event == nil || r.Event.Event != events.EventTypeStatus {
			continue
		}
		if ev, err := r.Event.Decode(); err == nil && ev.(events.Status).Status.Finished() {
			return true
		}
	}
	return false
}

// waitStored waits for the next poll of a stored log, or less if this
// server starts running the build meanwhile; false if ctx ended.
func (f *Follower) waitStored(ctx context.Context, buildID int64, started <-chan struct{}) bool {
	poll := time.NewTimer(pollStored)
	defer poll.Stop()
	for {
		select {
		case <-poll.C:
			return true
		case <-ctx.Done():
			return false
		case <-started:
			started = f.builds.Started()
			if _, _, ok := f.builds.Running(buildID); ok {
				return true
			}
		}
	}
}
