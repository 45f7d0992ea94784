package buildlog

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/porter-ci/porter/internal/eventually"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events"
)

// memStore keeps objects in memory: following a log is control flow over
// the store, which the tests on MinIO above cover as storage.
type memStore struct {
	blobstore.Store // the methods a log does not use
	mu              sync.Mutex
	objs            map[string][]byte
}

func newMemStore() *memStore { return &memStore{objs: map[string][]byte{}} }

func (m *memStore) Put(_ context.Context, key string, body io.Reader, _ int64, _ blobstore.PutOptions) (blobstore.ObjectInfo, error) {
	data, err := io.ReadAll(body)
	if err != nil {
		return blobstore.ObjectInfo{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objs[key] = data
	return blobstore.ObjectInfo{Key: key, Size: int64(len(data))}, nil
}

func (m *memStore) Get(_ context.Context, key string) (io.ReadCloser, blobstore.ObjectInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	data, ok := m.objs[key]
	if !ok {
		return nil, blobstore.ObjectInfo{}, blobstore.ErrNotFound
	}
	return io.NopCloser(bytes.NewReader(data)), blobstore.ObjectInfo{Key: key, Size: int64(len(data))}, nil
}

func (m *memStore) GetRange(_ context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	data, ok := m.objs[key]
	if !ok {
		return nil, blobstore.ErrNotFound
	}
	return io.NopCloser(bytes.NewReader(data[offset : offset+length])), nil
}

func (m *memStore) List(_ context.Context, prefix string) ([]blobstore.ObjectInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []blobstore.ObjectInfo
	for k, v := range m.objs {
		if strings.HasPrefix(k, prefix) {
			out = append(out, blobstore.ObjectInfo{Key: k, Size: int64(len(v))})
		}
	}
	slices.SortFunc(out, func(a, b blobstore.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// fakeBuilds is one build, run by this server from when its log is set.
type fakeBuilds struct {
	mu      sync.Mutex
	log     *Log
	done    chan struct{}
	status  concourse.BuildStatus
	started chan struct{}
	// waits counts the calls of Started: a follower about to wait for a
	// build to start.
	waits int
}

func (f *fakeBuilds) Started() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waits++
	if f.started == nil {
		f.started = make(chan struct{})
	}
	return f.started
}

// start has this server run the build from now, as the server does.
func (f *fakeBuilds) start(l *Log, done chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log, f.done, f.status = l, done, concourse.StatusStarted
	if f.started != nil {
		close(f.started)
	}
	f.started = make(chan struct{})
}

func (f *fakeBuilds) Running(int64) (*Log, <-chan struct{}, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.log, f.done, f.log != nil
}

func (f *fakeBuilds) Build(_ context.Context, id int64) (db.Build, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return db.Build{ID: id, Status: f.status}, nil
}

// newMemLogs returns build logs kept in memory.
func newMemLogs(t *testing.T) *Logs {
	t.Helper()
	logs, err := New(Config{Store: newMemStore(), Index: NewMemIndex(), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return logs
}

// runLog commits l until the test ends.
func runLog(t *testing.T, l *Log) {
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
}

// follow collects what Events yields, batch by batch, on a channel.
func follow(ctx context.Context, f *Follower, b db.Build, from uint64) <-chan []Record {
	out := make(chan []Record, 1000)
	go func() {
		defer close(out)
		for recs := range f.Events(ctx, b, from) {
			out <- recs
		}
	}()
	return out
}

// ids returns the IDs of the records of batches until the channel closes
// (or the test's deadline: a follow that does not end fails).
func ids(t *testing.T, batches <-chan []Record) []uint64 {
	t.Helper()
	var got []uint64
	timeout := time.After(20 * time.Second)
	for {
		select {
		case recs, ok := <-batches:
			if !ok {
				return got
			}
			for _, r := range recs {
				got = append(got, r.ID)
			}
		case <-timeout:
			t.Fatalf("the follow did not end; records so far %v", got)
		}
	}
}

func seq(from, to uint64) []uint64 {
	var s []uint64
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

func appendN(l *Log, n int) {
	for i := range n {
		l.AppendStep("s", uint64(i+1), events.Log{Payload: "line\n", Origin: events.Origin{ID: "s"}})
	}
}

// A running build's follower gets what was logged before it came, then
// what is logged while it waits, and ends with the build.
func TestFollowLiveBuildUntilItEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	logs := newMemLogs(t)
	l := logs.Open(1)
	runLog(t, l)
	builds := &fakeBuilds{log: l, done: make(chan struct{}), status: concourse.StatusStarted}
	appendN(l, 5)
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	batches := follow(ctx, NewFollower(logs, builds), db.Build{ID: 1, Status: concourse.StatusStarted}, 2)
	first := <-batches
	appendN(l, 5)
	l.Append(events.Status{Status: concourse.StatusSucceeded})
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	l.Finish()
	close(builds.done)
	got := append([]uint64{}, recIDs(first)...)
	got = append(got, ids(t, batches)...)
	if !slices.Equal(got, seq(3, 11)) {
		t.Errorf("followed records %v, want 3..11", got)
	}
}

func recIDs(recs []Record) []uint64 {
	var out []uint64
	for _, r := range recs {
		out = append(out, r.ID)
	}
	return out
}

// A build another server runs is read from the store, polled, and
// followed live once this server runs it (a restart's resume); a finished
// build's stored log is read once.
func TestFollowStoredBuildThenLive(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	store, index := newMemStore(), NewMemIndex()
	logs, err := New(Config{Store: store, Index: index, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	// Another server's log of build 1: durable, then gone with its server.
	other := logs.Open(1)
	otherCtx, stopOther := context.WithCancel(ctx)
	otherDone := make(chan struct{})
	go func() { defer close(otherDone); other.Run(otherCtx) }()
	appendN(other, 4)
	if err := other.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	stopOther()
	<-otherDone

	builds := &fakeBuilds{status: concourse.StatusStarted}
	f := NewFollower(logs, builds)
	batches := follow(ctx, f, db.Build{ID: 1, Status: concourse.StatusStarted}, 0)
	if first := <-batches; !slices.Equal(recIDs(first), seq(1, 4)) {
		t.Fatalf("first batch %v, want the stored 1..4", recIDs(first))
	}
	// This server resumes the build: the follower moves to its live log.
	l, err := logs.Restore(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	runLog(t, l)
	done := make(chan struct{})
	builds.start(l, done)
	appendN(l, 2)
	l.Append(events.Status{Status: concourse.StatusSucceeded})
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	l.Finish()
	close(done)
	if got := ids(t, batches); !slices.Equal(got, seq(5, 7)) {
		t.Errorf("after the stored records, followed %v, want 5..7", got)
	}

	// Finished: the stored log, once, from any point.
	builds.mu.Lock()
	builds.log, builds.status = nil, concourse.StatusSucceeded
	builds.mu.Unlock()
	if got := ids(t, follow(ctx, f, db.Build{ID: 1, Status: concourse.StatusSucceeded}, 2)); !slices.Equal(got, seq(3, 7)) {
		t.Errorf("finished build: followed %v, want 3..7", got)
	}
}

// A caller that stops ranging, or whose context ends, ends the follow of
// a build that goes on.
func TestFollowEndsWithItsCaller(t *testing.T) {
	logs := newMemLogs(t)
	l := logs.Open(1)
	runLog(t, l)
	appendN(l, 2)
	builds := &fakeBuilds{log: l, done: make(chan struct{}), status: concourse.StatusStarted}
	f := NewFollower(logs, builds)
	rec := db.Build{ID: 1, Status: concourse.StatusStarted}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for range f.Events(ctx, rec, 0) {
		break // a range-over-func iterator that went on would panic here
	}

	ctx2, cancel2 := context.WithCancel(ctx)
	batches := follow(ctx2, f, rec, 0)
	<-batches
	cancel2()
	ids(t, batches) // fails unless the follow ends
}

// A follower of a build nobody runs yet (a job build pending until the
// scheduler starts it; `fly trigger-job -w` follows it at once) goes live
// as soon as this server starts the build, not at its next poll of the
// stored log.
func TestFollowPendingBuildGoesLiveAtItsStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	logs := newMemLogs(t)
	builds := &fakeBuilds{status: concourse.StatusPending}
	batches := follow(ctx, NewFollower(logs, builds), db.Build{ID: 1, Status: concourse.StatusPending}, 0)
	if first := <-batches; len(first) != 0 {
		t.Fatalf("first batch of a pending build %v, want none", recIDs(first))
	}
	// Another build starting here wakes the follower, which waits on.
	builds.mu.Lock()
	close(builds.started)
	builds.started = make(chan struct{})
	waits := builds.waits
	builds.mu.Unlock()
	eventually.Within(t, 5*time.Second, func() error {
		builds.mu.Lock()
		defer builds.mu.Unlock()
		if builds.waits == waits {
			return errors.New("the woken follower did not wait again")
		}
		return nil
	})

	l := logs.Open(1)
	runLog(t, l)
	done := make(chan struct{})
	start := time.Now()
	builds.start(l, done)
	l.Append(events.Status{Status: concourse.StatusStarted})
	for {
		select {
		case recs := <-batches:
			if len(recs) == 0 {
				continue
			}
			if took := time.Since(start); took > pollStored/4 {
				t.Errorf("the first event of the started build came after %s, want well under the stored log's poll (%s)", took, pollStored)
			}
			l.Finish()
			close(done)
			ids(t, batches)
			return
		case <-ctx.Done():
			t.Fatal("the started build's first event never came")
		}
	}
}

// statusOf returns the final status the records end with ("" if none).
func statusOf(t *testing.T, recs []Record) concourse.BuildStatus {
	t.Helper()
	var got concourse.BuildStatus
	for _, r := range recs {
		if r.Event == nil || r.Event.Event != events.EventTypeStatus {
			continue
		}
		ev, err := r.Event.Decode()
		if err != nil {
			t.Fatal(err)
		}
		got = ev.(events.Status).Status
	}
	return got
}

// A build recorded finished whose stored log has no status event (its
// server was killed between the two, or another server is between them)
// still ends its followers' streams with its status: fly would otherwise
// exit 0 whatever the build's end. The real event is taken when it comes
// within the grace; else one is made from the record.
func TestFollowFinishedBuildWithoutItsStatusEvent(t *testing.T) {
	for _, tc := range []struct {
		name         string
		storedLater  bool // the status event is stored during the grace
		endedMinsAgo int
		wantIDs      []uint64
		wantWithin   time.Duration
	}{
		{name: "stored late", storedLater: true, wantIDs: seq(1, 4), wantWithin: 2 * time.Second},
		{name: "never stored", wantIDs: seq(1, 4), wantWithin: 2 * time.Second},
		{name: "ended long ago", endedMinsAgo: 10, wantIDs: seq(1, 4), wantWithin: 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			logs := newMemLogs(t)
			l := logs.Open(1)
			runLog(t, l)
			appendN(l, 3)
			if err := l.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			f := NewFollower(logs, &fakeBuilds{status: concourse.StatusFailed})
			f.statusGrace = time.Second
			rec := db.Build{ID: 1, Status: concourse.StatusFailed, EndTime: time.Now().Add(-time.Duration(tc.endedMinsAgo) * time.Minute)}
			start := time.Now()
			batches := follow(ctx, f, rec, 0)
			var all []Record
			stored := !tc.storedLater
			for recs := range batches {
				all = append(all, recs...)
				// Stored once the follower has delivered what was stored
				// and is looking for the status.
				if !stored && len(all) >= 3 {
					stored = true
					l.Append(events.Status{Status: concourse.StatusFailed})
					if err := l.Sync(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			took := time.Since(start)
			if got := recIDs(all); !slices.Equal(got, tc.wantIDs) {
				t.Errorf("followed records %v, want %v", got, tc.wantIDs)
			}
			if got := statusOf(t, all); got != concourse.StatusFailed {
				t.Errorf("the stream ends with status %q, want failed", got)
			}
			if took > tc.wantWithin {
				t.Errorf("the stream took %s to end, want within %s", took, tc.wantWithin)
			}
		})
	}
}
