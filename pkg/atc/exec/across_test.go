package exec

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/pipeline"
)

// stateStore keeps build states in memory: the only part of the Store
// that control flow uses.
type stateStore struct{ Store }

func (stateStore) SaveBuildState(context.Context, int64, json.RawMessage) error { return nil }

func acrossExecutor(t *testing.T, f *fakeLeaves) *RunState {
	t.Helper()
	r := &Runner{db: stateStore{}, log: slog.New(slog.DiscardHandler), delegates: &reports{}}
	b := &buildstate.Build{ID: 1, Name: "1", Team: "main", TeamID: 1}
	x := newRunState(r, b)
	x.leaf = f.run
	return x
}

// acrossPlan is the plan of a job step with the given across vars.
func acrossPlan(t *testing.T, step string) *concourse.Plan {
	t.Helper()
	cfg, err := pipeline.Parse([]byte("jobs:\n- name: j\n  plan:\n  - " + step + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := pipeline.JobPlan(cfg, &cfg.Jobs[0], nil, pipeline.PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &p
}

func TestAcrossRunsEveryCombinationInOrder(t *testing.T) {
	f := &fakeLeaves{}
	x := acrossExecutor(t, f)
	p := acrossPlan(t, `{task: "((.:x))-((.:z))", config: {}, across: [{var: x, values: [a, b]}, {var: z, values: [1, 2]}]}`)
	ok, err := x.Run(t.Context(), p)
	if !ok || err != nil {
		t.Fatalf("ok %v err %v", ok, err)
	}
	// One at a time (max_in_flight 1), the first var outermost.
	if got, want := f.names(), []string{"a-1", "a-2", "b-1", "b-2"}; !slices.Equal(got, want) {
		t.Errorf("ran %v, want %v", got, want)
	}
	// Every run's steps have ids of their own.
	x.b.Update(func() {
		if _, ok := x.b.State.Steps["2"]; !ok {
			t.Errorf("no record of the across step: %v", x.b.State.Steps)
		}
	})
}

func TestAcrossValuesFromALocalVarAllInFlight(t *testing.T) {
	f := &fakeLeaves{}
	x := acrossExecutor(t, f)
	x.locals.Set("names", []any{"hang", "ok", "ok2"})
	p := acrossPlan(t, `{task: "((.:item))", config: {}, across: [{var: item, values: "((.:names))", max_in_flight: all}]}`)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	// All at once: the hanging run does not keep the others from
	// starting.
	_, _ = x.Run(ctx, p)
	got := f.names()
	slices.Sort(got)
	if want := []string{"hang", "ok", "ok2"}; !slices.Equal(got, want) {
		t.Errorf("ran %v, want %v", got, want)
	}
}

func TestAcrossFailFastStopsTheRest(t *testing.T) {
	f := &fakeLeaves{}
	x := acrossExecutor(t, f)
	p := acrossPlan(t, `{task: "((.:item))", config: {}, fail_fast: true, across: [{var: item, values: [ok, fail, never]}]}`)
	ok, err := x.Run(t.Context(), p)
	if BuildResult(ok, err) != concourse.StatusFailed {
		t.Errorf("ok %v err %v, want failed", ok, err)
	}
	if got, want := f.names(), []string{"ok", "fail"}; !slices.Equal(got, want) {
		t.Errorf("ran %v, want %v", got, want)
	}
	// Without fail_fast every value runs.
	f = &fakeLeaves{}
	x = acrossExecutor(t, f)
	p = acrossPlan(t, `{task: "((.:item))", config: {}, across: [{var: item, values: [ok, fail, last]}]}`)
	ok, err = x.Run(t.Context(), p)
	if BuildResult(ok, err) != concourse.StatusFailed || len(f.names()) != 3 {
		t.Errorf("ok %v err %v ran %v", ok, err, f.names())
	}
}

func TestAcrossValuesMustBeAList(t *testing.T) {
	x := acrossExecutor(t, &fakeLeaves{})
	x.locals.Set("one", "just-a-string")
	p := acrossPlan(t, `{task: t, config: {}, across: [{var: item, values: "((.:one))"}]}`)
	ok, err := x.Run(t.Context(), p)
	if ok || err == nil || err.Error() != "across var 'item': values must be a list, not a string" {
		t.Errorf("ok %v err %v", ok, err)
	}
}

// The across step reports through its delegate: the shadowed local var,
// the runs, and an error for values that are not a list.
func TestAcrossReportsThroughItsDelegate(t *testing.T) {
	x := acrossExecutor(t, &fakeLeaves{})
	x.locals.Set("item", "shadowed")
	p := acrossPlan(t, `{task: "((.:item))", config: {}, across: [{var: item, values: [a, b]}]}`)
	if ok, err := x.Run(t.Context(), p); !ok || err != nil {
		t.Fatalf("ok %v err %v", ok, err)
	}
	got := x.d.(*reports).all()
	want := []string{
		// "2": the across step's plan id in the job's plan.
		"2" + ` stderr "\x1b[1;33mWARNING: across step shadows local var 'item'\x1b[0m\n"`,
		"2 across-substeps 2",
	}
	if !slices.Equal(got, want) {
		t.Errorf("reports:\n%q\nwant\n%q", got, want)
	}

	x = acrossExecutor(t, &fakeLeaves{})
	x.locals.Set("one", "just-a-string")
	p = acrossPlan(t, `{task: t, config: {}, across: [{var: item, values: "((.:one))"}]}`)
	_, _ = x.Run(t.Context(), p)
	if got := x.d.(*reports).all(); !slices.Equal(got, []string{"2 errored across var 'item': values must be a list, not a string"}) {
		t.Errorf("reports %q", got)
	}
}
