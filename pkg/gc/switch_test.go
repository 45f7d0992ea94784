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
	// asked counts the times the collector asked whether it is paused.
	asked atomic.Int32
	mu    sync.Mutex
	ran   []time.Duration
}

func (f *fakeSwitch) ComponentPaused(_ context.Context, name string) (bool, error) {
	f.asked.Add(1)
	return name == Component && f.paused.Load(), nil
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

	// Not a sleep: three ticks have come and asked, and none made a pass.
	eventually.Within(t, 5*time.Second, func() error {
		if n := sw.asked.Load(); n < 3 {
			return fmt.Errorf("the collector asked %d times whether it is paused", n)
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
