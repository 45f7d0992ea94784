package sidecar

import (
	"testing"

	"go.uber.org/goleak"
)

// The sidecar's and the entrypoint's goroutines end before Run returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
