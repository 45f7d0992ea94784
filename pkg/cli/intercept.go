package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/porter-ci/porter/pkg/atcclient"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/hijack"
)

type interceptFlags struct {
	build    string
	step     string
	stepType string
	attempt  string
	handle   string
	team     string
}

func (a *app) interceptCommand() *cobra.Command {
	var f interceptFlags
	cmd := &cobra.Command{
		Use:     "intercept [-b BUILD] [-s STEP] [-- COMMAND [ARGS...]]",
		Aliases: []string{"hijack"},
		Short:   "Run a shell (or COMMAND) in a build step's container",
		Long: `Runs a shell (bash, else sh) or COMMAND inside the main container of a
build's step: in the step's image, working directory and volumes, as its
user. A step can be intercepted while it runs, and after it finished for
as long as the server keeps its pod. Without -b, the newest one-off build.

When stdin is a terminal the session gets one (raw mode, resized with the
window); otherwise stdin is piped to the process and closed at its end, and
the process's stdout and stderr come out apart.

Exit status: the process's; 255 when the server reported an error; 1 when
no session could be opened.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.intercept(cmd.Context(), &f, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.build, "build", "b", "", "the build's ID")
	fl.StringVarP(&f.step, "step", "s", "", "the step's name (e.g. one-off)")
	fl.StringVar(&f.stepType, "step-type", "", "the step's type (get, put, task)")
	fl.StringVarP(&f.attempt, "attempt", "a", "", "the step's attempt number (N[,N,...])")
	fl.StringVar(&f.handle, "handle", "", "the container's handle, instead of searching")
	fl.StringVar(&f.team, "team", "", "the team of the container, if not the target's")
	return cmd
}

func (a *app) intercept(ctx context.Context, f *interceptFlags, command []string) error {
	c, err := a.client(f.team)
	if err != nil {
		return err
	}
	container, err := a.chooseContainer(ctx, c, f)
	if err != nil {
		return err
	}

	spec := concourse.HijackProcessSpec{
		Env:  []string{"TERM=" + a.getenv("TERM")},
		User: container.User,
		Dir:  container.WorkingDirectory,
		// fly asks for a privileged process; the server decides.
		Privileged: true,
	}
	defaultShell := len(command) == 0
	if defaultShell {
		spec.Path = "bash"
	} else {
		spec.Path, spec.Args = command[0], command[1:]
	}

	fd, tty := terminalFd(a.env.Stdin)
	var resize <-chan concourse.HijackWindowSize
	if tty {
		if cols, rows, err := term.GetSize(fd); err == nil && rows > 0 && cols > 0 {
			spec.TTY = &concourse.HijackTTYSpec{WindowSize: concourse.HijackWindowSize{Columns: uint16(cols), Rows: uint16(rows)}}
		}
		old, err := term.MakeRaw(fd)
		if err != nil {
			return fmt.Errorf("put the terminal in raw mode: %w", err)
		}
		// Restored before anything is printed below.
		defer term.Restore(fd, old)
		var stopResizes func()
		resize, stopResizes = forwardResizes(fd)
		defer stopResizes()
	}

	stdin := newStdinPump(a.env.Stdin)
	defer stdin.stop()
	run := func() (int, error) {
		done := make(chan struct{})
		defer close(done)
		return hijack.Run(ctx, hijack.ClientOptions{
			URL:       c.HijackURL("", container.ID),
			Header:    c.AuthHeader(),
			Spec:      spec,
			Stdin:     stdin.reader(done),
			Stdout:    a.stdout,
			Stderr:    a.stderr,
			Resize:    resize,
			TLSConfig: c.TLSConfig(),
		})
	}
	status, err := run()
	if errors.Is(err, hijack.ErrExecutableNotFound) && defaultShell {
		// No process read what the first session sent: send it again.
		stdin.replay()
		spec.Path = "sh"
		fmt.Fprint(a.stderr, "\rCouldn't find \"bash\" on container, retrying with \"sh\"\n\r")
		status, err = run()
	}

	var sessErr *hijack.SessionError
	var statusErr *hijack.StatusError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		fmt.Fprintln(a.stderr, "\ninterrupted; the session is closed")
		return exitStatus(ExitInterrupted)
	case errors.As(err, &sessErr):
		fmt.Fprintln(a.stderr, a.styled(styleRed, sessErr.Message))
		return exitStatus(255)
	case errors.As(err, &statusErr):
		return atcclient.ErrorFromBody("intercept container "+container.ID, statusErr.StatusCode, []byte(statusErr.Body))
	default:
		return fmt.Errorf("intercept container %s: %w", container.ID, err)
	}
	if status != 0 {
		return exitStatus(status)
	}
	return nil
}

// noContainers is fly's message when nothing matches.
const noContainers = "no containers matched your search parameters!\n\nthey may have expired if your build hasn't recently finished."

// chooseContainer finds the one container the flags mean, as fly does:
// created (or failed) containers of the build (the newest one-off build
// when -b is not given), narrowed by step, type and attempt.
func (a *app) chooseContainer(ctx context.Context, c *atcclient.Client, f *interceptFlags) (concourse.Container, error) {
	if f.handle != "" {
		return concourse.Container{ID: f.handle}, nil
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	filter := atcclient.ContainerFilter{StepName: f.step, Type: f.stepType, Attempt: f.attempt}
	var err error
	if f.build != "" {
		filter.BuildID, err = parseBuildID(f.build)
	} else {
		filter.BuildID, err = latestOneOff(ctx, c)
	}
	if err != nil {
		return concourse.Container{}, err
	}
	all, err := c.Containers(ctx, "", filter)
	if err != nil {
		return concourse.Container{}, err
	}
	var found []concourse.Container
	for _, ct := range all {
		switch ct.State {
		case concourse.ContainerCreated, concourse.ContainerFailed, "":
			found = append(found, ct)
		}
	}
	switch len(found) {
	case 0:
		return concourse.Container{}, errors.New(noContainers)
	case 1:
		return found[0], nil
	}
	// fly asks which; a script cannot answer, so say how to choose.
	var b strings.Builder
	b.WriteString("several containers match; choose one with -s STEP, --step-type TYPE, -a ATTEMPT or --handle:")
	for _, ct := range found {
		fmt.Fprintf(&b, "\n  handle: %s, step: %s, type: %s", ct.ID, ct.StepName, ct.Type)
		if ct.Attempt != "" {
			fmt.Fprintf(&b, ", attempt: %s", ct.Attempt)
		}
	}
	return concourse.Container{}, errors.New(b.String())
}

// terminalFd returns stdin's file descriptor if it is a terminal.
func terminalFd(stdin io.Reader) (int, bool) {
	f, ok := stdin.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return 0, false
	}
	return int(f.Fd()), true
}

// stdinPump reads stdin in one goroutine for every session of a command,
// so that a session that ended (bash was not found) cannot keep a read in
// flight that would swallow the next session's input, and so that what
// such a session read can be sent again.
type stdinPump struct {
	r    io.Reader
	once sync.Once
	data chan []byte
	quit chan struct{}

	mu     sync.Mutex
	spare  []byte // read from stdin, not yet by a session
	sent   []byte // read by the current session, for replay
	closed bool   // stdin ended with err
	err    error
}

func newStdinPump(r io.Reader) *stdinPump {
	return &stdinPump{r: r, data: make(chan []byte), quit: make(chan struct{})}
}

// stop lets the pump's goroutine go once its read in flight returns.
func (p *stdinPump) stop() { close(p.quit) }

func (p *stdinPump) start() {
	go func() {
		for {
			buf := make([]byte, 32<<10)
			n, err := p.r.Read(buf)
			if n > 0 {
				select {
				case p.data <- buf[:n]:
				case <-p.quit:
					return
				}
			}
			if err != nil {
				p.mu.Lock()
				p.closed, p.err = true, err
				p.mu.Unlock()
				close(p.data)
				return
			}
		}
	}()
}

// reader is one session's view of stdin, which ends when done is closed.
func (p *stdinPump) reader(done <-chan struct{}) io.Reader {
	p.once.Do(p.start)
	return readerFunc(func(b []byte) (int, error) {
		for {
			p.mu.Lock()
			select {
			case <-done:
				p.mu.Unlock()
				return 0, io.EOF
			default:
			}
			if len(p.spare) > 0 {
				n := copy(b, p.spare)
				p.sent = append(p.sent, p.spare[:n]...)
				p.spare = p.spare[n:]
				p.mu.Unlock()
				return n, nil
			}
			if p.closed {
				p.mu.Unlock()
				return 0, p.err
			}
			p.mu.Unlock()
			select {
			case chunk, ok := <-p.data:
				if ok {
					// Kept in spare: a session that ended meanwhile
					// leaves it to the next one.
					p.mu.Lock()
					p.spare = append(p.spare, chunk...)
					p.mu.Unlock()
				}
			case <-done:
				return 0, io.EOF
			}
		}
	})
}

// replay makes the next session read again what the last one read. Call
// it only once the last session has ended.
func (p *stdinPump) replay() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.spare = append(p.sent, p.spare...)
	p.sent = nil
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(b []byte) (int, error) { return f(b) }
