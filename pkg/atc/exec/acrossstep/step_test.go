package acrossstep

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/porter-ci/porter/pkg/atc/exec/stepvars"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/pipeline"
)

// fake is the build the step runs in: what it reports, its local vars and
// the runs of its substep (by their local vars x and z).
type fake struct {
	mu     sync.Mutex
	lines  []string
	locals *stepvars.Scope
	runs   []string
}

func (f *fake) add(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lines = append(f.lines, fmt.Sprintf(format, args...))
}

func (f *fake) Stderr(msg string)                         { f.add("stderr %s", msg) }
func (f *fake) AcrossSubsteps(substeps []json.RawMessage) { f.add("substeps %d", len(substeps)) }
func (f *fake) Started(context.Context)                   { f.add("started") }
func (f *fake) Ended(_ context.Context, ok bool, err error) {
	f.add("ended %v %v", ok, err)
}

func (f *fake) Errored(_ context.Context, err error) (bool, error) {
	f.add("errored %v", err)
	return false, err
}

func (f *fake) Scope(ctx context.Context) *stepvars.Scope { return stepvars.ScopeOf(ctx, f.locals) }

// Interpolate fills in ((.:list)) only.
func (f *fake) Interpolate(_ context.Context, v any) (any, error) {
	if v == "((.:list))" {
		l, _ := f.locals.Get("list")
		return l, nil
	}
	return v, nil
}

func (f *fake) Run(ctx context.Context, p *concourse.Plan) (bool, error) {
	scope := stepvars.ScopeOf(ctx, f.locals)
	x, _ := scope.Get("x")
	z, _ := scope.Get("z")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runs = append(f.runs, fmt.Sprintf("%v-%v", x, z))
	return true, nil
}

// acrossPlan is the across step of a job's plan.
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
	for q := &p; q != nil; {
		switch {
		case q.Across != nil:
			return q
		case q.Do != nil && len(*q.Do) > 0:
			q = &(*q.Do)[0]
		default:
			q = nil
		}
	}
	t.Fatalf("no across step in %+v", p)
	return nil
}

func (f *fake) step(p *concourse.Plan, announce bool) Step {
	return Step{Plan: p, Announce: announce, Delegate: f, Record: f, Locals: f, Vars: f, Steps: f}
}

func TestAcrossRunsEveryCombinationWithItsLocalVars(t *testing.T) {
	f := &fake{locals: stepvars.NewScope()}
	f.locals.Set("x", "shadowed")
	f.locals.Set("list", []any{"1", "2"})
	p := acrossPlan(t, `{task: t, config: {}, across: [{var: x, values: [a, b]}, {var: z, values: "((.:list))"}]}`)
	ok, err := f.step(p, true).Run(t.Context())
	if !ok || err != nil {
		t.Fatalf("run: %v, %v", ok, err)
	}
	if want := []string{"a-1", "a-2", "b-1", "b-2"}; !slices.Equal(f.runs, want) {
		t.Errorf("ran %v, want %v", f.runs, want)
	}
	want := []string{"stderr \x1b[1;33mWARNING: across step shadows local var 'x'\x1b[0m\n", "substeps 4", "started", "ended true <nil>"}
	if !slices.Equal(f.lines, want) {
		t.Errorf("reported %q, want %q", f.lines, want)
	}
	if v, _ := f.locals.Get("x"); v != "shadowed" {
		t.Errorf("the build's x is %v after the runs", v)
	}

	// Announced before a restart: not again.
	f.lines, f.runs = nil, nil
	if ok, err := f.step(p, false).Run(t.Context()); !ok || err != nil || !slices.Equal(f.lines, []string{"ended true <nil>"}) || len(f.runs) != 4 {
		t.Errorf("again: %v, %v; reported %q, ran %v", ok, err, f.lines, f.runs)
	}
}

func TestAcrossValuesMustBeAList(t *testing.T) {
	f := &fake{locals: stepvars.NewScope()}
	f.locals.Set("list", map[string]any{})
	p := acrossPlan(t, `{task: t, config: {}, across: [{var: x, values: "((.:list))"}]}`)
	ok, err := f.step(p, true).Run(t.Context())
	want := "across var 'x': values must be a list, not a map"
	if ok || err == nil || err.Error() != want || !slices.Equal(f.lines, []string{"errored " + want}) || len(f.runs) != 0 {
		t.Errorf("run: %v, %v; reported %q, ran %v", ok, err, f.lines, f.runs)
	}
}
