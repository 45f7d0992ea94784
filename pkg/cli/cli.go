// Package cli holds the commands people type into atc-porter-runtime. serve
// is defined by the program (Env.Serve); the client commands (login, execute,
// watch, abort, builds, intercept, audit) speak Concourse's HTTP API as fly
// does, with fly's flags and fly's ~/.flyrc targets, so that machines
// without fly can use a Porter (or Concourse) server the same way.
// Everything runs through Run, which takes its streams and environment as
// arguments and returns the exit status, so that tests and other programs
// can drive the commands in-process.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/porter-ci/porter/pkg/atcclient"
)

// Program is the binary's name, as usage texts show it.
const Program = "atc-porter-runtime"

// Exit statuses, as fly's. A build's end maps to 0 (succeeded), 1
// (failed, or its task's exit status), 2 (errored) and 3 (aborted); a
// command that could not do its job exits 1, as fly does.
const (
	ExitSucceeded = 0
	ExitFailed    = 1
	ExitErrored   = 2
	ExitAborted   = 3
	// ExitError is a command's failure (bad flags, server unreachable,
	// not logged in).
	ExitError = 1
	// ExitInterrupted: intercept was interrupted (128 + SIGINT).
	ExitInterrupted = 130
)

// Env is what the commands see of their process.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// LookupEnv reads the environment (HOME, FLY_HOME, task params, TERM);
	// nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// IsTerminal says whether a stream is a terminal (colors, progress,
	// table headers, intercept's TTY); nil means: an *os.File that
	// golang.org/x/term says is one.
	IsTerminal func(f any) bool
	// WorkDir is the directory fly's "input named after the current
	// directory" rule looks at; empty means the process's.
	WorkDir string
	// Serve makes the serve command, which the program's composition root
	// (cmd/atc-porter-runtime) defines with its flags; nil means this
	// program has no server. It ends with Exit for a status other than 1.
	Serve func() *cobra.Command
	// Version is what `version` prints ("dev" if empty).
	Version string
	// HTTPClient reaches the server; nil means one built from the
	// target's TLS settings.
	HTTPClient *http.Client
}

// Main runs the command in args (without the program's name) with the
// process's environment and no server, and returns the exit status.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return Run(ctx, args, Env{Stdin: stdin, Stdout: stdout, Stderr: stderr})
}

// Run runs the command in args (without the program's name) and returns
// the exit status. Canceling ctx is Ctrl-C: execute aborts its build and
// follows it to the end, the other commands stop.
func Run(ctx context.Context, args []string, env Env) int {
	a := newApp(env)
	root := a.rootCommand()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return a.exitCode(err)
}

// app is one run of the program.
type app struct {
	env    Env
	stdout io.Writer
	stderr io.Writer
	log    *slog.Logger
	// stdoutTTY: escape codes in rendered builds, table headers.
	stdoutTTY bool
	stderrTTY bool

	// Global flags.
	targetName        string
	printTableHeaders bool
}

func newApp(env Env) *app {
	if env.Stdin == nil {
		env.Stdin = strings.NewReader("")
	}
	if env.Stdout == nil {
		env.Stdout = io.Discard
	}
	if env.Stderr == nil {
		env.Stderr = io.Discard
	}
	if env.LookupEnv == nil {
		env.LookupEnv = os.LookupEnv
	}
	if env.IsTerminal == nil {
		env.IsTerminal = isTerminal
	}
	a := &app{env: env}
	_, noColor := env.LookupEnv("NO_COLOR")
	a.stdoutTTY = env.IsTerminal(env.Stdout) && !noColor
	a.stderrTTY = env.IsTerminal(env.Stderr)
	// Streams are written from several goroutines (progress, abort notes,
	// event output); a lock keeps lines whole and test buffers race-free.
	a.stdout = &lockedWriter{w: env.Stdout}
	a.stderr = &lockedWriter{w: env.Stderr}
	level := slog.LevelWarn
	if v := a.getenv("PORTER_LOG_LEVEL"); v != "" {
		_ = level.UnmarshalText([]byte(v))
	}
	a.log = slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level}))
	return a
}

func (a *app) getenv(k string) string {
	v, _ := a.env.LookupEnv(k)
	return v
}

func isTerminal(f any) bool {
	fd, ok := f.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(fd.Fd()))
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// exitStatus is an error that only carries the exit status of a command
// that has already said what there was to say (a build's result).
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// Exit is the error of a command that has said what there was to say and
// ends the program with status code (e.g. 2 for bad flags of serve).
func Exit(code int) error { return exitStatus(code) }

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   Program,
		Short: "Run Concourse builds natively on Kubernetes",
		Long: `Runs Concourse-style builds natively on Kubernetes.

serve runs the server. The other commands are a client of a Porter (or
Concourse) server with fly's flags: log in once with
  ` + Program + ` -t NAME login -c URL -u USER -p PASSWORD
and name the target with -t NAME afterwards. Targets live in fly's own
~/.flyrc, so fly and ` + Program + ` share them.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		// No completion command: the program has no use for one.
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetIn(a.env.Stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.PersistentFlags().StringVarP(&a.targetName, "target", "t", "", "the target (from ~/.flyrc) to talk to")
	root.PersistentFlags().BoolVar(&a.printTableHeaders, "print-table-headers", false, "print table headers even when stdout is not a terminal")
	root.AddCommand(
		a.serveCommand(),
		a.loginCommand(),
		a.executeCommand(),
		a.watchCommand(),
		a.abortCommand(),
		a.resumeCommand(),
		a.buildsCommand(),
		a.interceptCommand(),
		a.auditCommand(),
		a.versionCommand(),
	)
	return root
}

func (a *app) serveCommand() *cobra.Command {
	if a.env.Serve != nil {
		return a.env.Serve()
	}
	return &cobra.Command{
		Use:                "serve",
		Short:              "Run the server (not part of this program)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("serve is not part of this program")
		},
	}
}

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			v := a.env.Version
			if v == "" {
				v = "dev"
			}
			fmt.Fprintln(a.stdout, v)
			return nil
		},
	}
}

// exitCode prints what err says, as fly would, and returns the status.
func (a *app) exitCode(err error) int {
	var es exitStatus
	var netErr net.Error
	var unknown unknownTargetError
	switch {
	case err == nil:
		return ExitSucceeded
	case errors.As(err, &es):
		return int(es)
	case atcclient.IsUnauthorized(err):
		fmt.Fprintf(a.stderr, "%v\n\nnot authorized. run the following to log in:\n\n    %s\n\n", err, a.loginHint())
	case errors.Is(err, errNoTarget):
		fmt.Fprintf(a.stderr, "no target specified. specify the target with -t or log in like so:\n\n    %s -t (alias) login -c (concourse url)\n\n", Program)
	case errors.As(err, &unknown):
		fmt.Fprintf(a.stderr, "%v\n\nlog in to it first:\n\n    %s -t %s login -c (concourse url)\n\n", err, Program, unknown.name)
	case errors.As(err, &netErr):
		fmt.Fprintf(a.stderr, "could not reach the server of target %s:\n\n    %v\n\nis it running?\n", a.targetName, err)
	default:
		fmt.Fprintf(a.stderr, "error: %v\n", err)
	}
	return ExitError
}

func (a *app) loginHint() string {
	name := a.targetName
	if name == "" {
		name = "(alias)"
	}
	return fmt.Sprintf("%s -t %s login", Program, name)
}

// client returns a client for the target -t names, for team (the target's
// team when empty).
func (a *app) client(team string) (*atcclient.Client, error) {
	t, err := a.selectTarget()
	if err != nil {
		return nil, err
	}
	return a.clientFor(t, team)
}

func (a *app) clientFor(t target, team string) (*atcclient.Client, error) {
	tlsCfg, err := t.tlsConfig()
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", a.targetName, err)
	}
	if team == "" {
		team = t.Team
	}
	opts := atcclient.Options{URL: t.API, Team: team, TLSConfig: tlsCfg, HTTPClient: a.env.HTTPClient, Logger: a.log}
	if t.Token != nil {
		opts.Token = t.Token.Value
	}
	return atcclient.New(opts)
}

// ANSI styles, used only when stdout is a terminal.
const (
	styleBold  = "\x1b[1m"
	styleRed   = "\x1b[31m"
	styleGreen = "\x1b[32m"
	styleYell  = "\x1b[33m"
	styleReset = "\x1b[0m"
)

func (a *app) styled(style, s string) string {
	if !a.stdoutTTY {
		return s
	}
	return style + s + styleReset
}

// withTimeout bounds a short API call that must not hang forever.
func withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, time.Minute)
}
