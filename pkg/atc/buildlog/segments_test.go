package buildlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/test/testenv"
)

// gatedStore holds every Put until gate is closed, and counts the Puts
// under prefix.
type gatedStore struct {
	blobstore.Store
	gate   chan struct{}
	prefix string
	puts   atomic.Int64
}

func (s *gatedStore) Put(ctx context.Context, key string, body io.Reader, size int64, opts blobstore.PutOptions) (blobstore.ObjectInfo, error) {
	if strings.HasPrefix(key, s.prefix) {
		s.puts.Add(1)
	}
	select {
	case <-s.gate:
	case <-ctx.Done():
		return blobstore.ObjectInfo{}, ctx.Err()
	}
	return s.Store.Put(ctx, key, body, size, opts)
}

// gatedSegments is a segment writer with one write slot over a gatedStore
// on real MinIO, with an in-memory index, and a context of a minute.
func gatedSegments(t *testing.T) (context.Context, *gatedStore, *MemIndex, *segmentWriter) {
	t.Helper()
	store := &gatedStore{Store: minioStore(t), gate: make(chan struct{}), prefix: SegmentPrefix}
	index := NewMemIndex()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx, store, index, newSegmentWriter(store, index, SegmentPrefix, 1)
}

// testDB opens a fresh, migrated database (hack/postgres.sh).
func testDB(t *testing.T) *db.DB {
	t.Helper()
	dsn := testenv.Postgres(t)
	d, err := db.Open(t.Context(), dsn, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// newBuilds records n builds in d, returning their IDs.
func newBuilds(t *testing.T, d *db.DB, n int) []int64 {
	t.Helper()
	team, err := d.EnsureTeam(t.Context(), "main", nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for range n {
		b, err := d.CreateOneOffBuild(t.Context(), team.ID, nil, "", "s")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, b.ID)
	}
	return ids
}

func segmentSource(store blobstore.Store, index Index, w *segmentWriter, buildID int64) chunkSource {
	return chunkSource{store: store, prefix: fmt.Sprintf("atc/events/%012d/", buildID), index: index, buildID: buildID, segments: w}
}

// appendLines appends n output lines of step to l, sequence numbers from
// seq+1, and returns the last record's ID.
func appendLines(l *Log, step string, seq uint64, n int) uint64 {
	var last uint64
	for i := 1; i <= n; i++ {
		last = l.appendEvent(events.Log{Payload: fmt.Sprintf("%s line %d\n", step, seq+uint64(i)), Origin: events.Origin{ID: step}}, step, seq+uint64(i))
	}
	return last
}

// checkLog fails unless recs are records 1..n of step, each once, in order.
func checkLog(t *testing.T, what string, recs []Record, step string, n int) {
	t.Helper()
	if len(recs) != n {
		t.Fatalf("%s: %d records, want %d", what, len(recs), n)
	}
	for i, r := range recs {
		if r.ID != uint64(i+1) || r.Event == nil || r.Step != step {
			t.Fatalf("%s: record %d is ID %d of step %q (event %v), want ID %d of %q", what, i, r.ID, r.Step, r.Event != nil, i+1, step)
		}
	}
}

// TestSegmentHoldsSeveralBuilds: while a segment write is in flight, the
// flushes of other builds gather, and the next write stores them as one
// object, each build's part read back alone by a ranged read.
func TestSegmentHoldsSeveralBuilds(t *testing.T) {
	ctx, store, index, w := gatedSegments(t)
	minio := store.Store

	logs := map[int64]*Log{}
	for id := int64(1); id <= 4; id++ {
		logs[id] = newBuildLog(segmentSource(store, index, w, id), slog.New(slog.DiscardHandler))
		appendLines(logs[id], fmt.Sprintf("step-%d", id), 0, 10*int(id))
	}
	var flushes sync.WaitGroup
	flush := func(id int64) {
		flushes.Add(1)
		go func() { defer flushes.Done(); logs[id].flush(ctx) }()
	}
	// Build 1's write takes the only slot and waits at the gate; builds
	// 2 to 4 gather behind it.
	flush(1)
	waitFor(t, func() bool { return store.puts.Load() == 1 })
	for id := int64(2); id <= 4; id++ {
		flush(id)
	}
	waitFor(t, func() bool { w.mu.Lock(); defer w.mu.Unlock(); return len(w.queue) == 3 })
	close(store.gate)
	flushes.Wait()
	if n := store.puts.Load(); n != 2 {
		t.Fatalf("%d segment writes for 4 builds, want 2", n)
	}

	var shared string
	for id := int64(1); id <= 4; id++ {
		l := logs[id]
		if l.flushErr != nil || l.durable != uint64(10*id) {
			t.Fatalf("build %d: durable %d, flush error %v", id, l.durable, l.flushErr)
		}
		chunks, _ := index.EventChunks(ctx, id)
		if len(chunks) != 1 || chunks[0].Length == 0 || !strings.HasPrefix(chunks[0].Key, SegmentPrefix) {
			t.Fatalf("build %d's chunks: %+v", id, chunks)
		}
		switch {
		case id == 1:
		case shared == "":
			shared = chunks[0].Key
		case chunks[0].Key != shared:
			t.Fatalf("build %d's part is in %s, build 2's in %s: want one segment", id, chunks[0].Key, shared)
		}
		// Each part alone, as a reader after eviction reads it.
		recs, err := readChunk(ctx, minio, chunks[0])
		if err != nil {
			t.Fatal(err)
		}
		checkLog(t, fmt.Sprintf("build %d's part", id), recs, fmt.Sprintf("step-%d", id), 10*int(id))
		l.Finish()
		l.flush(ctx) // evicts the finished build's records
		if len(l.records) != 0 {
			t.Fatalf("build %d: %d records in memory after its end", id, len(l.records))
		}
		recs, _, err = l.Since(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkLog(t, fmt.Sprintf("build %d since(0)", id), recs, fmt.Sprintf("step-%d", id), 10*int(id))
	}
	if info, err := minio.Stat(ctx, shared); err != nil || info.Size == 0 {
		t.Fatalf("segment %s: %+v, %v", shared, info, err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSegmentedLogRestoredFromTheDatabase: a server that crashes (its
// logs gone from memory) is followed by one that restores each build's
// log from the database's index of segments, with every step's resume
// point, and a build begun before segments (whole-object chunks) reads
// on into segments.
func TestSegmentedLogRestoredFromTheDatabase(t *testing.T) {
	store := minioStore(t)
	d := testDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ids := newBuilds(t, d, 3)
	old := ids[2]

	// The old build's first 30 records are a chunk object of its own, as
	// servers wrote them before segments.
	pre := newBuildLog(chunkSource{store: store, prefix: fmt.Sprintf("atc/events/%012d/", old), index: d, buildID: old}, slog.New(slog.DiscardHandler))
	appendLines(pre, "old", 0, 30)
	pre.flush(ctx)
	if pre.flushErr != nil || pre.durable != 30 {
		t.Fatalf("old chunk: durable %d, %v", pre.durable, pre.flushErr)
	}

	w := newSegmentWriter(store, d, SegmentPrefix, segmentWrites)
	restoredOld, err := loadBuildLog(ctx, segmentSource(store, d, w, old), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	logs := map[int64]*Log{ids[0]: newBuildLog(segmentSource(store, d, w, ids[0]), slog.New(slog.DiscardHandler)),
		ids[1]: newBuildLog(segmentSource(store, d, w, ids[1]), slog.New(slog.DiscardHandler)), old: restoredOld}
	steps := map[int64]string{ids[0]: "a", ids[1]: "b", old: "old"}
	runCtx, stop := context.WithCancel(ctx)
	var runs sync.WaitGroup
	for _, l := range logs {
		runs.Add(1)
		go func() { defer runs.Done(); l.Run(runCtx) }()
	}
	const rounds, perRound = 20, 25
	var appenders sync.WaitGroup
	for id, l := range logs {
		appenders.Add(1)
		go func() {
			defer appenders.Done()
			seq := uint64(0)
			if id == old {
				seq = 30
			}
			for range rounds {
				last := appendLines(l, steps[id], seq, perRound)
				seq += perRound
				if err := l.sync(ctx, last); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	appenders.Wait()
	// The crash: the logs stop, nothing of their memory survives.
	stop()
	runs.Wait()

	w2 := newSegmentWriter(store, d, SegmentPrefix, segmentWrites)
	for id, step := range steps {
		n := rounds * perRound
		if id == old {
			n += 30
		}
		l, err := loadBuildLog(ctx, segmentSource(store, d, w2, id), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if l.LastID() != uint64(n) || l.stepSeq[step] != uint64(n) || len(l.records) != 0 {
			t.Fatalf("build %d restored: last ID %d, step seq %d, %d records in memory; want %d, %d, 0",
				id, l.LastID(), l.stepSeq[step], len(l.records), n, n)
		}
		recs, _, err := l.Since(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkLog(t, fmt.Sprintf("build %d after restore", id), recs, step, n)
		// From the middle of a part on.
		recs, err = readChunks(ctx, l.src, 41, 0)
		if err != nil || len(recs) != n-41 || recs[0].ID != 42 {
			t.Fatalf("build %d from 41: %d records, %v", id, len(recs), err)
		}
		chunks, err := d.EventChunks(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range chunks {
			if id == old && i == 0 {
				if c.Length != 0 || !strings.HasPrefix(c.Key, "atc/events/") {
					t.Fatalf("the old build's first chunk: %+v", c)
				}
				continue
			}
			if c.Length == 0 || !strings.HasPrefix(c.Key, SegmentPrefix) {
				t.Fatalf("build %d chunk %d: %+v, want a segment's part", id, i, c)
			}
		}
		// The next record goes on after the restored ones.
		if next := l.append(Record{Step: step, Seq: uint64(n + 1)}); next != uint64(n+1) {
			t.Fatalf("build %d: first record after restore %d, want %d", id, next, n+1)
		}
	}
}

// faultyStore fails Puts of segments: before storing (failBefore) or
// after (failAfter, a lost answer).
type faultyStore struct {
	blobstore.Store
	failBefore, failAfter atomic.Int64
}

func (s *faultyStore) Put(ctx context.Context, key string, body io.Reader, size int64, opts blobstore.PutOptions) (blobstore.ObjectInfo, error) {
	if strings.HasPrefix(key, SegmentPrefix) && s.failBefore.Add(-1) >= 0 {
		return blobstore.ObjectInfo{}, errors.New("injected: the store is away")
	}
	info, err := s.Store.Put(ctx, key, body, size, opts)
	if err == nil && strings.HasPrefix(key, SegmentPrefix) && s.failAfter.Add(-1) >= 0 {
		return blobstore.ObjectInfo{}, errors.New("injected: the answer was lost")
	}
	return info, err
}

// faultyIndex records segments, then fails (lostAnswer) or fails first
// (failBefore).
type faultyIndex struct {
	Index
	failBefore, lostAnswer atomic.Int64
}

func (x *faultyIndex) AddEventSegment(ctx context.Context, chunks []db.BuildEventChunk) error {
	if x.failBefore.Add(-1) >= 0 {
		return errors.New("injected: the database is away")
	}
	if err := x.Index.AddEventSegment(ctx, chunks); err != nil {
		return err
	}
	if x.lostAnswer.Add(-1) >= 0 {
		return errors.New("injected: the commit's answer was lost")
	}
	return nil
}

// TestFailedSegmentWritesAreRetried: writes that fail, or succeed with the
// answer lost, in the store or the index, are retried until durable; no
// reader, live or after a restart, sees a gap or a record twice, and no
// sync returns before its records are durable.
func TestFailedSegmentWritesAreRetried(t *testing.T) {
	minio := minioStore(t)
	d := testDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ids := newBuilds(t, d, 2)
	store := &faultyStore{Store: minio}
	index := &faultyIndex{Index: d}
	w := newSegmentWriter(store, index, SegmentPrefix, segmentWrites)
	logs := []*Log{newBuildLog(segmentSource(store, index, w, ids[0]), slog.New(slog.DiscardHandler)),
		newBuildLog(segmentSource(store, index, w, ids[1]), slog.New(slog.DiscardHandler))}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	for _, l := range logs {
		go l.Run(runCtx)
	}
	const rounds, perRound = 8, 10
	for round := range rounds {
		// Every other round one fault of each kind in turn.
		switch round {
		case 1:
			store.failBefore.Store(2)
		case 3:
			store.failAfter.Store(2)
		case 5:
			index.failBefore.Store(2)
		case 7:
			index.lostAnswer.Store(2)
		}
		for i, l := range logs {
			last := appendLines(l, fmt.Sprintf("s%d", i), uint64(round*perRound), perRound)
			if err := l.sync(ctx, last); err != nil {
				t.Fatal(err)
			}
			// Durable means stored and indexed: a fresh reader finds it.
			recs, err := readChunks(ctx, segmentSource(minio, d, nil, ids[i]), 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			checkLog(t, fmt.Sprintf("round %d, build %d, read from the index", round, i), recs, fmt.Sprintf("s%d", i), (round+1)*perRound)
		}
	}
	for _, n := range []int64{store.failBefore.Load(), store.failAfter.Load(), index.failBefore.Load(), index.lostAnswer.Load()} {
		if n > 0 {
			t.Fatalf("faults left unused (%d): the test did not exercise them", n)
		}
	}
	for i, l := range logs {
		recs, _, err := l.Since(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkLog(t, fmt.Sprintf("build %d live", i), recs, fmt.Sprintf("s%d", i), rounds*perRound)
		restored, err := loadBuildLog(ctx, segmentSource(minio, d, nil, ids[i]), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if restored.LastID() != rounds*perRound {
			t.Fatalf("build %d restored at %d, want %d", i, restored.LastID(), rounds*perRound)
		}
	}
}

// TestSegmentPartWithdrawnWhenItsFlushGivesUp: a part still waiting for a
// write leaves the queue when its flush's context ends, and is not written.
func TestSegmentPartWithdrawnWhenItsFlushGivesUp(t *testing.T) {
	ctx, store, index, w := gatedSegments(t)
	first := make(chan error, 1)
	go func() {
		first <- w.commit(ctx, &segmentPart{buildID: 1, first: 1, last: 1, data: []byte("a"), done: make(chan struct{})})
	}()
	waitFor(t, func() bool { return store.puts.Load() == 1 })
	giveUp, stop := context.WithCancel(ctx)
	second := make(chan error, 1)
	go func() {
		second <- w.commit(giveUp, &segmentPart{buildID: 2, first: 1, last: 1, data: []byte("b"), done: make(chan struct{})})
	}()
	waitFor(t, func() bool { w.mu.Lock(); defer w.mu.Unlock(); return len(w.queue) == 1 })
	stop()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Fatalf("the withdrawn part's commit: %v, want context.Canceled", err)
	}
	close(store.gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	queued := len(w.queue)
	w.mu.Unlock()
	chunks, _ := index.EventChunks(ctx, 2)
	if queued != 0 || len(chunks) != 0 || store.puts.Load() != 1 {
		t.Fatalf("after withdrawal: %d queued, build 2's chunks %+v, %d writes", queued, chunks, store.puts.Load())
	}
}
