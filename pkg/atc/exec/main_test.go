package exec

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a step starts (in_parallel's, across's, hooks' detached
// contexts) ends before its step returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
