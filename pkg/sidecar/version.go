package sidecar

import (
	"time"

	"google.golang.org/grpc/backoff"
)

// Version is stamped at link time (-X github.com/porter-ci/porter/pkg/sidecar.Version=...).
var Version = "dev"

// fastBackoff reconnects quickly: a step pod's ATC is usually back within seconds.
func fastBackoff() backoff.Config {
	return backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second}
}
