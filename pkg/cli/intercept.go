package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"

	"golang.org/x/term"

	"github.com/porter-ci/porter/pkg/atcclient"
)

const interceptUsage = `usage: ` + Program + ` intercept [--step NAME] [--atc URL] BUILD [-- COMMAND [ARGS...]]

Runs a shell (or COMMAND) inside the main container of a step of build
BUILD: in the step's image, working directory and volumes, as its user.
A step can be intercepted while it runs, and after it has finished for as
long as the server keeps its pod (serve --keep-alive).

When stdin is a terminal the session gets one (raw mode, resized with the
window); otherwise stdin is piped to the process and closed at its end, and
the process's stdout and stderr come out apart.

options:
  -s, --step NAME   the step's name or ID (default: the build's only step)
      --atc URL     the ATC (default: $` + ATCURLEnv + `, else ` + DefaultATCURL + `)

Exit status: the process's; 2 when the session could not be opened or broke
off, 130 when interrupted.
`

// stdinChunk is how much of stdin goes into one message.
const stdinChunk = 32 << 10

func (a *app) intercept(ctx context.Context, args []string) int {
	// Everything after "--" is the command, never options of intercept.
	var command []string
	if i := slices.Index(args, "--"); i >= 0 {
		args, command = args[:i], args[i+1:]
		if len(command) == 0 {
			return a.usageError(errors.New("intercept: no COMMAND after --"), interceptUsage)
		}
	}
	fs := flag.NewFlagSet("intercept", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var step string
	for _, name := range []string{"s", "step"} {
		fs.StringVar(&step, name, "", "")
	}
	atc := addATCFlag(fs)
	rest, err := parseFlags(fs, args)
	if err != nil {
		return a.usageError(fmt.Errorf("intercept: %w", err), interceptUsage)
	}
	if len(rest) > 1 {
		return a.usageError(fmt.Errorf("intercept: unexpected argument %q (the command goes after --)", rest[1]), interceptUsage)
	}
	id, err := buildArg("intercept", rest)
	if err != nil {
		return a.usageError(err, interceptUsage)
	}
	c, err := a.client(*atc)
	if err != nil {
		a.printError("intercept", err)
		return ExitErrored
	}
	status, err := a.runIntercept(ctx, c, id, atcclient.InterceptOptions{Step: step, Command: command})
	switch {
	case err != nil && ctx.Err() != nil:
		fmt.Fprintln(a.stderr, "interrupted; the session is closed")
		return ExitInterrupted
	case err != nil:
		a.printError("intercept", err)
		return ExitErrored
	case status < 0 || status > 255:
		fmt.Fprintf(a.stderr, "intercept: the process ended without an exit status (%d)\n", status)
		return ExitErrored
	}
	return status
}

// runIntercept runs the session to its end and returns the process's exit
// status. The terminal, if it was put in raw mode, is restored before it
// returns, so that the caller can print errors normally.
func (a *app) runIntercept(ctx context.Context, c *atcclient.Client, id int64, opts atcclient.InterceptOptions) (int, error) {
	fd, tty := terminalFd(a.env.Stdin)
	opts.TTY = tty
	if tty {
		if cols, rows, err := term.GetSize(fd); err == nil && rows > 0 && cols > 0 {
			opts.Rows, opts.Cols = uint32(rows), uint32(cols)
		}
	}
	sess, err := c.Intercept(ctx, id, opts)
	if err != nil {
		return -1, err
	}
	defer sess.Close()
	// Canceling ctx (Ctrl-C without a terminal) closes the session, which
	// unblocks the read below and kills the process.
	stop := context.AfterFunc(ctx, func() { _ = sess.Close() })
	defer stop()

	if tty {
		old, err := term.MakeRaw(fd)
		if err != nil {
			return -1, fmt.Errorf("put the terminal in raw mode: %w", err)
		}
		defer term.Restore(fd, old)
		stopResizes := forwardResizes(fd, sess, a.log)
		defer stopResizes()
	}
	go a.pumpStdin(sess, a.env.Stdin)
	return sess.ExitStatus(a.stdout, a.stderr)
}

// pumpStdin sends stdin to the session and closes the session's stdin at
// its end. It stops when the session does; a read from a terminal that
// never ends is left behind, which only matters until the program exits.
func (a *app) pumpStdin(sess *atcclient.InterceptSession, stdin io.Reader) {
	buf := make([]byte, stdinChunk)
	for {
		n, err := stdin.Read(buf)
		if n > 0 {
			if serr := sess.Input(buf[:n]); serr != nil {
				return
			}
		}
		if errors.Is(err, io.EOF) {
			if serr := sess.CloseInput(); serr != nil {
				a.log.Debug("intercept: close stdin", "err", serr)
			}
			return
		}
		if err != nil {
			a.log.Warn("intercept: read stdin", "err", err)
			_ = sess.CloseInput()
			return
		}
	}
}

// terminalFd returns stdin's file descriptor if it is a terminal.
func terminalFd(stdin io.Reader) (int, bool) {
	f, ok := stdin.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return 0, false
	}
	return int(f.Fd()), true
}
