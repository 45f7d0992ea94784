package db

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/concourse"
)

func TestBuildNumbersAreUniqueUnderConcurrency(t *testing.T) {
	d1, dsn := openTest(t)
	d2, err := Open(t.Context(), dsn, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	team, err := d1.EnsureTeam(t.Context(), "main", nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	ids := make(chan Build, n)
	var wg sync.WaitGroup
	for i := range n {
		d := []*DB{d1, d2}[i%2]
		wg.Go(func() {
			b, err := d.CreateOneOffBuild(t.Context(), team.ID, json.RawMessage(`{"id":"x"}`), "local:test", "server-a")
			if err != nil {
				t.Errorf("create build: %v", err)
				return
			}
			ids <- b
		})
	}
	wg.Wait()
	close(ids)
	seen := map[int64]bool{}
	names := map[string]bool{}
	for b := range ids {
		if seen[b.ID] || names[b.Name] {
			t.Errorf("build %d (%s) twice", b.ID, b.Name)
		}
		seen[b.ID], names[b.Name] = true, true
		if b.Name != strconv.FormatInt(b.ID, 10) || b.Status != concourse.StatusPending || b.TeamName != "main" {
			t.Errorf("build %+v", b)
		}
	}
	if len(seen) != n {
		t.Fatalf("%d builds, want %d", len(seen), n)
	}
}

func TestBuildLifecycle(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	main, err := d.EnsureTeam(ctx, "main", nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := d.EnsureTeam(ctx, "other", nil)
	if err != nil {
		t.Fatal(err)
	}
	plan := json.RawMessage(`{"id": "1", "task": {"name": "hello"}}`)
	b, err := d.CreateOneOffBuild(ctx, main.ID, plan, "local:alice", "server-a")
	if err != nil {
		t.Fatal(err)
	}
	if !b.StartTime.IsZero() || !b.EndTime.IsZero() || b.CreateTime.IsZero() || b.CreatedBy != "local:alice" {
		t.Fatalf("new build %+v", b)
	}
	var gotPlan, wantPlan any
	_ = json.Unmarshal(b.Plan, &gotPlan)
	_ = json.Unmarshal(plan, &wantPlan)
	if b2, _ := json.Marshal(gotPlan); string(b2) != string(mustJSON(t, wantPlan)) {
		t.Fatalf("plan %s, want %s", b.Plan, plan)
	}

	start := time.Now().Truncate(time.Microsecond)
	if err := d.StartBuild(ctx, b.ID, start); err != nil {
		t.Fatal(err)
	}
	if err := d.StartBuild(ctx, b.ID, start); err != nil {
		t.Fatalf("start again (resume): %v", err)
	}
	if err := d.SaveBuildState(ctx, b.ID, json.RawMessage(`{"steps":[1,2]}`)); err != nil {
		t.Fatal(err)
	}
	if err := d.RequestAbort(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.Build(ctx, b.ID); got.Comment != "" {
		t.Fatalf("a new build's comment is %q", got.Comment)
	}
	const comment = "flaky: <b>not bold</b>\nsecond line ✓"
	if err := d.SetBuildComment(ctx, b.ID, comment); err != nil {
		t.Fatal(err)
	}
	if got, err := d.Build(ctx, b.ID); err != nil || got.Comment != comment {
		t.Fatalf("Build's comment %q %v, want %q", got.Comment, err, comment)
	}
	if got, err := d.JobBuildByID(ctx, b.ID); err != nil || got.Comment != comment {
		t.Fatalf("JobBuildByID's comment %q %v, want %q", got.Comment, err, comment)
	}
	if ids, err := d.AbortsRequested(ctx, "server-a"); err != nil || len(ids) != 1 || ids[0] != b.ID {
		t.Fatalf("aborts requested of server-a: %v %v", ids, err)
	}
	if ids, _ := d.AbortsRequested(ctx, "server-b"); len(ids) != 0 {
		t.Fatalf("server-b has aborts requested %v", ids)
	}
	unfinished, err := d.UnfinishedBuilds(ctx, "server-a")
	if err != nil || len(unfinished) != 1 || unfinished[0].ID != b.ID {
		t.Fatalf("unfinished %v %v", unfinished, err)
	}
	if u, _ := d.UnfinishedBuilds(ctx, "server-b"); len(u) != 0 {
		t.Fatalf("server-b has %v", u)
	}
	got, err := d.Build(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != concourse.StatusStarted || !got.StartTime.Equal(start) || !got.AbortRequested || string(got.State) != `{"steps": [1, 2]}` {
		t.Fatalf("started build %+v (state %s)", got, got.State)
	}

	end := start.Add(time.Second)
	if err := d.FinishBuild(ctx, b.ID, concourse.StatusAborted, end); err != nil {
		t.Fatal(err)
	}
	err = d.FinishBuild(ctx, b.ID, concourse.StatusSucceeded, end.Add(time.Second))
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("second final status: want ErrConflict, got %v", err)
	}
	if err := d.StartBuild(ctx, b.ID, end); !errors.Is(err, ErrConflict) {
		t.Fatalf("start a finished build: want ErrConflict, got %v", err)
	}
	if err := d.FinishBuild(ctx, b.ID, concourse.StatusStarted, end); err == nil {
		t.Fatal("finish with a non-final status succeeded")
	}
	got, _ = d.Build(ctx, b.ID)
	if got.Status != concourse.StatusAborted || !got.EndTime.Equal(end) {
		t.Fatalf("finished build %+v", got)
	}

	// Paging: ids of main's builds, newest first.
	var mainIDs []int64
	for range 5 {
		b, err := d.CreateOneOffBuild(ctx, main.ID, nil, "", "server-a")
		if err != nil {
			t.Fatal(err)
		}
		mainIDs = append(mainIDs, b.ID)
	}
	ob, err := d.CreateOneOffBuild(ctx, other.ID, nil, "", "server-b")
	if err != nil {
		t.Fatal(err)
	}
	all, _ := d.Builds(ctx, BuildFilter{})
	if len(all) != 7 || all[0].ID != ob.ID {
		t.Fatalf("all builds: %d, first %d", len(all), all[0].ID)
	}
	onlyMain, _ := d.Builds(ctx, BuildFilter{TeamIDs: []int{main.ID}, Limit: 2})
	if len(onlyMain) != 2 || onlyMain[0].ID != mainIDs[4] || onlyMain[1].ID != mainIDs[3] {
		t.Fatalf("main, limit 2: %v", buildIDs(onlyMain))
	}
	before, _ := d.Builds(ctx, BuildFilter{TeamIDs: []int{main.ID}, Before: mainIDs[3], Limit: 2})
	if ids := buildIDs(before); len(ids) != 2 || ids[0] != mainIDs[2] || ids[1] != mainIDs[1] {
		t.Fatalf("before %d: %v", mainIDs[3], ids)
	}
	after, _ := d.Builds(ctx, BuildFilter{TeamIDs: []int{main.ID}, After: mainIDs[0], Limit: 2})
	if ids := buildIDs(after); len(ids) != 2 || ids[0] != mainIDs[2] || ids[1] != mainIDs[1] {
		t.Fatalf("after %d: %v", mainIDs[0], ids)
	}
	// Bounds beyond the id column's range page to the end, not an error
	// (the API answered 500 for to=MaxInt64).
	beyond, err := d.Builds(ctx, BuildFilter{TeamIDs: []int{main.ID}, Before: math.MaxInt64, Limit: 2})
	if ids := buildIDs(beyond); err != nil || len(ids) != 2 || ids[0] != mainIDs[4] {
		t.Fatalf("before MaxInt64: %v %v", ids, err)
	}
	if none, err := d.Builds(ctx, BuildFilter{After: math.MaxInt64 - 1}); err != nil || len(none) != 0 {
		t.Fatalf("after MaxInt64-1: %v %v", buildIDs(none), err)
	}
	running, _ := d.Builds(ctx, BuildFilter{Running: true})
	if len(running) != 6 {
		t.Fatalf("running: %v", buildIDs(running))
	}
	none, _ := d.Builds(ctx, BuildFilter{TeamIDs: []int{}})
	if len(none) != 0 {
		t.Fatalf("no teams: %v", buildIDs(none))
	}
}

func TestEventChunks(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	team, _ := d.EnsureTeam(ctx, "main", nil)
	b, err := d.CreateOneOffBuild(ctx, team.ID, nil, "", "s")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []EventChunk{{FirstID: 100, LastID: 149, Key: "c2"}, {FirstID: 0, LastID: 99, Key: "c1"}, {FirstID: 150, LastID: 150, Key: "c3"}} {
		if err := d.AddEventChunk(ctx, b.ID, c.FirstID, c.LastID, c.Key); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.AddEventChunk(ctx, b.ID, 100, 120, "dup"); !errors.Is(err, ErrConflict) {
		t.Fatalf("duplicate chunk: want ErrConflict, got %v", err)
	}
	cs, err := d.EventChunks(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 3 || cs[0].Key != "c1" || cs[1].Key != "c2" || !sameChunks(cs[2:], []EventChunk{{FirstID: 150, LastID: 150, Key: "c3"}}) {
		t.Fatalf("chunks %+v", cs)
	}
}

// TestEventSegment: one segment's chunks of several builds go in together
// or not at all, next to a build's whole-object chunks; a retried chunk
// replaces the one it extends.
func TestEventSegment(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	team, _ := d.EnsureTeam(ctx, "main", nil)
	var ids []int64
	for range 2 {
		b, err := d.CreateOneOffBuild(ctx, team.ID, nil, "", "s")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, b.ID)
	}
	a, b := ids[0], ids[1]
	if err := d.AddEventChunk(ctx, a, 1, 10, "atc/events/a/1"); err != nil {
		t.Fatal(err)
	}
	seg := func(key string, chunks ...BuildEventChunk) []BuildEventChunk {
		for i := range chunks {
			chunks[i].Key = key
		}
		return chunks
	}
	chunk := func(build int64, first, last uint64, offset, length int64) BuildEventChunk {
		return BuildEventChunk{BuildID: build, EventChunk: EventChunk{FirstID: first, LastID: last, Offset: offset, Length: length}}
	}
	// A build that does not exist (deleted meanwhile) does not hold up the others.
	if err := d.AddEventSegment(ctx, seg("s1", chunk(a, 11, 12, 0, 40), chunk(b, 1, 3, 40, 55), chunk(b+1000, 1, 2, 95, 10))); err != nil {
		t.Fatal(err)
	}
	// One bad chunk (last before first) fails the segment: none of it is recorded.
	if err := d.AddEventSegment(ctx, seg("s2", chunk(a, 13, 14, 0, 10), chunk(b, 5, 4, 10, 10))); err == nil {
		t.Fatal("a segment with an invalid chunk was recorded")
	}
	// The retry of b's chunk 4 after a lost answer: the later, longer one wins;
	// a shorter one (an older attempt) does not replace it.
	if err := d.AddEventSegment(ctx, seg("s3", chunk(b, 4, 5, 7, 8))); err != nil {
		t.Fatal(err)
	}
	// What a chunk holds is recorded with it (and replaced with it).
	s4 := chunk(b, 4, 9, 100, 20)
	s4.Contents = ChunkContents{Known: true, Origins: []string{"plan-1", "plan-2"}, Other: true}
	if err := d.AddEventSegment(ctx, seg("s4", s4)); err != nil {
		t.Fatal(err)
	}
	if err := d.AddEventSegment(ctx, seg("s5", chunk(b, 4, 6, 1, 1))); err != nil {
		t.Fatal(err)
	}
	want := map[int64][]EventChunk{
		a: {{FirstID: 1, LastID: 10, Key: "atc/events/a/1"}, {FirstID: 11, LastID: 12, Key: "s1", Offset: 0, Length: 40}},
		b: {{FirstID: 1, LastID: 3, Key: "s1", Offset: 40, Length: 55}, {FirstID: 4, LastID: 9, Key: "s4", Offset: 100, Length: 20,
			Contents: ChunkContents{Known: true, Origins: []string{"plan-1", "plan-2"}, Other: true}}},
	}
	for id, w := range want {
		cs, err := d.EventChunks(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if !sameChunks(cs, w) {
			t.Errorf("build %d: chunks %+v, want %+v", id, cs, w)
		}
	}
}

func sameChunks(a, b []EventChunk) bool {
	return slices.EqualFunc(a, b, func(x, y EventChunk) bool {
		return x.FirstID == y.FirstID && x.LastID == y.LastID && x.Key == y.Key && x.Offset == y.Offset && x.Length == y.Length &&
			x.Contents.Known == y.Contents.Known && x.Contents.Other == y.Contents.Other && slices.Equal(x.Contents.Origins, y.Contents.Origins)
	})
}

// TestEventChunkContents: a chunk that holds no output records an empty
// list of origins, told apart from one written before contents were known.
func TestEventChunkContents(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	team, _ := d.EnsureTeam(ctx, "main", nil)
	b, err := d.CreateOneOffBuild(ctx, team.ID, nil, "", "s")
	if err != nil {
		t.Fatal(err)
	}
	chunks := []BuildEventChunk{
		{BuildID: b.ID, EventChunk: EventChunk{FirstID: 1, LastID: 2, Key: "s", Length: 5, Contents: ChunkContents{Known: true, Other: true}}},
		{BuildID: b.ID, EventChunk: EventChunk{FirstID: 3, LastID: 4, Key: "s", Offset: 5, Length: 5}},
	}
	if err := d.AddEventSegment(ctx, chunks); err != nil {
		t.Fatal(err)
	}
	cs, err := d.EventChunks(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || !cs[0].Contents.Known || !cs[0].Contents.Other || len(cs[0].Contents.Origins) != 0 || cs[1].Contents.Known {
		t.Fatalf("chunks %+v", cs)
	}
}

func buildIDs[B interface{ Build | JobBuild }](bs []B) []int64 {
	ids := make([]int64, len(bs))
	for i, b := range bs {
		switch b := any(b).(type) {
		case Build:
			ids[i] = b.ID
		case JobBuild:
			ids[i] = b.ID
		}
	}
	return ids
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
