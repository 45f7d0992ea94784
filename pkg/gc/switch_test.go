package gc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/porter-ci/porter/internal/eventually"
)

// fakeSwitch is the components' table: paused or not, and the runs heard.
type fakeSwitch struct {
	paused atomic.Bool
	// skipped counts the times a loop found the collector paused.
	skipped atomic.Int32
	mu      sync.Mutex
	ran     []time.Duration
}

func (f *fakeSwitch) ComponentPaused(_ context.Context, name string) (bool, error) {
	p := name == Component && f.paused.Load()
	if p {
		f.skipped.Add(1)
	}
	return p, nil
}

func (f *fakeSwitch) ComponentRan(_ context.Context, name string, interval time.Duration, _ time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if name == Component {
		f.ran = append(f.ran, interval)
	}
	return nil
}

// TestPausedCollectorSkipsItsPasses: `fly pause-component -n collector`
// stops Run's passes until it is unpaused; each pass is recorded.
func TestPausedCollectorSkipsItsPasses(t *testing.T) {
	sw := &fakeSwitch{}
	sw.paused.Store(true)
	c := New(Config{}, &fakeStore{}, &fakeBlobs{}, nil, slog.New(slog.DiscardHandler))
	c.Switch = sw
	var passes atomic.Int32
	c.OnPass = func(Result, error) { passes.Add(1) }
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx, 10*time.Millisecond) }()
	defer func() { cancel(); <-done }()

	// Both loops (store and pods) at two ticks each found it paused:
	// each of those ticks would have been a pass.
	eventually.Within(t, 5*time.Second, func() error {
		if n := sw.skipped.Load(); n < 4 {
			return fmt.Errorf("the loops looked at the switch %d times, want 4", n)
		}
		return nil
	})
	if n := passes.Load(); n != 0 {
		t.Fatalf("%d passes while paused", n)
	}
	sw.paused.Store(false)
	eventually.Within(t, 5*time.Second, func() error {
		if passes.Load() == 0 {
			return errors.New("no pass after unpausing")
		}
		return nil
	})
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if len(sw.ran) == 0 || sw.ran[0] != 10*time.Millisecond {
		t.Errorf("runs recorded %v, want the interval", sw.ran)
	}
}
