package buildlog

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/creds"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/test/testenv"
)

// minioStore is a fresh bucket of a real MinIO (Docker).
func minioStore(t *testing.T) blobstore.Store { return testenv.MinIOStore(t) }

// logSources are the two ways a build's log is stored: as parts of
// segments shared with other builds (a server's), and as chunk objects of
// its own (before segments); each gives build 1's source.
func logSources(store blobstore.Store) map[string]func() chunkSource {
	index := NewMemIndex()
	w := newSegmentWriter(store, index, SegmentPrefix, segmentWrites)
	return map[string]func() chunkSource{
		"segments": func() chunkSource { return segmentSource(store, index, w, 1) },
		"objects":  func() chunkSource { return chunkSource{store: store, prefix: "atc/events/000000000001/"} },
	}
}

func TestBuildLogIsDurableAndReadBackAfterEviction(t *testing.T) {
	store := minioStore(t)
	for name, source := range logSources(store) {
		t.Run(name, func(t *testing.T) { testBuildLogIsDurableAndReadBackAfterEviction(t, source) })
	}
}

func testBuildLogIsDurableAndReadBackAfterEviction(t *testing.T, source func() chunkSource) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := newBuildLog(source(), slog.New(slog.DiscardHandler))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { log.Run(runCtx); close(done) }()

	const n = 250
	var last uint64
	for i := 1; i <= n; i++ {
		last = log.appendEvent(events.Log{Payload: "line", Origin: events.Origin{ID: "step-a"}}, "step-a", uint64(i))
		if i%50 == 0 {
			// Several chunks, written while appends go on.
			if err := log.sync(ctx, last); err != nil {
				t.Fatal(err)
			}
		}
	}
	if seq, err := log.StepDurable(ctx, "step-a"); err != nil || seq != n {
		t.Fatalf("stepDurable = %d, %v; want %d", seq, err, n)
	}
	log.Finish()
	<-done
	stop()
	if got := log.LastID(); got != n {
		t.Fatalf("lastID = %d, want %d", got, n)
	}
	if len(log.records) != 0 {
		t.Fatalf("%d records still in memory after the build's end", len(log.records))
	}

	// Evicted from memory: since() reads the chunks back, in order, from any point.
	for _, from := range []uint64{0, 1, 49, 50, 51, 199, 249, 250} {
		recs, _, err := log.Since(ctx, from)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != int(n-from) {
			t.Fatalf("since(%d) returned %d records, want %d", from, len(recs), n-from)
		}
		for i, r := range recs {
			if r.ID != from+uint64(i)+1 || r.Event == nil {
				t.Fatalf("since(%d)[%d] = record %d (event %v)", from, i, r.ID, r.Event != nil)
			}
		}
	}

	// A restarted server restores the log and every step's resume point.
	restored, err := loadBuildLog(ctx, source(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if restored.LastID() != n || restored.stepSeq["step-a"] != n {
		t.Fatalf("restored lastID %d, step seq %d; want %d", restored.LastID(), restored.stepSeq["step-a"], n)
	}
	// Lazily: nothing in memory until someone reads it.
	if len(restored.records) != 0 {
		t.Fatalf("restore loaded %d records into memory", len(restored.records))
	}
	if recs, _, err := restored.Since(ctx, 0); err != nil || len(recs) != n {
		t.Fatalf("since(0) after restore = %d records, %v; want %d", len(recs), err, n)
	}
	if id := restored.append(Record{Step: "step-a", Seq: n + 1}); id != n+1 {
		t.Fatalf("the first record after restore is %d, want %d", id, n+1)
	}
}

// TestRunningBuildLogStaysBounded appends far more records than the
// memory window while the build runs: memory keeps at most two windows,
// and a watcher still reads every record in order.
func TestRunningBuildLogStaysBounded(t *testing.T) {
	store := minioStore(t)
	for name, source := range logSources(store) {
		t.Run(name, func(t *testing.T) { testRunningBuildLogStaysBounded(t, source) })
	}
}

func testRunningBuildLogStaysBounded(t *testing.T, source func() chunkSource) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := newBuildLog(source(), slog.New(slog.DiscardHandler))
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go log.Run(runCtx)

	const n = 10 * memoryWindow
	most := 0
	var last uint64
	for i := 1; i <= n; i++ {
		last = log.appendEvent(events.Log{Payload: "a line of output\n", Origin: events.Origin{ID: "s"}}, "s", uint64(i))
		if i%500 == 0 {
			if err := log.sync(ctx, last); err != nil {
				t.Fatal(err)
			}
			log.mu.Lock()
			most = max(most, len(log.records))
			log.mu.Unlock()
		}
	}
	if err := log.sync(ctx, last); err != nil {
		t.Fatal(err)
	}
	if most > 2*memoryWindow+500 {
		t.Fatalf("a running build kept %d records in memory (window %d)", most, memoryWindow)
	}
	recs, _, err := log.Since(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != n {
		t.Fatalf("since(0) = %d records, want %d", len(recs), n)
	}
	for i, r := range recs {
		if r.ID != uint64(i+1) {
			t.Fatalf("record %d has ID %d", i, r.ID)
		}
	}
}

func TestBuildLogOutputCap(t *testing.T) {
	log := newBuildLog(chunkSource{}, slog.New(slog.DiscardHandler))
	log.maxBytes = 10
	for i, p := range []string{"12345", "678", "9abcdef", "more"} {
		log.appendEvent(events.Log{Payload: p}, "s", uint64(i+1))
	}
	var kept []string
	for _, r := range log.records {
		if r.Event == nil {
			continue // dropped output still records the step's sequence
		}
		var l events.Log
		if err := json.Unmarshal(r.Event.Data, &l); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, l.Payload)
	}
	if len(log.records) != 4 || len(kept) != 3 || kept[0] != "12345" || kept[1] != "678" ||
		kept[2] != "9a\n[porter] this build's log reached its cap of 10 bytes (--max-build-log-bytes): further output is not kept; the steps go on\n" {
		t.Fatalf("kept %q of %d records", kept, len(log.records))
	}
}

func TestReadChunksToleratesARetriedChunk(t *testing.T) {
	store := minioStore(t)
	ctx := context.Background()
	prefix := "atc/events/000000000002/"
	put := func(first uint64, ids ...uint64) {
		l := newBuildLog(chunkSource{store: store, prefix: prefix}, slog.New(slog.DiscardHandler))
		for _, id := range ids {
			l.records = append(l.records, Record{ID: id, Step: "s", Seq: id})
		}
		l.durable = first - 1
		l.base = first - 1
		l.flush(ctx)
		if l.flushErr != nil {
			t.Fatal(l.flushErr)
		}
	}
	// A write whose answer was lost is retried with more records under the
	// same key; the next chunk follows.
	put(1, 1, 2, 3)
	put(1, 1, 2, 3, 4, 5)
	put(6, 6, 7)
	recs, err := readChunks(ctx, chunkSource{store: store, prefix: prefix}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 7 {
		t.Fatalf("read %d records, want 7", len(recs))
	}
	for i, r := range recs {
		if r.ID != uint64(i+1) {
			t.Fatalf("record %d has ID %d", i, r.ID)
		}
	}
}

// TestRecordJSONIsEncodingJSONs checks that a flush writes each record
// exactly as json.Encoder would, so readers (and chunks written before)
// see no difference.
func TestRecordJSONIsEncodingJSONs(t *testing.T) {
	envelope := func(e events.Event) *events.Envelope {
		env, err := events.NewEnvelope(e)
		if err != nil {
			t.Fatal(err)
		}
		return &env
	}
	red := creds.NewRedactor([]string{"hunter2"})
	redacted := envelope(events.Log{Payload: "the password is hunter2\n", Origin: events.Origin{ID: "p"}})
	data, err := red.JSON(redacted.Data)
	if err != nil {
		t.Fatal(err)
	}
	redacted.Data = data
	for _, r := range []Record{
		{ID: 1},
		{ID: 2, Step: "step-a", Seq: 7},
		{ID: 3, Event: envelope(events.Status{Status: concourse.StatusStarted, Time: 1700000000})},
		{ID: 18446744073709551615, Step: "s", Seq: 18446744073709551615, Event: envelope(events.Log{Time: 1, Origin: events.Origin{ID: "a", Source: events.OriginSourceStderr},
			Payload: "quotes \" back\\slash <html> & tab\t nul\x00 é \u2028 invalid \xff\n"})},
		{ID: 4, Step: "ünïcode <&> \"step\"", Seq: 1, Event: redacted},
		{ID: 5, Event: &events.Envelope{Event: "odd\n", Version: "1.0"}},
		{ID: 6, Step: "a<b", Seq: 2},
		{ID: 7, Step: "a>b", Seq: 2},
		{ID: 8, Step: "a&b", Seq: 2},
		{ID: 9, Step: "a\"b", Seq: 2},
		{ID: 10, Step: "a\\b", Seq: 2},
		{ID: 11, Step: "a\tb", Seq: 2},
		{ID: 12, Step: "a\x7fb", Seq: 2},
	} {
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(r); err != nil {
			t.Fatal(err)
		}
		if got := appendRecordJSON(nil, &r); string(got) != want.String() {
			t.Errorf("record %d:\n got %s\nwant %s", r.ID, got, want.String())
		}
	}
}

// TestMemoryWindowIsAShareOfTheRunningBuilds: a thousand running builds
// keep a small window each, a build running alone a full one.
func TestMemoryWindowIsAShareOfTheRunningBuilds(t *testing.T) {
	var share windowShare
	evicted := func() (records int, bytes int64) {
		l := newBuildLog(chunkSource{windows: &share}, slog.New(slog.DiscardHandler))
		line := strings.Repeat("x", 100) + "\n"
		for i := 1; i <= 4*memoryWindow; i++ {
			l.appendEvent(events.Log{Payload: line, Origin: events.Origin{ID: "s"}}, "s", uint64(i))
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		// As a flush leaves it: everything durable.
		l.durable = l.base + uint64(len(l.records))
		for i := range l.records {
			l.durableBytes += recordSize(&l.records[i])
		}
		l.evictLocked()
		for i := range l.records {
			bytes += recordSize(&l.records[i])
		}
		return len(l.records), bytes
	}

	share.add(1000)
	n, bytes := evicted()
	if want := share.bytes(); bytes > want || bytes < want/2 {
		t.Fatalf("one of 1000 running builds kept %d records of %d bytes, want its share of about %d bytes", n, bytes, want)
	}
	share.add(-999)
	if n, bytes := evicted(); n != memoryWindow {
		t.Fatalf("a build running alone kept %d records (%d bytes), want the whole window of %d", n, bytes, memoryWindow)
	}
}

func TestBuildLogRedactsEventsAppendedAfterTheCredentialWasRead(t *testing.T) {
	l := newBuildLog(chunkSource{}, slog.New(slog.DiscardHandler))
	l.Append(events.Log{Payload: "before: s3cr3t"})
	l.Redact([]string{"s3cr3t", `q"uote`})
	l.Append(events.Log{Payload: "after: s3cr3t and q\"uote"})
	l.Append(events.Error{Message: "failed with s3cr3t"})
	l.Append(events.InitializeTask{Config: events.TaskConfig{Run: events.TaskRunConfig{Args: []string{"s3cr3t"}}}})
	var shown []string
	for _, r := range l.records {
		shown = append(shown, string(r.Event.Data))
	}
	all := strings.Join(shown[1:], "\n")
	if strings.Contains(all, "s3cr3t") || strings.Contains(all, "uote") || strings.Count(all, creds.Redacted) != 4 {
		t.Errorf("events after redact:\n%s", all)
	}
	if !strings.Contains(shown[0], "s3cr3t") {
		t.Errorf("an event appended before was changed: %s", shown[0])
	}
}
