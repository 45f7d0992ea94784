package blobstore

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine the package starts is owned and joined: none outlives
// the tests. Ginkgo's interrupt handler (the conformance suite's runner)
// watches for signals for the life of the process; it is not ours to end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/onsi/ginkgo/v2/internal/interrupt_handler.(*InterruptHandler).registerForInterrupts.func2"))
}
