// Package atc is the ATC runtime server: builds, step pods, the sidecar
// stream, build events and the HTTP API.
package atc

import (
	"context"
	"fmt"
	"os"
)

// ServeCommand runs `atc-porter-runtime serve ARGS...` and returns the exit code.
func ServeCommand(ctx context.Context, args []string) int {
	fmt.Fprintln(os.Stderr, "serve: not implemented yet")
	return 1
}
