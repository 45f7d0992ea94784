// Package eventually waits in tests for a condition that another goroutine
// makes true, instead of sleeping for a guessed time.
package eventually

import (
	"testing"
	"time"
)

// Interval is how often a condition is polled.
const Interval = 10 * time.Millisecond

// Within polls cond until it returns nil, and fails the test with cond's
// last error if that has not happened within timeout. It must be called
// from the test's goroutine (it calls t.Fatalf).
func Within(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	if err := Poll(timeout, cond); err != nil {
		t.Fatalf("not within %s: %v", timeout, err)
	}
}

// Poll polls cond until it returns nil or timeout has passed; it returns
// cond's last error then. For goroutines other than the test's, which must
// not call t.Fatalf.
func Poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil || !time.Now().Before(deadline) {
			return err
		}
		<-tick.C
	}
}
