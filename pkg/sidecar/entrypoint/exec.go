package entrypoint

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

	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/sidecar/controlpb"
)

// socketWaiter waits for the sidecar's control socket and attaches over gRPC.
type socketWaiter struct{ path string }

// SocketWaiter is the Waiter of `porter entrypoint`: it attaches to the
// sidecar's control socket at path once it exists.
func SocketWaiter(path string) Waiter { return socketWaiter{path: path} }

func (w socketWaiter) Wait(ctx context.Context) (Link, error) {
	if err := waitForSocket(ctx, w.path); err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient("unix://"+w.path, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", w.path)
		}))
	if err != nil {
		return nil, fmt.Errorf("connect to sidecar: %w", err)
	}
	// The stream outlives ctx: a terminated pod still reports its process's end.
	streamCtx, cancelStream := context.WithCancel(context.WithoutCancel(ctx))
	stream, err := controlpb.NewControlClient(conn).Attach(streamCtx, grpc.WaitForReady(true))
	if err != nil {
		cancelStream()
		conn.Close()
		return nil, fmt.Errorf("attach to sidecar: %w", err)
	}
	return grpcLink{Control_AttachClient: stream, conn: conn, cancel: cancelStream}, nil
}

// grpcLink is an attached control stream.
type grpcLink struct {
	controlpb.Control_AttachClient
	conn   *grpc.ClientConn
	cancel context.CancelFunc
}

func (l grpcLink) Close() error {
	l.cancel()
	return l.conn.Close()
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

// execRunner starts the step's process in its own process group.
type execRunner struct {
	stderr io.Writer // the container's stderr, for porter's own notes
	// memory is the container's memory cgroup, read to tell an OOM kill.
	memory memoryCgroup
	log    *slog.Logger
}

// execProcess is a started step process.
type execProcess struct {
	cmd  *exec.Cmd
	done chan struct{}

	mu       sync.Mutex
	exited   *controlpb.Exited
	aborted  bool
	timedOut bool
}

func (p *execProcess) Done() <-chan struct{} { return p.done }

func (p *execProcess) Exited() *controlpb.Exited {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

func (r execRunner) Start(argv []string, st *controlpb.Start, out OutputFunc) (Process, error) {
	cred, home, err := lookupUser(st.GetUser())
	if err != nil {
		return nil, err
	}
	if dir := st.GetDir(); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create working directory %s: %w", dir, err)
		}
	}
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
	oom := startOOMWatch(r.memory)
	if err := cmd.Start(); err != nil {
		for _, f := range []*os.File{stdoutR, stdoutW, stderrR, stderrW} {
			f.Close()
		}
		return nil, fmt.Errorf("start %q: %w", argv[0], err)
	}
	stdoutW.Close()
	stderrW.Close()

	p := &execProcess{cmd: cmd, done: make(chan struct{})}
	var copiers sync.WaitGroup
	copiers.Add(2)
	go copyOutput(&copiers, stdoutR, out, eventspb.Stream_STREAM_STDOUT)
	go copyOutput(&copiers, stderrR, out, eventspb.Stream_STREAM_STDERR)
	go func() {
		err := cmd.Wait()
		// Background children may hold the pipes open: give them a moment,
		// then stop reading so the step can finish.
		deadline := time.Now().Add(2 * time.Second)
		stdoutR.SetReadDeadline(deadline)
		stderrR.SetReadDeadline(deadline)
		copiers.Wait()
		exited := exitOf(cmd.ProcessState, err)
		p.mu.Lock()
		exited.Aborted, exited.TimedOut = p.aborted, p.timedOut
		oom.mark(exited)
		if err := markUsage(r.memory, exited); err != nil && r.log != nil {
			r.log.Info("the container's resource usage is not (all) available", "err", err)
		}
		p.exited = exited
		p.mu.Unlock()
		if exited.GetOomKilled() {
			fmt.Fprintf(r.stderr, "porter: %s\n", OutOfMemoryMessage(exited.GetMemoryLimit()))
		}
		close(p.done)
	}()
	return p, nil
}

// copyOutput hands each chunk the process writes to out as soon as it is
// read (low latency).
func copyOutput(wg *sync.WaitGroup, r *os.File, out OutputFunc, stream eventspb.Stream) {
	defer wg.Done()
	defer r.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			out(stream, append([]byte(nil), buf[:n]...))
		}
		if err != nil {
			return
		}
	}
}

// Stop signals the process group TERM, then KILL after grace.
func (p *execProcess) Stop(grace time.Duration, why StopReason) {
	p.mu.Lock()
	if p.exited != nil {
		p.mu.Unlock()
		return
	}
	switch why {
	case StopAborted:
		p.aborted = true
	case StopTimedOut:
		p.timedOut = true
	}
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
