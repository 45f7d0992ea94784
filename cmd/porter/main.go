// Command porter is the one binary inside a step pod:
//
//	porter install DIR                 copy this binary into DIR (init container)
//	porter sidecar                     coordinate the step (sidecar container)
//	porter entrypoint -- CMD [ARGS...]  wrap the step's process (main container)
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/porter-ci/porter/pkg/sidecar"
	"github.com/porter-ci/porter/pkg/sidecar/entrypoint"
	"github.com/porter-ci/porter/pkg/telemetry"
)

const defaultSocket = sidecar.DefaultSocket

func main() {
	// A Windows step's porter.exe is never started from Explorer: cobra's
	// "run me from a terminal" pause must not hold it up.
	cobra.MousetrapHelpText = ""
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], commands{
		install:    install,
		sidecar:    runSidecar,
		entrypoint: entrypoint.RunEntrypoint,
		stdout:     os.Stdout,
		stderr:     os.Stderr,
	}))
}

const usage = `usage:
  porter install DIR
  porter sidecar
  porter entrypoint [--socket PATH] -- CMD [ARGS...]
  porter version
`

// commands are what porter's subcommands run (tests replace them).
type commands struct {
	install    func(dir string) error
	sidecar    func(ctx context.Context, log *slog.Logger) error
	entrypoint func(ctx context.Context, cfg entrypoint.EntrypointConfig) int
	stdout     io.Writer
	stderr     io.Writer
}

// exitCode ends porter with a status, everything said already.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// run runs porter ARGS... and returns its exit status: 2 for a wrong
// command line, as before porter's commands were cobra's.
func run(ctx context.Context, args []string, c commands) int {
	root := c.rootCommand()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var code exitCode
	switch {
	case err == nil:
		return 0
	case errors.As(err, &code):
		return int(code)
	default:
		fmt.Fprintf(c.stderr, "porter: %v\n%s", err, usage)
		return 2
	}
}

func (c commands) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "porter",
		Short:         "The one binary inside a step pod",
		Args:          cobra.NoArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("no command")
		},
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	root.SetUsageTemplate(usage)
	log := func(cmd *cobra.Command) *slog.Logger {
		return telemetry.LoggerFromEnv(c.stderr).With("porter", cmd.Name())
	}

	install := &cobra.Command{
		Use:   "install DIR",
		Short: "Copy this binary into DIR (the pod's postStart hook)",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if err := c.install(args[0]); err != nil {
				fmt.Fprintf(c.stderr, "porter install: %v\n", err)
				return exitCode(1)
			}
			return nil
		},
	}

	var socket string
	entrypointCmd := &cobra.Command{
		Use:   "entrypoint [--socket PATH] -- CMD [ARGS...]",
		Short: "Wrap the step's process (main container)",
		RunE: func(cmd *cobra.Command, args []string) error {
			// args: everything after "--" (or from the first non-flag),
			// untouched.
			return exitCode(c.entrypoint(cmd.Context(), entrypoint.EntrypointConfig{
				SocketPath: socket, Argv: args, Stdout: os.Stdout, Stderr: os.Stderr, Log: log(cmd)}))
		},
	}
	entrypointCmd.Flags().StringVar(&socket, "socket", envOr("PORTER_SOCKET", defaultSocket), "control socket shared with the sidecar")
	// The step's own flags are its command's, not porter's.
	entrypointCmd.Flags().SetInterspersed(false)

	sidecarCmd := &cobra.Command{
		Use:   "sidecar",
		Short: "Coordinate the step (sidecar container)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l := log(cmd)
			if err := c.sidecar(cmd.Context(), l); err != nil {
				l.Error("sidecar failed", "err", err)
				return exitCode(1)
			}
			return nil
		},
	}

	version := &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprintln(c.stdout, sidecar.Version)
			return nil
		},
	}
	root.AddCommand(install, entrypointCmd, sidecarCmd, version)
	return root
}

// install copies this executable into dir atomically (temp file + rename),
// so a main container never sees half a binary.
func install(dir string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	src, err := os.Open(self)
	if err != nil {
		return fmt.Errorf("open %s: %w", self, err)
	}
	defer src.Close()
	tmp, err := os.CreateTemp(dir, ".porter-*")
	if err != nil {
		return fmt.Errorf("create temp file in %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return fmt.Errorf("copy porter into %s: %w", dir, err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return fmt.Errorf("chmod: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write porter into %s: %w", dir, err)
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, installedName()))
}

// installedName is the installed binary's name: Windows runs only files
// with an executable extension.
func installedName() string {
	if runtime.GOOS == "windows" {
		return "porter.exe"
	}
	return "porter"
}

func runSidecar(ctx context.Context, log *slog.Logger) error {
	log.Info("sidecar starting", "version", sidecar.Version)
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(sidecar.SoftMemoryLimit)
	}
	cfg, err := sidecar.LoadConfig(ctx, os.Getenv, log)
	if err != nil {
		return err
	}
	a := cfg.Action
	tracing := telemetry.Noop()
	if t := a.Telemetry; t != nil && t.OTLPEndpoint != "" {
		// The step's spans join the build's trace, as children of the
		// server's step span.
		if tracing, err = telemetry.TracingTo(ctx, "porter-sidecar", t.OTLPEndpoint); err != nil {
			log.Warn("no traces from this step", "err", err)
			tracing = telemetry.Noop()
		}
		ctx = telemetry.WithTraceParent(ctx, t.TraceParent)
	}
	defer func() {
		// Spans are flushed even after TERM, within the pod's grace period.
		flush, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tracing.Shutdown(flush); err != nil {
			log.Warn("flush spans", "err", err)
		}
	}()
	cfg.Tracer = tracing.Tracer()
	res, err := sidecar.Run(ctx, cfg)
	if err != nil {
		return err
	}
	log.Info("step done", "result", res.Result, "exit_status", res.ExitStatus)
	return nil
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
