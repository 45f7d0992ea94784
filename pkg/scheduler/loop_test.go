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
