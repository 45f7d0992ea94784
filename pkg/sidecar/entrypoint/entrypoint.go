// Package entrypoint is `porter entrypoint -- CMD ARGS...`: the wrapper
// around the step's process in the main container (a process of its own,
// apart from the sidecar). The Entrypointer waits for the sidecar's control
// socket (Waiter), attaches, runs the process when the sidecar says start
// (Runner), reports its output and exit, stops it on abort or timeout, runs
// intercept sessions beside it and exits once the sidecar releases it.
// The coordinator it obeys is package sidecar; the protocol between them
// is package controlpb. This package does not import the coordinator.
package entrypoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/sidecar/controlpb"
)

// EntrypointConfig is what `porter entrypoint -- CMD ARGS...` needs.
type EntrypointConfig struct {
	SocketPath string
	Argv       []string
	// Stdout and Stderr receive the process's output too, so the
	// container's own log (kubectl logs) shows it.
	Stdout, Stderr io.Writer
	Log            *slog.Logger
}

// Exit codes of the wrapper itself when the process never ran.
const (
	ExitSetupFailed = 125 // the sidecar could not be reached or said no
	ExitStartFailed = 127 // the process could not be started
)

// defaultKillGrace applies when the sidecar's Start does not say.
const defaultKillGrace = 10 * time.Second

// Link is the entrypoint's attached connection to the sidecar.
type Link interface {
	Send(*controlpb.EntrypointMessage) error
	Recv() (*controlpb.SidecarCommand, error)
	// Close ends the connection.
	Close() error
}

// Waiter waits for the sidecar and attaches to it.
type Waiter interface {
	Wait(ctx context.Context) (Link, error)
}

// OutputFunc receives each chunk the process writes, as soon as it is read.
type OutputFunc func(stream eventspb.Stream, data []byte)

// Runner starts the step's process as the sidecar's Start describes.
type Runner interface {
	Start(argv []string, st *controlpb.Start, out OutputFunc) (Process, error)
}

// Process is the running step process.
type Process interface {
	// Done is closed once the process has ended and its output is read.
	Done() <-chan struct{}
	// Exited is how it ended; valid once Done is closed.
	Exited() *controlpb.Exited
	// Stop signals the process to end and kills it after grace. Exited
	// records why, unless the process had already ended.
	Stop(grace time.Duration, why StopReason)
}

// StopReason is why the entrypoint stops the process.
type StopReason int

const (
	StopAborted  StopReason = iota + 1 // the ATC aborted the step, or the pod is going
	StopTimedOut                       // the step's timeout passed
)

func (r StopReason) String() string {
	switch r {
	case StopAborted:
		return "aborted"
	case StopTimedOut:
		return "timed out"
	}
	return fmt.Sprintf("StopReason(%d)", int(r))
}

// RunEntrypoint waits for the sidecar's go-ahead, runs the process, reports
// its output and exit, stays for intercept sessions until released and
// returns the exit code the container should exit with.
func RunEntrypoint(ctx context.Context, cfg EntrypointConfig) int {
	e := NewEntrypointer(cfg, socketWaiter{path: cfg.SocketPath},
		execRunner{stderr: cfg.Stderr, memory: cgroupFS{root: cgroupRoot}, log: cfg.Log})
	return e.Run(ctx)
}

// Entrypointer is the in-container side of a step: what it does with the
// sidecar's commands, with the process, the socket and the clock's effects
// behind Waiter and Runner so the logic is testable without processes.
type Entrypointer struct {
	cfg    EntrypointConfig
	waiter Waiter
	runner Runner
	send   chan *controlpb.EntrypointMessage
	// senderGone is closed when the sender has ended: a post after that
	// is dropped instead of blocking (the output still reached the
	// container's log).
	senderGone chan struct{}
	// sessionsWG counts the intercept sessions' goroutines.
	sessionsWG sync.WaitGroup

	mu       sync.Mutex
	sessions map[string]*session
	start    *controlpb.Start
}

// NewEntrypointer returns an Entrypointer for cfg.Argv; cfg.SocketPath is
// the waiter's business.
func NewEntrypointer(cfg EntrypointConfig, w Waiter, r Runner) *Entrypointer {
	if cfg.Stdout == nil {
		cfg.Stdout = io.Discard
	}
	if cfg.Stderr == nil {
		cfg.Stderr = io.Discard
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(cfg.Stderr, nil))
	}
	return &Entrypointer{cfg: cfg, waiter: w, runner: r,
		send: make(chan *controlpb.EntrypointMessage, 64), senderGone: make(chan struct{}), sessions: map[string]*session{}}
}

// epState is where the entrypoint is in a step's life.
type epState int

const (
	waitingForStart epState = iota // attached; the process has not been started
	running                        // the process is running
	exited                         // the process ended or could not start; waiting for Release
)

// Run attaches to the sidecar, follows its commands until released (or
// until the sidecar is gone) and returns the container's exit code.
func (e *Entrypointer) Run(ctx context.Context) int {
	if len(e.cfg.Argv) == 0 {
		fmt.Fprintln(e.cfg.Stderr, "porter entrypoint: no command given (usage: porter entrypoint -- CMD [ARGS...])")
		return ExitSetupFailed
	}
	link, err := e.waiter.Wait(ctx)
	if err != nil {
		fmt.Fprintf(e.cfg.Stderr, "porter entrypoint: %v\n", err)
		return ExitSetupFailed
	}
	// Run owns the link's sender and receiver and returns only once both
	// have ended.
	stopSend := make(chan struct{})
	go e.sender(link, stopSend)
	cmds := make(chan *controlpb.SidecarCommand)
	recvErr := make(chan error, 1)
	stopRecv := make(chan struct{})
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		e.receive(link, cmds, recvErr, stopRecv)
	}()
	defer func() {
		close(stopRecv)
		close(stopSend)
		// What was posted is sent, unless the sidecar does not take it
		// within drainLimit; closing the link then ends a blocked Send
		// and the Recv in progress.
		select {
		case <-e.senderGone:
		case <-time.After(drainLimit):
		}
		link.Close()
		<-e.senderGone
		<-recvDone
	}()
	e.post(&controlpb.EntrypointMessage{Msg: &controlpb.EntrypointMessage_Waiting{Waiting: &controlpb.Waiting{Argv: e.cfg.Argv, Pid: int32(os.Getpid())}}})
	code := e.loop(ctx, cmds, recvErr)
	e.waitSessions()
	return code
}

// drainLimit bounds how long Run waits for its last messages to leave, and
// for closed intercept sessions to end.
const drainLimit = 5 * time.Second

// receive hands the sidecar's commands to the loop until the link breaks or
// stop is closed.
func (e *Entrypointer) receive(link Link, cmds chan<- *controlpb.SidecarCommand, recvErr chan<- error, stop <-chan struct{}) {
	for {
		cmd, err := link.Recv()
		if err != nil {
			recvErr <- err
			return
		}
		select {
		case cmds <- cmd:
		case <-stop:
			return
		}
	}
}

// sender is the link's only writer, until stop is closed; it then sends
// what is already posted and ends. Once the link breaks it keeps draining
// so the process's output is never blocked on a gone sidecar.
func (e *Entrypointer) sender(link Link, stop <-chan struct{}) {
	defer close(e.senderGone)
	broken := false
	send := func(msg *controlpb.EntrypointMessage) {
		if broken {
			return
		}
		if err := link.Send(msg); err != nil {
			e.cfg.Log.Warn("lost the sidecar; output now goes only to the container log", "err", err)
			broken = true
		}
	}
	for {
		select {
		case msg := <-e.send:
			send(msg)
		case <-stop:
			for {
				select {
				case msg := <-e.send:
					send(msg)
				default:
					return
				}
			}
		}
	}
}

func (e *Entrypointer) post(msg *controlpb.EntrypointMessage) {
	select {
	case e.send <- msg:
	case <-e.senderGone:
	}
}

// waitSessions waits, for at most drainLimit, for the goroutines of the
// intercept sessions closeSessions ended: a session's descendant that left
// its process group could hold its output open for ever.
func (e *Entrypointer) waitSessions() {
	done := make(chan struct{})
	go func() { defer close(done); e.sessionsWG.Wait() }()
	select {
	case <-done:
	case <-time.After(drainLimit):
		e.cfg.Log.Warn("intercept sessions still running after they were closed")
	}
}

// output sends a chunk of the process's output to the container's own
// stream and to the sidecar.
func (e *Entrypointer) output(stream eventspb.Stream, data []byte) {
	local := e.cfg.Stdout
	if stream == eventspb.Stream_STREAM_STDERR {
		local = e.cfg.Stderr
	}
	now := timestamppb.Now()
	_, _ = local.Write(data)
	e.post(&controlpb.EntrypointMessage{Msg: &controlpb.EntrypointMessage_Output{Output: &controlpb.Output{Stream: stream, Data: data, Time: now}}})
}

func (e *Entrypointer) loop(ctx context.Context, cmds <-chan *controlpb.SidecarCommand, recvErr <-chan error) int {
	state := waitingForStart
	var proc Process
	var timer *time.Timer
	var timeout <-chan time.Time // armed while running with a step timeout
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	exitCode := 0 // valid once exited
	sigTerm := ctx.Done()
	for {
		var procDone <-chan struct{}
		if state == running {
			procDone = proc.Done()
		}
		select {
		case cmd := <-cmds:
			switch m := cmd.Msg.(type) {
			case *controlpb.SidecarCommand_Start:
				if state != waitingForStart {
					continue
				}
				e.mu.Lock()
				e.start = m.Start
				e.mu.Unlock()
				p, err := e.runner.Start(e.cfg.Argv, m.Start, e.output)
				if err != nil {
					fmt.Fprintf(e.cfg.Stderr, "porter entrypoint: %v\n", err)
					e.post(&controlpb.EntrypointMessage{Msg: &controlpb.EntrypointMessage_Exited{Exited: &controlpb.Exited{
						ExitStatus: ExitStartFailed, StartError: err.Error(), NotFound: errors.Is(err, fs.ErrNotExist)}}})
					state, exitCode = exited, ExitStartFailed
					continue
				}
				state, proc = running, p
				if t := m.Start.GetTimeout(); t != nil && t.AsDuration() > 0 {
					timer = time.NewTimer(t.AsDuration())
					timeout = timer.C
				}
			case *controlpb.SidecarCommand_Fail:
				// Sent only for a step whose process never ran.
				fmt.Fprintf(e.cfg.Stderr, "porter: step cannot run: %s\n", m.Fail.GetMessage())
				return int(max(m.Fail.GetExitStatus(), 1))
			case *controlpb.SidecarCommand_Abort:
				if state == running {
					proc.Stop(e.killGrace(), StopAborted)
				}
			case *controlpb.SidecarCommand_Release:
				if state == running {
					continue // released before the process ended: ignore
				}
				e.closeSessions()
				return exitCode
			case *controlpb.SidecarCommand_SessionOpen:
				e.openSession(m.SessionOpen)
			case *controlpb.SidecarCommand_SessionInput:
				e.session(m.SessionInput.GetSessionId()).input(m.SessionInput)
			case *controlpb.SidecarCommand_SessionResize:
				e.session(m.SessionResize.GetSessionId()).resize(m.SessionResize)
			case *controlpb.SidecarCommand_SessionClose:
				e.session(m.SessionClose.GetSessionId()).close()
			}
		case <-procDone:
			state, exitCode, timeout = exited, int(proc.Exited().GetExitStatus()), nil
			e.post(&controlpb.EntrypointMessage{Msg: &controlpb.EntrypointMessage_Exited{Exited: proc.Exited()}})
		case <-timeout:
			timeout = nil
			fmt.Fprintf(e.cfg.Stderr, "porter: timeout %s exceeded; stopping the process\n", e.startTimeout())
			proc.Stop(e.killGrace(), StopTimedOut)
		case err := <-recvErr:
			// Without the sidecar nobody can release us: finish the process
			// (its output still reaches the container log) and exit with its code.
			e.cfg.Log.Warn("sidecar connection closed", "err", err)
			switch state {
			case waitingForStart:
				fmt.Fprintf(e.cfg.Stderr, "porter entrypoint: the sidecar went away before the step started: %v\n", err)
				return ExitSetupFailed
			case running:
				<-proc.Done()
				exitCode = int(proc.Exited().GetExitStatus())
			}
			e.closeSessions()
			return exitCode
		case <-sigTerm:
			// The pod is being deleted: stop the process group and go.
			sigTerm = nil
			switch state {
			case waitingForStart:
				return ExitSetupFailed
			case running:
				proc.Stop(e.killGrace(), StopAborted)
				<-proc.Done()
				exitCode = int(proc.Exited().GetExitStatus())
			}
			e.closeSessions()
			return exitCode
		}
	}
}

func (e *Entrypointer) killGrace() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.start != nil && e.start.GetKillGrace() != nil {
		return e.start.GetKillGrace().AsDuration()
	}
	return defaultKillGrace
}

func (e *Entrypointer) startTimeout() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.start.GetTimeout().AsDuration()
}
