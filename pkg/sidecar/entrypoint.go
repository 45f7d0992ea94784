package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
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

// RunEntrypoint waits for the sidecar's go-ahead, runs the process, reports
// its output and exit, stays for intercept sessions until released and
// returns the exit code the container should exit with.
func RunEntrypoint(ctx context.Context, cfg EntrypointConfig) int {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(cfg.Stderr, nil))
	}
	if len(cfg.Argv) == 0 {
		fmt.Fprintln(cfg.Stderr, "porter entrypoint: no command given (usage: porter entrypoint -- CMD [ARGS...])")
		return ExitSetupFailed
	}
	if err := waitForSocket(ctx, cfg.SocketPath); err != nil {
		fmt.Fprintf(cfg.Stderr, "porter entrypoint: %v\n", err)
		return ExitSetupFailed
	}
	conn, err := grpc.NewClient("unix://"+cfg.SocketPath, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", cfg.SocketPath)
		}))
	if err != nil {
		fmt.Fprintf(cfg.Stderr, "porter entrypoint: connect to sidecar: %v\n", err)
		return ExitSetupFailed
	}
	defer conn.Close()
	streamCtx, cancelStream := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelStream()
	stream, err := controlpb.NewControlClient(conn).Attach(streamCtx, grpc.WaitForReady(true))
	if err != nil {
		fmt.Fprintf(cfg.Stderr, "porter entrypoint: attach to sidecar: %v\n", err)
		return ExitSetupFailed
	}
	e := &entrypoint{cfg: cfg, stream: stream, send: make(chan *controlpb.EntrypointMessage, 64), sessions: map[string]*session{},
		memory: cgroupFS{root: cgroupRoot}}
	go e.sender()
	e.post(&controlpb.EntrypointMessage{Msg: &controlpb.EntrypointMessage_Waiting{Waiting: &controlpb.Waiting{Argv: cfg.Argv, Pid: int32(os.Getpid())}}})
	return e.run(ctx)
}

// waitForSocket returns once path exists, watching its directory rather than polling.
func waitForSocket(ctx context.Context, path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create control socket directory %s: %w", dir, err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch for the control socket: %w", err)
	}
	defer w.Close()
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	// Checked after the watch is in place so a socket created in between is not missed.
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-w.Events:
		case err := <-w.Errors:
			return fmt.Errorf("watch %s: %w", dir, err)
		case <-ctx.Done():
			return fmt.Errorf("wait for the sidecar's control socket %s: %w", path, ctx.Err())
		}
	}
}

type entrypoint struct {
	cfg    EntrypointConfig
	stream controlpb.Control_AttachClient
	send   chan *controlpb.EntrypointMessage

	mu       sync.Mutex
	sessions map[string]*session
	start    *controlpb.Start
	// memory is the container's memory cgroup, read to tell an OOM kill.
	memory memoryCgroup
}

// sender is the stream's only writer. Once the stream breaks it keeps
// draining so the process's output is never blocked on a gone sidecar.
func (e *entrypoint) sender() {
	broken := false
	for msg := range e.send {
		if broken {
			continue
		}
		if err := e.stream.Send(msg); err != nil {
			e.cfg.Log.Warn("lost the sidecar; output now goes only to the container log", "err", err)
			broken = true
		}
	}
}

func (e *entrypoint) post(msg *controlpb.EntrypointMessage) { e.send <- msg }

// process is the running step process.
type process struct {
	cmd      *exec.Cmd
	done     chan struct{}
	exited   *controlpb.Exited
	mu       sync.Mutex
	aborted  bool
	timedOut bool
}

func (e *entrypoint) run(ctx context.Context) int {
	cmds := make(chan *controlpb.SidecarCommand)
	recvErr := make(chan error, 1)
	go func() {
		for {
			cmd, err := e.stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			cmds <- cmd
		}
	}()

	var proc *process
	var procDone <-chan struct{}
	exitCode := -1
	sigTerm := ctx.Done()
	for {
		select {
		case cmd := <-cmds:
			switch m := cmd.Msg.(type) {
			case *controlpb.SidecarCommand_Start:
				if proc != nil {
					continue
				}
				e.mu.Lock()
				e.start = m.Start
				e.mu.Unlock()
				p, err := e.startProcess(m.Start)
				if err != nil {
					fmt.Fprintf(e.cfg.Stderr, "porter entrypoint: %v\n", err)
					e.post(&controlpb.EntrypointMessage{Msg: &controlpb.EntrypointMessage_Exited{Exited: &controlpb.Exited{
						ExitStatus: ExitStartFailed, StartError: err.Error(), NotFound: errors.Is(err, fs.ErrNotExist)}}})
					exitCode = ExitStartFailed
					continue
				}
				proc, procDone = p, p.done
			case *controlpb.SidecarCommand_Fail:
				fmt.Fprintf(e.cfg.Stderr, "porter: step cannot run: %s\n", m.Fail.GetMessage())
				return int(max(m.Fail.GetExitStatus(), 1))
			case *controlpb.SidecarCommand_Abort:
				if proc != nil {
					proc.stop(e.killGrace(), func(p *process) { p.aborted = true })
				}
			case *controlpb.SidecarCommand_Release:
				if proc != nil && exitCode < 0 {
					continue // released before the process ended: ignore
				}
				e.closeSessions()
				return max(exitCode, 0)
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
			procDone = nil
			exitCode = int(proc.exited.GetExitStatus())
			e.post(&controlpb.EntrypointMessage{Msg: &controlpb.EntrypointMessage_Exited{Exited: proc.exited}})
		case err := <-recvErr:
			// Without the sidecar nobody can release us: finish the process
			// (its output still reaches the container log) and exit with its code.
			e.cfg.Log.Warn("sidecar connection closed", "err", err)
			if proc == nil {
				if exitCode >= 0 {
					return exitCode
				}
				fmt.Fprintf(e.cfg.Stderr, "porter entrypoint: the sidecar went away before the step started: %v\n", err)
				return ExitSetupFailed
			}
			<-proc.done
			e.closeSessions()
			return int(proc.exited.GetExitStatus())
		case <-sigTerm:
			// The pod is being deleted: stop the process group and go.
			sigTerm = nil
			if proc == nil {
				return ExitSetupFailed
			}
			proc.stop(e.killGrace(), func(p *process) { p.aborted = true })
			<-proc.done
			e.closeSessions()
			return int(proc.exited.GetExitStatus())
		}
	}
}

func (e *entrypoint) killGrace() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.start != nil && e.start.GetKillGrace() != nil {
		return e.start.GetKillGrace().AsDuration()
	}
	return 10 * time.Second
}

// startProcess starts the step's process in its own process group.
func (e *entrypoint) startProcess(st *controlpb.Start) (*process, error) {
	cred, home, err := lookupUser(st.GetUser())
	if err != nil {
		return nil, err
	}
	if dir := st.GetDir(); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create working directory %s: %w", dir, err)
		}
	}
	argv := e.cfg.Argv
	env := processEnv(os.Environ(), st.GetEnv(), home, cred != nil)
	path, err := lookPath(argv[0], env)
	if err != nil {
		return nil, fmt.Errorf("start %q: %w", argv[0], err)
	}
	// A missing command is told apart from other start errors: for a
	// resource step it means the type's image is not a resource type.
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("start %q: %w", argv[0], err)
	}
	cmd := &exec.Cmd{Path: path, Args: argv, Dir: st.GetDir(), Env: env,
		SysProcAttr: processAttr(cred, true)}
	if st.GetHasStdin() {
		cmd.Stdin = strings.NewReader(string(st.GetStdin()))
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("create stdout pipe: %w", err)
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		stdoutR.Close()
		stdoutW.Close()
		return nil, fmt.Errorf("create stderr pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = stdoutW, stderrW
	oom := startOOMWatch(e.memory)
	if err := cmd.Start(); err != nil {
		for _, f := range []*os.File{stdoutR, stdoutW, stderrR, stderrW} {
			f.Close()
		}
		return nil, fmt.Errorf("start %q: %w", argv[0], err)
	}
	stdoutW.Close()
	stderrW.Close()

	p := &process{cmd: cmd, done: make(chan struct{})}
	var copiers sync.WaitGroup
	copiers.Add(2)
	go e.copyOutput(&copiers, stdoutR, e.cfg.Stdout, eventspb.Stream_STREAM_STDOUT)
	go e.copyOutput(&copiers, stderrR, e.cfg.Stderr, eventspb.Stream_STREAM_STDERR)

	var timer *time.Timer
	if t := st.GetTimeout(); t != nil && t.AsDuration() > 0 {
		timer = time.AfterFunc(t.AsDuration(), func() {
			fmt.Fprintf(e.cfg.Stderr, "porter: timeout %s exceeded; stopping the process\n", t.AsDuration())
			p.stop(e.killGrace(), func(p *process) { p.timedOut = true })
		})
	}
	go func() {
		err := cmd.Wait()
		if timer != nil {
			timer.Stop()
		}
		// Background children may hold the pipes open: give them a moment,
		// then stop reading so the step can finish.
		deadline := time.Now().Add(2 * time.Second)
		stdoutR.SetReadDeadline(deadline)
		stderrR.SetReadDeadline(deadline)
		copiers.Wait()
		p.mu.Lock()
		p.exited = exitOf(cmd.ProcessState, err)
		p.exited.Aborted, p.exited.TimedOut = p.aborted, p.timedOut
		oom.mark(p.exited)
		p.mu.Unlock()
		if p.exited.GetOomKilled() {
			fmt.Fprintf(e.cfg.Stderr, "porter: %s\n", OutOfMemoryMessage(p.exited.GetMemoryLimit()))
		}
		close(p.done)
	}()
	return p, nil
}

// copyOutput sends each chunk the process writes to the sidecar as soon as
// it is read (low latency) and to the container's own stream.
func (e *entrypoint) copyOutput(wg *sync.WaitGroup, r *os.File, local io.Writer, stream eventspb.Stream) {
	defer wg.Done()
	defer r.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			data := append([]byte(nil), buf[:n]...)
			now := timestamppb.Now()
			local.Write(data)
			e.post(&controlpb.EntrypointMessage{Msg: &controlpb.EntrypointMessage_Output{Output: &controlpb.Output{Stream: stream, Data: data, Time: now}}})
		}
		if err != nil {
			return
		}
	}
}

// stop signals the process group TERM, then KILL after grace.
func (p *process) stop(grace time.Duration, mark func(*process)) {
	p.mu.Lock()
	if p.exited != nil {
		p.mu.Unlock()
		return
	}
	mark(p)
	p.mu.Unlock()
	terminateGroup(p.cmd.Process)
	go func() {
		select {
		case <-p.done:
		case <-time.After(grace):
			killGroup(p.cmd.Process)
		}
	}()
}

func exitOf(state *os.ProcessState, waitErr error) *controlpb.Exited {
	if state == nil {
		return &controlpb.Exited{ExitStatus: ExitStartFailed, StartError: fmt.Sprint(waitErr)}
	}
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return &controlpb.Exited{ExitStatus: int32(128 + int(ws.Signal())), Signal: ws.Signal().String()}
	}
	return &controlpb.Exited{ExitStatus: int32(state.ExitCode())}
}

// processEnv is the container's environment without porter's own setting
// (the control socket: the only one the main container gets), plus the
// step's extra variables; HOME follows a switched user. Params whose names
// start with PORTER_ are the user's and reach the process.
func processEnv(base, extra []string, home string, switched bool) []string {
	env := make([]string, 0, len(base)+len(extra)+1)
	for _, kv := range base {
		if strings.HasPrefix(kv, "PORTER_SOCKET=") || (switched && strings.HasPrefix(kv, "HOME=")) {
			continue
		}
		env = append(env, kv)
	}
	if switched && home != "" {
		env = append(env, "HOME="+home)
	}
	return append(env, extra...)
}
