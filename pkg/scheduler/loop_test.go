package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/porter-ci/porter/internal/eventually"
	"github.com/porter-ci/porter/pkg/db"
)

func TestAWokenLoopStartsABuildWithinASecondOfANewVersion(t *testing.T) {
	e := newEnv(t)
	e.setPipeline(`{"resources": [{"name": "src", "type": "mock", "source": {}, "check_every": "never"}],
		"jobs": [{"name": "unit", "plan": [{"get": "src", "trigger": true}]}]}`)
	loop := NewLoop(e.d, e.sched, e.checker, e.sched.Log)
	loop.Tick = time.Hour // only a wake-up can make it look again
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { loop.Run(ctx) })
	defer wg.Wait()
	defer cancel()

	// A Wake during a pass is kept (the wake channel holds one), so the
	// loop need not be idle when the version is saved.
	for i, ref := range []string{"a", "b", "c"} {
		start := time.Now()
		e.save("src", ref)
		loop.Wake()
		want := fmt.Sprintf("%d:started:src=%s", i+1, ref)
		eventually.Within(t, time.Second, func() error {
			if got := e.builds("unit"); !strings.HasSuffix(got, want) {
				return fmt.Errorf("no build %s after the version was saved: %s", want, got)
			}
			return nil
		})
		t.Logf("version %s saved → build started in %s", ref, time.Since(start))
	}
}

func TestTwoServersLoopingTogetherCreateEachBuildOnce(t *testing.T) {
	e := newEnv(t)
	e.setPipeline(`{"resources": [{"name": "src", "type": "mock", "source": {}, "check_every": "never"}],
		"jobs": [{"name": "each", "plan": [{"get": "src", "trigger": true, "version": "every"}]}]}`)
	// A second server: its own connections to the same database.
	d2, err := db.Open(t.Context(), e.dsn, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	loops := []*Loop{
		NewLoop(e.d, e.sched, e.checker, e.sched.Log),
		NewLoop(d2, &Scheduler{DB: d2, Planner: e.planner, Starter: &dbStarter{d: d2}, Log: e.sched.Log},
			&Checker{DB: d2, Planner: e.planner, Runner: e.starter, Log: e.sched.Log}, e.sched.Log),
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for _, l := range loops {
		l.Tick = 5 * time.Millisecond
		wg.Go(func() { l.Run(ctx) })
	}
	defer wg.Wait()
	defer cancel()

	var want []string
	wait := func() {
		t.Helper()
		eventually.Within(t, 10*time.Second, func() error {
			if got := e.builds("each"); got != strings.Join(want, " ") {
				return fmt.Errorf("builds:\n got %s\nwant %s", got, strings.Join(want, " "))
			}
			return nil
		})
	}
	for i := range 10 {
		ref := fmt.Sprintf("v%d", i)
		e.save("src", ref)
		for _, l := range loops {
			l.Wake()
		}
		want = append(want, fmt.Sprintf("%d:started:src=%s", i+1, ref))
		if i == 0 {
			// The first build is of the latest version: from then on,
			// every version gets one, however the loops interleave.
			wait()
		}
	}
	wait()
}

// TestAPausedSchedulerStartsNothingUntilUnpaused: `fly pause-component -n
// scheduler` (a row every server reads) stops the loop's scheduling passes;
// unpausing starts the build that waited.
func TestAPausedSchedulerStartsNothingUntilUnpaused(t *testing.T) {
	e := newEnv(t)
	e.setPipeline(`{"resources": [{"name": "src", "type": "mock", "source": {}, "check_every": "never"}],
		"jobs": [{"name": "unit", "plan": [{"get": "src", "trigger": true}]}]}`)
	if err := e.d.SetComponentPaused(t.Context(), ComponentScheduler, true); err != nil {
		t.Fatal(err)
	}
	loop := NewLoop(e.d, e.sched, e.checker, e.sched.Log)
	loop.Tick = 5 * time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { loop.Run(ctx) })
	defer wg.Wait()
	defer cancel()

	e.save("src", "a")
	saved := time.Now()
	loop.Wake()
	// Two passes recorded after the save (the scanner still runs and
	// says so): the second began after the save, and would have started
	// the build had the scheduler not been paused.
	var passes []time.Time
	eventually.Within(t, 5*time.Second, func() error {
		ran := scannerRan(t, e.d)
		if ran.After(saved) && (len(passes) == 0 || ran.After(passes[len(passes)-1])) {
			passes = append(passes, ran)
		}
		if len(passes) < 2 {
			return fmt.Errorf("%d passes since the version was saved, want 2", len(passes))
		}
		return nil
	})
	if got := e.builds("unit"); got != "" {
		t.Fatalf("a paused scheduler started %s", got)
	}
	if err := e.d.SetComponentPaused(t.Context(), ComponentScheduler, false); err != nil {
		t.Fatal(err)
	}
	eventually.Within(t, 5*time.Second, func() error {
		if got := e.builds("unit"); !strings.HasSuffix(got, "1:started:src=a") {
			return fmt.Errorf("no build after unpausing: %s", got)
		}
		return nil
	})
	cs, err := e.d.Components(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if (c.Name == ComponentScheduler || c.Name == ComponentScanner) && (c.LastRan.IsZero() || c.Interval != 5*time.Millisecond) {
			t.Errorf("component %+v: want a recorded run every 5ms", c)
		}
	}
}

// scannerRan is when the scanner component last recorded a pass.
func scannerRan(t *testing.T, d *db.DB) time.Time {
	t.Helper()
	cs, err := d.Components(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.Name == ComponentScanner {
			return c.LastRan
		}
	}
	return time.Time{}
}
