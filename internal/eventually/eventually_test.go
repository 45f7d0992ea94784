package eventually

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestPollReturnsOnceTrue(t *testing.T) {
	var n atomic.Int32
	err := Poll(time.Second, func() error {
		if n.Add(1) < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || n.Load() != 3 {
		t.Fatalf("Poll = %v after %d calls, want nil after 3", err, n.Load())
	}
}

func TestPollGivesTheLastErrorAtTheDeadline(t *testing.T) {
	start := time.Now()
	err := Poll(50*time.Millisecond, func() error { return errors.New("never") })
	if err == nil || err.Error() != "never" {
		t.Fatalf("Poll = %v, want the condition's error", err)
	}
	if d := time.Since(start); d < 50*time.Millisecond || d > time.Second {
		t.Fatalf("Poll returned after %s, want about 50ms", d)
	}
}
