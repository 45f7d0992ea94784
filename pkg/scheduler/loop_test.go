package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

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

	for i, ref := range []string{"a", "b", "c"} {
		time.Sleep(50 * time.Millisecond) // the loop is idle, waiting
		start := time.Now()
		e.save("src", ref)
		loop.Wake()
		want := fmt.Sprintf("%d:started:src=%s", i+1, ref)
		for !strings.HasSuffix(e.builds("unit"), want) {
			if time.Since(start) > time.Second {
				t.Fatalf("no build %s a second after the version was saved: %s", want, e.builds("unit"))
			}
			time.Sleep(5 * time.Millisecond)
		}
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
		deadline := time.Now().Add(10 * time.Second)
		for e.builds("each") != strings.Join(want, " ") {
			if time.Now().After(deadline) {
				t.Fatalf("builds:\n got %s\nwant %s", e.builds("each"), strings.Join(want, " "))
			}
			time.Sleep(20 * time.Millisecond)
		}
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
		time.Sleep(10 * time.Millisecond)
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
	loop.Wake()
	time.Sleep(300 * time.Millisecond)
	if got := e.builds("unit"); got != "" {
		t.Fatalf("a paused scheduler started %s", got)
	}
	if err := e.d.SetComponentPaused(t.Context(), ComponentScheduler, false); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.HasSuffix(e.builds("unit"), "1:started:src=a") {
		if time.Now().After(deadline) {
			t.Fatalf("no build after unpausing: %s", e.builds("unit"))
		}
		time.Sleep(5 * time.Millisecond)
	}
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
