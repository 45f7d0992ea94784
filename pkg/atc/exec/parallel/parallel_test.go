package parallel

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRunBoundsRunsAtOnce(t *testing.T) {
	var running, peak atomic.Int32
	release := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		ok, err := Run(t.Context(), 6, 2, false, func(ctx context.Context, i int) (bool, error) {
			n := running.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			<-release
			running.Add(-1)
			return true, nil
		})
		if !ok || err != nil {
			t.Errorf("ok %v err %v", ok, err)
		}
	}()
	for range 6 {
		release <- struct{}{}
	}
	<-done
	if peak.Load() != 2 {
		t.Errorf("at most %d ran at once, want 2", peak.Load())
	}
}

func TestRunFailFastStopsTheOthers(t *testing.T) {
	var started atomic.Int32
	ok, err := Run(t.Context(), 3, 0, true, func(ctx context.Context, i int) (bool, error) {
		started.Add(1)
		if i == 1 {
			return false, nil
		}
		<-ctx.Done() // stopped by the failure of run 1
		return false, context.Cause(ctx)
	})
	if ok || err != nil {
		t.Errorf("ok %v err %v, want a failure without an error", ok, err)
	}
}

func TestRunJoinsErrorsAndGivesTheCauseOfAnEndedContext(t *testing.T) {
	boom := errors.New("boom")
	_, err := Run(t.Context(), 2, 0, false, func(context.Context, int) (bool, error) { return false, boom })
	if !errors.Is(err, boom) {
		t.Errorf("err %v, want boom", err)
	}
	aborted := errors.New("aborted")
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(aborted)
	if _, err := Run(ctx, 2, 0, false, func(context.Context, int) (bool, error) { return true, nil }); !errors.Is(err, aborted) {
		t.Errorf("err %v, want the context's cause", err)
	}
}
