package webhookserver

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
)

// fakes: team main, pipeline p, resource r with webhook_token "tok"; a
// started check becomes r's last check build, running until finished.
type fakes struct {
	mu       sync.Mutex
	builds   map[int64]db.JobBuild
	last     int64
	starts   int
	requests int
	// gate, when set, holds StartCheck until it is closed; entered hears
	// of each StartCheck that reached it.
	gate    chan struct{}
	entered chan struct{}
	// raw is r's webhook_token as written ("": "tok"); lookups counts
	// the fills of its ((vars)).
	raw     string
	lookups int
}

func (f *fakes) Team(_ context.Context, name string) (db.Team, error) {
	if name != "main" {
		return db.Team{}, db.ErrNotFound
	}
	return db.Team{ID: 1, Name: "main"}, nil
}

func (f *fakes) PipelineInstance(_ context.Context, _ int, ref db.PipelineRef) (db.Pipeline, error) {
	if ref.Name != "p" {
		return db.Pipeline{}, db.ErrNotFound
	}
	return db.Pipeline{ID: 10, TeamID: 1, TeamName: "main", Name: "p"}, nil
}

func (f *fakes) LookupPipelineResource(_ context.Context, _ int64, name string) (db.ResourceRef, error) {
	if name != "r" {
		return db.ResourceRef{}, db.ErrNotFound
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	raw := f.raw
	if raw == "" {
		raw = "tok"
	}
	cfg, _ := json.Marshal(map[string]string{"name": "r", "type": "mock", "webhook_token": raw})
	return db.ResourceRef{ID: 200, PipelineID: 10, PipelineName: "p", TeamID: 1, TeamName: "main", Name: "r", Type: "mock",
		Config: cfg, Active: true, LastCheckBuild: f.last}, nil
}

func (f *fakes) JobBuildByID(_ context.Context, id int64) (db.JobBuild, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.builds[id]
	if !ok {
		return db.JobBuild{}, db.ErrNotFound
	}
	return b, nil
}

func (f *fakes) RequestCheck(context.Context, int64, map[string]string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests++
	return nil
}

func (f *fakes) StartCheck(_ context.Context, res db.ResourceRef, _ map[string]string) (db.JobBuild, error) {
	if f.entered != nil {
		f.entered <- struct{}{}
	}
	if f.gate != nil {
		<-f.gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.starts++
	id := int64(100 + f.starts)
	b := db.JobBuild{Build: db.Build{ID: id, TeamName: "main", Name: "check", Status: concourse.StatusStarted}, ResourceID: res.ID, ResourceName: res.Name}
	if f.builds == nil {
		f.builds = map[int64]db.JobBuild{}
	}
	f.builds[id], f.last = b, id
	return b, nil
}

// InterpolateString fills in ((t)) as "tok".
func (f *fakes) InterpolateString(_ context.Context, _ db.Pipeline, s string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups++
	return strings.ReplaceAll(s, "((t))", "tok"), nil
}
func (f *fakes) WakeScheduler() {}

// finish ends the running check.
func (f *fakes) finish() {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.builds[f.last]
	b.Status = concourse.StatusSucceeded
	f.builds[f.last] = b
}

func (f *fakes) counts() (starts, requests int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.starts, f.requests
}

func newServer(f *fakes) http.Handler {
	s := &Server{Store: f, Engine: f, Log: slog.New(slog.DiscardHandler),
		PipelineRef: func(r *http.Request) (db.PipelineRef, error) {
			return db.PipelineRef{Name: r.PathValue("pipeline_name")}, nil
		},
		Present: func(b db.JobBuild) concourse.Build { return concourse.Build{ID: b.ID, Status: b.Status} }}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/teams/{team_name}/pipelines/{pipeline_name}/resources/{resource_name}/check/webhook", s.CheckResource)
	return mux
}

const hook = "/api/v1/teams/main/pipelines/p/resources/r/check/webhook?webhook_token="

func call(h http.Handler, token string) (int, concourse.Build) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", hook+token, nil))
	var b concourse.Build
	_ = json.Unmarshal(rec.Body.Bytes(), &b)
	return rec.Code, b
}

// TestAFloodStartsOneCheck: many calls at once start one check; those
// that came while it ran queue a single one more (RequestCheck is a flag,
// set however often), and all answer the same build.
func TestAFloodStartsOneCheck(t *testing.T) {
	f := &fakes{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	h := newServer(f)
	const n = 200
	codes := make(chan int, n)
	ids := make(chan int64, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			code, b := call(h, "tok")
			codes <- code
			ids <- b.ID
		})
	}
	select {
	case <-f.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no check started")
	}
	time.Sleep(50 * time.Millisecond) // the others pile up behind it
	close(f.gate)
	wg.Wait()
	close(codes)
	close(ids)
	for c := range codes {
		if c != http.StatusCreated {
			t.Fatalf("a call answered %d, want 201", c)
		}
	}
	for id := range ids {
		if id != 101 {
			t.Fatalf("a call answered build %d, want the one check, 101", id)
		}
	}
	if starts, _ := f.counts(); starts != 1 {
		t.Fatalf("%d calls started %d checks, want 1", n, starts)
	}

	// The check ended: the next call starts a new one.
	f.finish()
	f.entered = nil
	if code, b := call(h, "tok"); code != http.StatusCreated || b.ID != 102 {
		t.Fatalf("after the check: %d, build %d; want 201, build 102", code, b.ID)
	}
	// Wrong tokens start nothing and queue nothing.
	f.finish()
	_, before := f.counts()
	for range 50 {
		if code, _ := call(h, "nope"); code != http.StatusUnauthorized {
			t.Fatalf("wrong token: %d, want 401", code)
		}
	}
	if starts, requests := f.counts(); starts != 2 || requests != before {
		t.Fatalf("wrong tokens: %d checks, %d requests; want 2, %d", starts, requests, before)
	}
}

// TestAWaiterThatGoesAwayLeavesTheCheck: the caller that started a check
// going away does not cancel it for the others.
func TestAWaiterThatGoesAwayLeavesTheCheck(t *testing.T) {
	f := &fakes{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	h := newServer(f)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, "POST", hook+"tok", nil))
		done <- rec.Code
	}()
	<-f.entered
	cancel()
	other := make(chan int64, 1)
	go func() {
		_, b := call(h, "tok")
		other <- b.ID
	}()
	time.Sleep(20 * time.Millisecond)
	close(f.gate)
	<-done
	if id := <-other; id != 101 {
		t.Fatalf("the other caller got build %d, want 101", id)
	}
	if starts, _ := f.counts(); starts != 1 {
		t.Fatalf("%d checks, want 1", starts)
	}
}

// TestAFloodLooksTheTokenUpOnce: concurrent calls, with right and wrong
// tokens, fill in the token's ((vars)) once; a changed token is looked up
// again at once.
func TestAFloodLooksTheTokenUpOnce(t *testing.T) {
	f := &fakes{raw: "((t))"}
	h := newServer(f)
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			tok, want := "tok", http.StatusCreated
			if i%2 == 1 {
				tok, want = "wrong", http.StatusUnauthorized
			}
			if code, _ := call(h, tok); code != want {
				t.Errorf("token %q: %d, want %d", tok, code, want)
			}
		})
	}
	wg.Wait()
	f.mu.Lock()
	lookups := f.lookups
	f.raw = "new-((t))"
	f.mu.Unlock()
	if lookups != 1 {
		t.Fatalf("100 calls filled in the token %d times, want 1", lookups)
	}
	if code, _ := call(h, "tok"); code != http.StatusUnauthorized {
		t.Fatalf("old token after a change: %d, want 401", code)
	}
	if code, _ := call(h, "new-tok"); code != http.StatusCreated {
		t.Fatalf("new token: %d, want 201", code)
	}
}
