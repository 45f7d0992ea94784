// Command atc-porter-runtime is the ATC side of Porter: `serve` runs the
// server, and the client commands (execute, watch, abort, builds, version)
// talk to it over its HTTP API. Run it with -h for the usage.
//
// It is the server's composition root: serve's flags are all declared here
// (serve.go), which builds atc.Config and the server's dependencies.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/porter-ci/porter/pkg/cli"
	"github.com/porter-ci/porter/pkg/sidecar"
)

func main() {
	os.Exit(run())
}

func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first signal cancels ctx (execute then aborts its build and
	// follows it to the end); restoring the default behaviour afterwards
	// lets a second one kill the process.
	go func() {
		<-ctx.Done()
		stop()
	}()
	return cli.Run(ctx, os.Args[1:], cli.Env{
		Stdin:   os.Stdin,
		Stdout:  os.Stdout,
		Stderr:  os.Stderr,
		Serve:   newServeCommand,
		Version: sidecar.Version,
	})
}
