package buildlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events"
)

// countingStore counts the ranged reads of segment parts.
type countingStore struct {
	blobstore.Store
	reads atomic.Int64
}

func (s *countingStore) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	s.reads.Add(1)
	return s.Store.GetRange(ctx, key, offset, length)
}

// rangeLog writes, on real MinIO indexed in real PostgreSQL, a build log
// whose step "big" prints lines "big line 1".."big line n" in pieces that
// cut lines, and whose step "small" prints 3 lines at its start and then
// nothing while big prints: the chunks after small's end hold only big's
// output. Each batch is its own chunk (synced).
func rangeLog(t *testing.T, n int) (*Logs, *countingStore, int64, string) {
	t.Helper()
	store := &countingStore{Store: minioStore(t)}
	d := testDB(t)
	logs, err := New(Config{Store: store, Index: d, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	id := newBuilds(t, d, 1)[0]
	ctx, cancel := context.WithCancel(t.Context())
	l := logs.Open(id)
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	sync := func() {
		if err := l.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	out := func(step, s string) {
		l.Append(events.Log{Time: 1700000000, Origin: events.Origin{ID: step}, Payload: s})
	}
	l.Redact([]string{"s3cret"})
	l.Append(events.InitializeTask{Time: 1, Origin: events.Origin{ID: "small"}})
	out("small", "small one\nsmall \x1b[1mtwo\x1b[0m\nsmall three, s3cret\n")
	l.Append(events.FinishTask{Time: 2, Origin: events.Origin{ID: "small"}, ExitStatus: 0})
	l.Append(events.StartTask{Time: 3, Origin: events.Origin{ID: "big"}})
	sync()
	var all strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&all, "big line %d\n", i)
	}
	text := all.String()
	// Pieces of 37 bytes: lines are cut across records and chunks.
	for len(text) > 0 {
		batch := min(len(text), 37*50)
		for p := 0; p < batch; p += 37 {
			out("big", text[p:min(p+37, batch)])
		}
		text = text[batch:]
		sync()
	}
	l.Append(events.FinishTask{Time: 4, Origin: events.Origin{ID: "big"}, ExitStatus: 1})
	l.Append(events.Status{Status: concourse.StatusFailed, Time: 5})
	l.Finish()
	sync()
	return logs, store, id, all.String()
}

func joined(p Page) string {
	var sb strings.Builder
	for _, o := range p.Logs {
		sb.WriteString(o.Payload)
	}
	return sb.String()
}

// lineAt is the line of p that ends in the k-th newline of record id, as
// the build page puts a page's pieces together.
func lineAt(p Page, id uint64, k int) string {
	carry := ""
	for _, o := range p.Logs {
		parts := strings.Split(o.Payload, "\n")
		for j, part := range parts[:len(parts)-1] {
			if o.ID == id && j == k {
				return carry + part
			}
			carry = ""
		}
		carry += parts[len(parts)-1]
	}
	return carry
}

// TestPageBackwards: a step's output opens at its end and pages back to
// its start, each page holding at least the lines asked for, together
// exactly the output; the chunks that hold none of the step's output are
// never read.
func TestPageBackwards(t *testing.T) {
	const n = 3000
	logs, store, id, want := rangeLog(t, n)
	ctx := t.Context()
	p, err := logs.Page(ctx, id, PageQuery{Origin: "big", Lines: 100})
	if err != nil {
		t.Fatal(err)
	}
	if !p.End || p.Start || !strings.HasSuffix(joined(p), "big line 3000\n") || strings.Count(joined(p), "\n") < 100 {
		t.Fatalf("last page: start %v end %v, %q", p.Start, p.End, joined(p))
	}
	got := joined(p)
	pages := 1
	for !p.Start {
		if p, err = logs.Page(ctx, id, PageQuery{Origin: "big", Before: p.From, Lines: 100}); err != nil {
			t.Fatal(err)
		}
		got = joined(p) + got
		pages++
	}
	if got != want {
		t.Fatalf("pages together are not the output: %d bytes, want %d", len(got), len(want))
	}
	if pages < 20 {
		t.Fatalf("%d pages of 100 lines for 3000 lines", pages)
	}

	// small's output is in the first chunk only: reading it from the end
	// reads that chunk and no other.
	before := store.reads.Load()
	sp, err := logs.Page(ctx, id, PageQuery{Origin: "small", Lines: 100})
	if err != nil {
		t.Fatal(err)
	}
	if reads := store.reads.Load() - before; reads != 1 {
		t.Errorf("small's page read %d chunks, want 1", reads)
	}
	if got := joined(sp); got != "small one\nsmall \x1b[1mtwo\x1b[0m\nsmall three, ((redacted))\n" || !sp.Start {
		t.Errorf("small's page: %q start %v", got, sp.Start)
	}

	// Forward from a record: the output after it, to the end.
	mid, err := logs.Page(ctx, id, PageQuery{Origin: "big", Before: p.From + 500, Lines: 10})
	if err != nil {
		t.Fatal(err)
	}
	f, err := logs.Page(ctx, id, PageQuery{Origin: "big", After: mid.To, Lines: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if !f.End || f.From != mid.To+1 || !strings.HasSuffix(want, joined(f)) || joined(mid)+joined(f) != want[strings.Index(want, joined(mid)):] {
		t.Fatalf("forward page: end %v from %d (after %d)", f.End, f.From, mid.To)
	}
	if _, err := logs.Page(ctx, id, PageQuery{Origin: "big", Before: 5, After: 2, Lines: 1}); err == nil {
		t.Error("a page both before and after a record was read")
	}
}

// TestOutline: the events but output, read from the chunks that hold
// some, which are few (not one per chunk of output).
func TestOutline(t *testing.T) {
	logs, store, id, _ := rangeLog(t, 3000)
	before := store.reads.Load()
	recs, last, stored, err := logs.Outline(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, r := range recs {
		kinds = append(kinds, string(r.Event.Event))
	}
	if got := strings.Join(kinds, " "); got != "initialize-task finish-task start-task finish-task status" {
		t.Fatalf("outline: %s", got)
	}
	if reads := store.reads.Load() - before; reads > 3 {
		t.Errorf("the outline read %d chunks", reads)
	}
	if last != recs[len(recs)-1].ID || stored <= 0 {
		t.Errorf("last %d (status is %d), stored %d", last, recs[len(recs)-1].ID, stored)
	}
}

// TestSearch: lines holding the text, across pieces, case insensitive,
// through escapes, redacted as stored; capped, and going on where the
// last search stopped; ended by its context.
func TestSearch(t *testing.T) {
	logs, _, id, _ := rangeLog(t, 3000)
	ctx := t.Context()
	res, err := logs.Search(ctx, id, SearchQuery{Text: "BIG LINE 2999", Hits: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Hits) != 1 || res.Hits[0].Text != "big line 2999" || res.Hits[0].Origin != "big" || res.More {
		t.Fatalf("hits %+v next %+v", res.Hits, res.Next)
	}
	// The hit's record holds the line's newline as its K-th.
	h := res.Hits[0]
	p, err := logs.Page(ctx, id, PageQuery{Origin: "big", Before: h.ID + 1, Lines: 0})
	if err != nil {
		t.Fatal(err)
	}
	if got := lineAt(p, h.ID, h.K); got != "big line 2999" {
		t.Fatalf("hit %+v: the page has %q there", h, got)
	}

	for _, c := range []struct{ q, want string }{{"two", "small two"}, {"s3cret", ""}, {"(redacted)", "small three, ((redacted))"}} {
		res, err := logs.Search(ctx, id, SearchQuery{Text: c.q, Hits: 10})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, h := range res.Hits {
			got = append(got, h.Text)
		}
		if strings.Join(got, "|") != c.want {
			t.Errorf("search %q: %q, want %q", c.q, got, c.want)
		}
	}

	// "line 1" is in 1111 lines: 100 at a time, on from where the last stopped.
	var all []Hit
	var from SearchCursor
	searches := 0
	for range 20 {
		res, err := logs.Search(ctx, id, SearchQuery{Text: "line 1", Origin: "big", From: from, Hits: 100})
		if err != nil {
			t.Fatal(err)
		}
		searches++
		all = append(all, res.Hits...)
		if !res.More {
			break
		}
		from = res.Next
	}
	// Lines cut where a search stopped are searched whole by the next,
	// and no hit is answered twice.
	seen := map[string]bool{}
	for _, h := range all {
		if seen[h.Text] {
			t.Errorf("hit %q answered twice", h.Text)
		}
		seen[h.Text] = true
	}
	if len(all) != 1111 || searches < 11 {
		t.Errorf("%d hits of 'line 1' in %d searches, want 1111", len(all), searches)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := logs.Search(cctx, id, SearchQuery{Text: "x", Hits: 1}); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled search: %v", err)
	}
	res, err = logs.Search(ctx, id, SearchQuery{Text: "big line 2", Hits: 1 << 20, Budget: time.Nanosecond})
	if err != nil || !res.More || res.Next.After == 0 {
		t.Errorf("a search out of time: more %v next %+v, %v", res.More, res.Next, err)
	}
}
