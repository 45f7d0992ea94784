package entrypoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/porter-ci/porter/internal/eventually"

	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/sidecar/controlpb"
)

// The Entrypointer against fakes: a scripted sidecar (fakeLink) and a
// process the test ends (fakeProcess). No processes, sockets or gRPC.

// fakeLink is the sidecar's end: the test queues commands; closing cmds is
// the sidecar going away. Close ends a Recv in progress, as closing the
// gRPC stream does.
type fakeLink struct {
	cmds      chan *controlpb.SidecarCommand
	sent      chan *controlpb.EntrypointMessage
	closed    chan struct{}
	closeOnce sync.Once
}

func (l *fakeLink) Recv() (*controlpb.SidecarCommand, error) {
	select {
	case cmd, ok := <-l.cmds:
		if !ok {
			return nil, io.EOF
		}
		return cmd, nil
	case <-l.closed:
		return nil, errors.New("link closed")
	}
}

func (l *fakeLink) Send(m *controlpb.EntrypointMessage) error { l.sent <- m; return nil }
func (l *fakeLink) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

type fakeWaiter struct {
	link Link
	err  error
}

func (w fakeWaiter) Wait(context.Context) (Link, error) { return w.link, w.err }

type fakeRunner struct {
	err     error
	started chan *fakeProcess
}

func (r *fakeRunner) Start(argv []string, st *controlpb.Start, out OutputFunc) (Process, error) {
	if r.err != nil {
		return nil, r.err
	}
	p := &fakeProcess{argv: argv, out: out, done: make(chan struct{}), stops: make(chan stopCall, 8)}
	r.started <- p
	return p, nil
}

type stopCall struct {
	grace time.Duration
	why   StopReason
}

// fakeProcess ends when the test says, or on Stop as a process that obeys
// TERM, marking why it was stopped as the real one does.
type fakeProcess struct {
	argv   []string
	out    OutputFunc
	done   chan struct{}
	once   sync.Once
	exited *controlpb.Exited
	stops  chan stopCall
}

func (p *fakeProcess) Done() <-chan struct{}     { return p.done }
func (p *fakeProcess) Exited() *controlpb.Exited { <-p.done; return p.exited }
func (p *fakeProcess) exit(e *controlpb.Exited) {
	p.once.Do(func() { p.exited = e; close(p.done) })
}

func (p *fakeProcess) Stop(grace time.Duration, why StopReason) {
	p.stops <- stopCall{grace, why}
	p.exit(&controlpb.Exited{ExitStatus: 143, Signal: "terminated", Aborted: why == StopAborted, TimedOut: why == StopTimedOut})
}

// lockedBuffer is written by the Entrypointer's goroutines and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

type harness struct {
	t              *testing.T
	link           *fakeLink
	runner         *fakeRunner
	stdout, stderr *lockedBuffer
	log            *lockedBuffer
	cancel         context.CancelFunc
	result         chan int
}

const waitLimit = 5 * time.Second

func startEntrypointer(t *testing.T, waitErr error, startErr error, queued ...*controlpb.SidecarCommand) *harness {
	h := &harness{t: t,
		link: &fakeLink{cmds: make(chan *controlpb.SidecarCommand, 16), sent: make(chan *controlpb.EntrypointMessage, 256),
			closed: make(chan struct{})},
		runner: &fakeRunner{err: startErr, started: make(chan *fakeProcess, 4)},
		stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, log: &lockedBuffer{},
		result: make(chan int, 1)}
	for _, c := range queued {
		h.link.cmds <- c
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	t.Cleanup(cancel)
	e := NewEntrypointer(EntrypointConfig{Argv: []string{"/bin/step", "arg"}, Stdout: h.stdout, Stderr: h.stderr,
		Log: slog.New(slog.NewTextHandler(h.log, nil))}, fakeWaiter{link: h.link, err: waitErr}, h.runner)
	go func() { h.result <- e.Run(ctx) }()
	return h
}

func (h *harness) send(c *controlpb.SidecarCommand) { h.link.cmds <- c }

func (h *harness) process() *fakeProcess {
	h.t.Helper()
	select {
	case p := <-h.runner.started:
		return p
	case <-time.After(waitLimit):
		h.t.Fatal("the process was not started")
		return nil
	}
}

func (h *harness) stopped(p *fakeProcess) stopCall {
	h.t.Helper()
	select {
	case s := <-p.stops:
		return s
	case <-time.After(waitLimit):
		h.t.Fatal("the process was not stopped")
		return stopCall{}
	}
}

// next returns the next message the entrypoint sent that matches.
func (h *harness) next(match func(*controlpb.EntrypointMessage) bool) *controlpb.EntrypointMessage {
	h.t.Helper()
	deadline := time.After(waitLimit)
	for {
		select {
		case m := <-h.link.sent:
			if match(m) {
				return m
			}
		case <-deadline:
			h.t.Fatal("the entrypoint did not send the expected message")
			return nil
		}
	}
}

func (h *harness) exited() *controlpb.Exited {
	h.t.Helper()
	return h.next(func(m *controlpb.EntrypointMessage) bool { return m.GetExited() != nil }).GetExited()
}

// waitLog waits until the entrypoint has logged s: the point in its loop the
// test needs it to have reached.
func (h *harness) waitLog(s string) {
	h.t.Helper()
	eventually.Within(h.t, waitLimit, func() error {
		if log := h.log.String(); !strings.Contains(log, s) {
			return fmt.Errorf("the entrypoint did not log %q; log:\n%s", s, log)
		}
		return nil
	})
}

func (h *harness) exitCode() int {
	h.t.Helper()
	select {
	case c := <-h.result:
		return c
	case <-time.After(waitLimit):
		h.t.Fatal("the entrypoint did not return")
		return 0
	}
}

func startCmd(st *controlpb.Start) *controlpb.SidecarCommand {
	return &controlpb.SidecarCommand{Msg: &controlpb.SidecarCommand_Start{Start: st}}
}

var (
	abortCmd   = &controlpb.SidecarCommand{Msg: &controlpb.SidecarCommand_Abort{Abort: &controlpb.Abort{}}}
	releaseCmd = &controlpb.SidecarCommand{Msg: &controlpb.SidecarCommand_Release{Release: &controlpb.Release{}}}
)

func failCmd(msg string, status int32) *controlpb.SidecarCommand {
	return &controlpb.SidecarCommand{Msg: &controlpb.SidecarCommand_Fail{Fail: &controlpb.Fail{Message: msg, ExitStatus: status}}}
}

func TestEntrypointer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		waitErr  error
		startErr error
		queued   []*controlpb.SidecarCommand // sent before the entrypoint attached
		script   func(t *testing.T, h *harness)
		want     int
		stderr   string // in the container's stderr
	}{{
		name: "success: output to the container log and the sidecar, exit reported, released",
		script: func(t *testing.T, h *harness) {
			h.send(startCmd(&controlpb.Start{}))
			p := h.process()
			if want := []string{"/bin/step", "arg"}; strings.Join(p.argv, " ") != strings.Join(want, " ") {
				t.Errorf("argv %q, want %q", p.argv, want)
			}
			p.out(eventspb.Stream_STREAM_STDOUT, []byte("hello\n"))
			p.out(eventspb.Stream_STREAM_STDERR, []byte("oops\n"))
			out := h.next(func(m *controlpb.EntrypointMessage) bool { return m.GetOutput() != nil }).GetOutput()
			if out.GetStream() != eventspb.Stream_STREAM_STDOUT || string(out.GetData()) != "hello\n" || out.GetTime() == nil {
				t.Errorf("first output %v, want stdout hello with a time", out)
			}
			p.exit(&controlpb.Exited{ExitStatus: 0})
			if ex := h.exited(); ex.GetExitStatus() != 0 {
				t.Errorf("exited %v", ex)
			}
			h.send(releaseCmd)
			if got := h.stdout.String(); got != "hello\n" {
				t.Errorf("container stdout %q", got)
			}
			if got := h.stderr.String(); got != "oops\n" {
				t.Errorf("container stderr %q", got)
			}
		},
		want: 0,
	}, {
		name: "abort while running stops the process with the step's grace; Exited says aborted",
		script: func(t *testing.T, h *harness) {
			h.send(startCmd(&controlpb.Start{KillGrace: durationpb.New(3 * time.Second)}))
			p := h.process()
			h.send(abortCmd)
			if s := h.stopped(p); s != (stopCall{3 * time.Second, StopAborted}) {
				t.Errorf("stopped with %+v, want 3s aborted", s)
			}
			if ex := h.exited(); !ex.GetAborted() || ex.GetExitStatus() != 143 {
				t.Errorf("exited %v, want aborted 143", ex)
			}
			h.send(releaseCmd)
		},
		want: 143,
	}, {
		name: "abort without a kill grace from the sidecar uses the default",
		script: func(t *testing.T, h *harness) {
			h.send(startCmd(&controlpb.Start{}))
			p := h.process()
			h.send(abortCmd)
			if s := h.stopped(p); s != (stopCall{defaultKillGrace, StopAborted}) {
				t.Errorf("stopped with %+v, want %s aborted", s, defaultKillGrace)
			}
			h.exited()
			h.send(releaseCmd)
		},
		want: 143,
	}, {
		name: "timeout stops the process as timed out",
		script: func(t *testing.T, h *harness) {
			h.send(startCmd(&controlpb.Start{Timeout: durationpb.New(time.Millisecond), KillGrace: durationpb.New(2 * time.Second)}))
			p := h.process()
			if s := h.stopped(p); s != (stopCall{2 * time.Second, StopTimedOut}) {
				t.Errorf("stopped with %+v, want 2s timed out", s)
			}
			if ex := h.exited(); !ex.GetTimedOut() || ex.GetAborted() {
				t.Errorf("exited %v, want timed out", ex)
			}
			h.send(releaseCmd)
			if !strings.Contains(h.stderr.String(), "porter: timeout 1ms exceeded; stopping the process") {
				t.Errorf("stderr %q does not tell the timeout", h.stderr.String())
			}
		},
		want: 143,
	}, {
		name: "fail before start: the sidecar's status is the exit code",
		script: func(t *testing.T, h *harness) {
			h.send(failCmd("input repo: not found", 3))
		},
		want:   3,
		stderr: "porter: step cannot run: input repo: not found",
	}, {
		name: "fail before start with no status exits 1",
		script: func(t *testing.T, h *harness) {
			h.send(failCmd("inputs", 0))
		},
		want: 1,
	}, {
		name:     "start error: Exited with the error, exit 127",
		startErr: fmt.Errorf("start %q: %w", "/bin/step", fs.ErrNotExist),
		script: func(t *testing.T, h *harness) {
			h.send(startCmd(&controlpb.Start{}))
			ex := h.exited()
			if ex.GetExitStatus() != ExitStartFailed || !ex.GetNotFound() || !strings.Contains(ex.GetStartError(), `start "/bin/step"`) {
				t.Errorf("exited %v, want 127, not found, with the start error", ex)
			}
			h.send(releaseCmd)
		},
		want: ExitStartFailed,
	}, {
		name:    "the sidecar cannot be reached: exit 125",
		waitErr: errors.New("wait for the sidecar's control socket: context canceled"),
		script:  func(t *testing.T, h *harness) {},
		want:    ExitSetupFailed,
		stderr:  "porter entrypoint: wait for the sidecar's control socket: context canceled",
	}, {
		name: "lost sidecar before start: exit 125",
		script: func(t *testing.T, h *harness) {
			close(h.link.cmds)
		},
		want:   ExitSetupFailed,
		stderr: "the sidecar went away before the step started: EOF",
	}, {
		name: "lost sidecar after start: the process finishes and its code is returned",
		script: func(t *testing.T, h *harness) {
			h.send(startCmd(&controlpb.Start{}))
			p := h.process()
			close(h.link.cmds)
			h.waitLog("sidecar connection closed")
			p.out(eventspb.Stream_STREAM_STDOUT, []byte("still here\n"))
			p.exit(&controlpb.Exited{ExitStatus: 3})
			if got := h.stdout.String(); got != "still here\n" {
				t.Errorf("container stdout %q", got)
			}
		},
		want: 3,
	}, {
		name:   "late entrypoint: a Start sent before it attached is honoured",
		queued: []*controlpb.SidecarCommand{startCmd(&controlpb.Start{})},
		script: func(t *testing.T, h *harness) {
			p := h.process()
			w := h.next(func(*controlpb.EntrypointMessage) bool { return true }).GetWaiting()
			if strings.Join(w.GetArgv(), " ") != "/bin/step arg" || w.GetPid() == 0 {
				t.Errorf("first message %v, want Waiting with argv and pid", w)
			}
			p.exit(&controlpb.Exited{ExitStatus: 0})
			h.exited()
			h.send(releaseCmd)
		},
		want: 0,
	}, {
		name: "release before the process ended is ignored",
		script: func(t *testing.T, h *harness) {
			h.send(startCmd(&controlpb.Start{}))
			p := h.process()
			h.send(releaseCmd)
			// Commands are taken in order: an abort that still stops the
			// process shows the entrypoint stayed after the release.
			h.send(abortCmd)
			h.stopped(p)
			h.exited()
			h.send(releaseCmd)
		},
		want: 143,
	}, {
		name: "a second Start does not start a second process",
		script: func(t *testing.T, h *harness) {
			h.send(startCmd(&controlpb.Start{}))
			p := h.process()
			h.send(startCmd(&controlpb.Start{}))
			h.send(abortCmd)
			h.stopped(p)
			h.exited()
			h.send(releaseCmd)
			if n := len(h.runner.started); n != 0 {
				t.Errorf("%d more processes started", n)
			}
		},
		want: 143,
	}, {
		name: "SIGTERM (ctx cancelled) stops the process and exits with its code",
		script: func(t *testing.T, h *harness) {
			h.send(startCmd(&controlpb.Start{KillGrace: durationpb.New(4 * time.Second)}))
			p := h.process()
			h.cancel()
			if s := h.stopped(p); s != (stopCall{4 * time.Second, StopAborted}) {
				t.Errorf("stopped with %+v, want 4s aborted", s)
			}
		},
		want: 143,
	}, {
		name: "SIGTERM before start: exit 125",
		script: func(t *testing.T, h *harness) {
			h.cancel()
		},
		want: ExitSetupFailed,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			h := startEntrypointer(t, tc.waitErr, tc.startErr, tc.queued...)
			tc.script(t, h)
			if got := h.exitCode(); got != tc.want {
				t.Errorf("exit code %d, want %d; stderr:\n%s", got, tc.want, h.stderr.String())
			}
			if !strings.Contains(h.stderr.String(), tc.stderr) {
				t.Errorf("stderr %q does not contain %q", h.stderr.String(), tc.stderr)
			}
			// Run returned: the link's sender and receiver have ended.
			goleak.VerifyNone(t)
		})
	}
}
