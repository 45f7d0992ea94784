package retry

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"
)

func TestBackoffSpreadsRetries(t *testing.T) {
	// Many builds meeting the same outage: their waits must differ.
	seen := map[time.Duration]bool{}
	for range 50 {
		b := Backoff(100*time.Millisecond, 2*time.Second)
		d := b.Step()
		if d < 100*time.Millisecond || d >= 150*time.Millisecond {
			t.Fatalf("first wait %s, want in [100ms, 150ms)", d)
		}
		seen[d] = true
	}
	if len(seen) < 40 {
		t.Fatalf("50 first waits took only %d values: not jittered", len(seen))
	}
	b := Backoff(100*time.Millisecond, 2*time.Second)
	for range 20 {
		if d := b.Step(); d > 3*time.Second {
			t.Fatalf("wait %s beyond the cap plus jitter", d)
		}
	}
}

func TestDoStopsOnSuccessDeadlineAndContext(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	fast := Backoff(time.Millisecond, 2*time.Millisecond)
	boom := errors.New("boom")

	calls := 0
	err := Do(context.Background(), fast, time.Now().Add(time.Minute), log, "write", func() (bool, error) {
		calls++
		return calls == 3, nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("retry until done: err %v after %d calls, want nil after 3", err, calls)
	}

	calls = 0
	err = Do(context.Background(), fast, time.Now().Add(50*time.Millisecond), log, "write", func() (bool, error) {
		calls++
		return false, boom
	})
	if !errors.Is(err, boom) || calls < 2 {
		t.Fatalf("past the deadline: err %v after %d calls, want boom after several", err, calls)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	slow := Backoff(time.Hour, time.Hour)
	start := time.Now()
	err = Do(ctx, slow, time.Now().Add(time.Hour), log, "write", func() (bool, error) { return false, boom })
	if !errors.Is(err, boom) || time.Since(start) > time.Second {
		t.Fatalf("ended context: err %v after %s, want boom at once", err, time.Since(start))
	}
}
