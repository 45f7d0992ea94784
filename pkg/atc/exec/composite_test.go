package exec

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/porter-ci/porter/internal/eventually"
	"github.com/porter-ci/porter/pkg/concourse"
)

// fakeLeaves runs "task" steps by name: the name says what the step does.
type fakeLeaves struct {
	mu  sync.Mutex
	ran []string
}

func (f *fakeLeaves) run(ctx context.Context, p *concourse.Plan, _ Step) (bool, error) {
	name := p.Task.Name
	f.mu.Lock()
	f.ran = append(f.ran, name)
	f.mu.Unlock()
	switch name {
	case "fail":
		return false, nil
	case "error":
		return false, errors.New("boom")
	case "hang":
		<-ctx.Done()
		return false, interrupted(ctx)
	case "abort":
		return false, ErrAborted
	}
	return true, nil
}

func (f *fakeLeaves) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ran)
}

func plan(t *testing.T, js string) *concourse.Plan {
	t.Helper()
	var p concourse.Plan
	if err := json.Unmarshal([]byte(js), &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

func TestCompositeStepsControlFlow(t *testing.T) {
	for _, tc := range []struct {
		name   string
		plan   string
		status concourse.BuildStatus
		ran    []string
	}{
		{"do stops at a failure", `{"do":[{"task":{"name":"ok"}},{"task":{"name":"fail"}},{"task":{"name":"never"}}]}`,
			concourse.StatusFailed, []string{"ok", "fail"}},
		{"ensure runs after a failure", `{"ensure":{"step":{"task":{"name":"fail"}},"ensure":{"task":{"name":"cleanup"}}}}`,
			concourse.StatusFailed, []string{"fail", "cleanup"}},
		{"ensure runs after an abort", `{"ensure":{"step":{"task":{"name":"abort"}},"ensure":{"task":{"name":"cleanup"}}}}`,
			concourse.StatusAborted, []string{"abort", "cleanup"}},
		{"on_success skipped on failure", `{"on_success":{"step":{"task":{"name":"fail"}},"on_success":{"task":{"name":"hook"}}}}`,
			concourse.StatusFailed, []string{"fail"}},
		{"on_failure runs, build still fails", `{"on_failure":{"step":{"task":{"name":"fail"}},"on_failure":{"task":{"name":"hook"}}}}`,
			concourse.StatusFailed, []string{"fail", "hook"}},
		{"on_error runs on error", `{"on_error":{"step":{"task":{"name":"error"}},"on_error":{"task":{"name":"hook"}}}}`,
			concourse.StatusErrored, []string{"error", "hook"}},
		{"on_abort runs on abort", `{"on_abort":{"step":{"task":{"name":"abort"}},"on_abort":{"task":{"name":"hook"}}}}`,
			concourse.StatusAborted, []string{"abort", "hook"}},
		{"try swallows a failure and an error", `{"do":[{"try":{"step":{"task":{"name":"fail"}}}},{"try":{"step":{"task":{"name":"error"}}}},{"task":{"name":"ok"}}]}`,
			concourse.StatusSucceeded, []string{"fail", "error", "ok"}},
		{"try does not swallow an abort", `{"try":{"step":{"task":{"name":"abort"}}}}`,
			concourse.StatusAborted, []string{"abort"}},
		{"retry until success", `{"retry":[{"task":{"name":"fail"}},{"task":{"name":"ok"}},{"task":{"name":"never"}}]}`,
			concourse.StatusSucceeded, []string{"fail", "ok"}},
		{"timeout fails the step", `{"timeout":{"duration":"50ms","step":{"task":{"name":"hang"}}}}`,
			concourse.StatusFailed, []string{"hang"}},
		{"in_parallel fails if one fails, runs all", `{"in_parallel":{"steps":[{"task":{"name":"fail"}},{"task":{"name":"ok"}}]}}`,
			concourse.StatusFailed, []string{"fail", "ok"}},
		{"in_parallel fail_fast stops the others", `{"in_parallel":{"fail_fast":true,"steps":[{"task":{"name":"hang"}},{"task":{"name":"fail"}}]}}`,
			// hang may be stopped before it starts: only the outcome matters.
			concourse.StatusFailed, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeLeaves{}
			x := &RunState{leaf: f.run}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			ok, err := x.Run(ctx, plan(t, tc.plan))
			if got := BuildResult(ok, err); got != tc.status {
				t.Errorf("status %s (err %v), want %s", got, err, tc.status)
			}
			if tc.ran == nil {
				return
			}
			got := f.names()
			slices.Sort(got)
			want := slices.Clone(tc.ran)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("ran %v, want %v", f.names(), tc.ran)
			}
		})
	}
}

func TestAbortStopsTheRestAndRunsEnsure(t *testing.T) {
	f := &fakeLeaves{}
	x := &RunState{leaf: f.run}
	ctx, abort := context.WithCancelCause(context.Background())
	done := make(chan concourse.BuildStatus)
	go func() {
		ok, err := x.Run(ctx, plan(t, `{"ensure":{"step":{"do":[{"task":{"name":"hang"}},{"task":{"name":"never"}}]},"ensure":{"task":{"name":"cleanup"}}}}`))
		done <- BuildResult(ok, err)
	}()
	eventually.Within(t, 5*time.Second, func() error {
		if len(f.names()) == 0 {
			return errors.New("no step started")
		}
		return nil
	})
	abort(ErrAborted)
	select {
	case got := <-done:
		if got != concourse.StatusAborted {
			t.Errorf("status %s, want aborted", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the build did not stop after the abort")
	}
	if got := f.names(); !slices.Equal(got, []string{"hang", "cleanup"}) {
		t.Errorf("ran %v, want [hang cleanup]", got)
	}
}
