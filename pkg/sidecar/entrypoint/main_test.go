package entrypoint

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine the package starts is owned and joined: none outlives
// the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
