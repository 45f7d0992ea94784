// Package cli holds the commands people type into atc-porter-runtime:
// execute, watch, abort, builds and version (serve is the server's, in
// package atc). Everything runs through Run, which takes its streams and
// environment as arguments and returns the exit status, so that tests and
// other programs can drive the commands in-process.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-multierror"
	"golang.org/x/term"

	"github.com/porter-ci/porter/pkg/atcclient"
)

// Program is the binary's name, as usage texts show it.
const Program = "atc-porter-runtime"

// DefaultATCURL is where the client commands look for the ATC when neither
// --atc nor PORTER_ATC_URL says.
const DefaultATCURL = "http://127.0.0.1:8080"

// ATCURLEnv is the environment variable naming the ATC.
const ATCURLEnv = "PORTER_ATC_URL"

// Exit statuses, as fly uses them for builds. A failed build exits with its
// task's exit status instead (ExitFailed when it is unknown).
const (
	ExitSucceeded = 0
	ExitFailed    = 1
	// ExitErrored is also the status of usage errors and of a command that
	// could not do its job (ATC unreachable, invalid task file).
	ExitErrored = 2
	ExitAborted = 3
	// ExitInterrupted: watch was interrupted (128 + SIGINT).
	ExitInterrupted = 130
)

// Env is what the commands see of their process.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
	// IsTerminal says whether w is a terminal (for progress and colors);
	// nil means: an *os.File that golang.org/x/term says is one.
	IsTerminal func(w io.Writer) bool
	// Now is the clock (durations of running builds); nil means time.Now.
	Now func() time.Time
	// Serve runs `serve ARGS...`; nil means this program has no server.
	Serve func(ctx context.Context, args []string) int
	// Version is what `version` prints ("dev" if empty).
	Version string
	// HTTPClient reaches the ATC; nil means http.DefaultClient.
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
	return a.run(ctx, args)
}

// app is one run of the program.
type app struct {
	env    Env
	stdout io.Writer
	stderr io.Writer
	// stderrTTY: progress lines; color: escape codes on stderr.
	stderrTTY bool
	color     bool
	log       *slog.Logger
	now       func() time.Time
	// atcURL is the global --atc, if given before the command.
	atcURL string
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
	if env.Getenv == nil {
		env.Getenv = os.Getenv
	}
	if env.IsTerminal == nil {
		env.IsTerminal = isTerminal
	}
	a := &app{env: env, now: env.Now}
	if a.now == nil {
		a.now = time.Now
	}
	a.stderrTTY = env.IsTerminal(env.Stderr)
	a.color = a.stderrTTY && env.Getenv("NO_COLOR") == ""
	// Streams are written from several goroutines (progress, abort notes,
	// event output); a lock keeps lines whole and test buffers race-free.
	a.stdout = &lockedWriter{w: env.Stdout}
	a.stderr = &lockedWriter{w: env.Stderr}
	level := slog.LevelWarn
	if v := env.Getenv("PORTER_LOG_LEVEL"); v != "" {
		_ = level.UnmarshalText([]byte(v))
	}
	a.log = slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level}))
	return a
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
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

const usageText = `usage: ` + Program + ` [--atc URL] COMMAND [ARGS...]

Runs Concourse-style builds natively on Kubernetes.

commands:
  serve     run the ATC runtime server
  execute   run a task file as a one-off build with local inputs
  watch     stream a build's output and exit with its result
  abort     abort a build
  intercept open a shell in a build's step (while it runs, or is kept)
  builds    list builds
  audit     show a build's audit trail from the blobstore
  version   print the version

The ATC is --atc URL, else $` + ATCURLEnv + `, else ` + DefaultATCURL + `.
Run '` + Program + ` COMMAND -h' for a command's options.
`

func (a *app) run(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet(Program, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&a.atcURL, "atc", "", "")
	if err := fs.Parse(args); err != nil {
		return a.usageError(err, usageText)
	}
	args = fs.Args()
	if len(args) == 0 {
		fmt.Fprint(a.stderr, usageText)
		return ExitErrored
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		if a.env.Serve == nil {
			fmt.Fprintf(a.stderr, "%s: serve is not part of this program\n", Program)
			return ExitErrored
		}
		return a.env.Serve(ctx, rest)
	case "execute":
		return a.execute(ctx, rest)
	case "watch":
		return a.watch(ctx, rest)
	case "abort":
		return a.abort(ctx, rest)
	case "intercept":
		return a.intercept(ctx, rest)
	case "builds":
		return a.builds(ctx, rest)
	case "audit":
		return a.audit(ctx, rest)
	case "version":
		return a.version(rest)
	case "help":
		fmt.Fprint(a.stdout, usageText)
		return ExitSucceeded
	}
	fmt.Fprintf(a.stderr, "%s: unknown command %q\n\n%s", Program, cmd, usageText)
	return ExitErrored
}

// usageError reports a flag parsing error: -h prints the usage on stdout
// and succeeds, anything else prints the error and the usage on stderr.
func (a *app) usageError(err error, usage string) int {
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(a.stdout, usage)
		return ExitSucceeded
	}
	fmt.Fprintf(a.stderr, "%v\n\n%s", err, usage)
	return ExitErrored
}

// parseFlags parses flags wherever they are among the arguments (`watch 42
// --atc URL` as well as `watch --atc URL 42`) and returns the others; after
// "--" everything is an argument.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		// fs.Parse eats a "--" and stops: then all that is left is an argument.
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// addATCFlag declares --atc on a command.
func addATCFlag(fs *flag.FlagSet) *string { return fs.String("atc", "", "") }

// client returns a client for the ATC that --atc (the command's, then the
// global one), PORTER_ATC_URL or the default names.
func (a *app) client(flagURL string) (*atcclient.Client, error) {
	u := flagURL
	for _, v := range []string{a.atcURL, a.env.Getenv(ATCURLEnv), DefaultATCURL} {
		if u == "" {
			u = v
		}
	}
	opts := []atcclient.Option{atcclient.WithLogger(a.log)}
	if a.env.HTTPClient != nil {
		opts = append(opts, atcclient.WithHTTPClient(a.env.HTTPClient))
	}
	return atcclient.New(u, opts...)
}

// printError prints "PREFIX: ERR"; the errors of a multierror go one per
// line.
func (a *app) printError(prefix string, err error) {
	var me *multierror.Error
	if !errors.As(err, &me) || len(me.Errors) == 0 {
		fmt.Fprintf(a.stderr, "%s: %v\n", prefix, err)
		return
	}
	// Keep what the multierror was wrapped with: "invalid task configuration".
	if outer := strings.TrimSuffix(strings.TrimSuffix(err.Error(), me.Error()), ": "); outer != "" && outer != err.Error() {
		prefix += ": " + outer
	}
	if len(me.Errors) == 1 {
		fmt.Fprintf(a.stderr, "%s: %v\n", prefix, me.Errors[0])
		return
	}
	fmt.Fprintf(a.stderr, "%s:\n", prefix)
	for _, e := range me.Errors {
		fmt.Fprintf(a.stderr, "  - %v\n", e)
	}
}

// ANSI styles for stderr when it is a terminal.
const (
	styleBold  = "\x1b[1m"
	styleRed   = "\x1b[31m"
	styleGreen = "\x1b[32m"
	styleYell  = "\x1b[33m"
	styleReset = "\x1b[0m"
)

func (a *app) styled(style, s string) string {
	if !a.color {
		return s
	}
	return style + s + styleReset
}

const versionUsage = `usage: ` + Program + ` version

Prints the version of ` + Program + `.
`

func (a *app) version(args []string) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	rest, err := parseFlags(fs, args)
	if err != nil {
		return a.usageError(err, versionUsage)
	}
	if len(rest) > 0 {
		return a.usageError(fmt.Errorf("version: unexpected argument %q", rest[0]), versionUsage)
	}
	v := a.env.Version
	if v == "" {
		v = "dev"
	}
	fmt.Fprintln(a.stdout, v)
	return ExitSucceeded
}
