package entrypoint

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"sync"

	"github.com/creack/pty"

	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/sidecar/controlpb"
)

// session is an intercept session: a process (a shell by default) started
// by the entrypoint inside the main container, as the step's user, in the
// step's directory, with the step's volumes.
type session struct {
	id    string
	cmd   *exec.Cmd
	tty   *os.File       // with a TTY
	stdin io.WriteCloser // without
	post  func(*controlpb.EntrypointMessage)
}

func (e *Entrypointer) session(id string) *session {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sessions[id]
}

func (e *Entrypointer) openSession(open *eventspb.SessionOpen) {
	s, err := e.startSession(open)
	if err != nil {
		var nf commandNotFound
		e.post(sessionMsg(&eventspb.SessionOutput{SessionId: open.GetSessionId(), Exited: true, ExitStatus: -1, Error: err.Error(),
			NotFound: errors.As(err, &nf)}))
		return
	}
	e.mu.Lock()
	e.sessions[s.id] = s
	e.mu.Unlock()
}

func sessionMsg(out *eventspb.SessionOutput) *controlpb.EntrypointMessage {
	return &controlpb.EntrypointMessage{Msg: &controlpb.EntrypointMessage_SessionOutput{SessionOutput: out}}
}

func (e *Entrypointer) startSession(open *eventspb.SessionOpen) (*session, error) {
	e.mu.Lock()
	st := e.start
	e.mu.Unlock()
	var user, dir string
	var extra []string
	if st != nil {
		user, dir, extra = st.GetUser(), st.GetDir(), st.GetEnv()
	}
	cred, home, err := lookupUser(user)
	if err != nil {
		return nil, err
	}
	env := processEnv(os.Environ(), append(extra, open.GetEnv()...), home, cred != nil)
	argv := open.GetCommand()
	if len(argv) == 0 {
		argv = []string{defaultShell()}
	}
	path, err := lookPath(argv[0], env)
	if err != nil {
		return nil, startFailed(argv[0], err)
	}
	cmd := &exec.Cmd{Path: path, Args: argv, Dir: dir, Env: env, SysProcAttr: processAttr(cred, false)}
	s := &session{id: open.GetSessionId(), cmd: cmd, post: e.post}
	var outputs []io.Reader
	var streams []eventspb.Stream
	if open.GetTty() {
		cmd.Env = append(cmd.Env, "TERM=xterm")
		// pty.Start makes the shell a session leader with the TTY as its
		// controlling terminal (Setsid + Setctty).
		size := &pty.Winsize{Rows: uint16(max(open.GetRows(), 24)), Cols: uint16(max(open.GetCols(), 80))}
		f, err := pty.StartWithSize(cmd, size)
		if err != nil {
			return nil, fmt.Errorf("start %q with a TTY: %w", argv[0], err)
		}
		s.tty = f
		outputs, streams = []io.Reader{f}, []eventspb.Stream{eventspb.Stream_STREAM_STDOUT}
	} else {
		cmd.SysProcAttr = processAttr(cred, true)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, fmt.Errorf("session stdin: %w", err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, fmt.Errorf("session stdout: %w", err)
		}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			return nil, fmt.Errorf("session stderr: %w", err)
		}
		if err := cmd.Start(); err != nil {
			return nil, startFailed(argv[0], err)
		}
		s.stdin = stdin
		outputs = []io.Reader{stdout, stderr}
		streams = []eventspb.Stream{eventspb.Stream_STREAM_STDOUT, eventspb.Stream_STREAM_STDERR}
	}

	var wg sync.WaitGroup
	e.sessionsWG.Add(len(outputs) + 1)
	for i, r := range outputs {
		wg.Add(1)
		go func() {
			defer e.sessionsWG.Done()
			defer wg.Done()
			buf := make([]byte, 16<<10)
			for {
				n, err := r.Read(buf)
				if n > 0 {
					s.post(sessionMsg(&eventspb.SessionOutput{SessionId: s.id, Stream: streams[i], Data: append([]byte(nil), buf[:n]...)}))
				}
				if err != nil {
					return // EOF, or EIO from a pty whose shell has exited
				}
			}
		}()
	}
	go func() {
		defer e.sessionsWG.Done()
		wg.Wait()
		err := cmd.Wait()
		if s.tty != nil {
			s.tty.Close()
		}
		exited := exitOf(cmd.ProcessState, err)
		s.post(sessionMsg(&eventspb.SessionOutput{SessionId: s.id, Exited: true, ExitStatus: exited.GetExitStatus()}))
		e.mu.Lock()
		delete(e.sessions, s.id)
		e.mu.Unlock()
	}()
	return s, nil
}

func (s *session) input(in *eventspb.SessionInput) {
	if s == nil {
		return
	}
	w := io.Writer(s.tty)
	if s.tty == nil {
		w = s.stdin
	}
	if len(in.GetData()) > 0 {
		_, _ = w.Write(in.GetData())
	}
	if in.GetEof() {
		if s.tty != nil {
			_, _ = s.tty.Write([]byte{4}) // ^D: end of input at the terminal
		} else {
			_ = s.stdin.Close()
		}
	}
}

func (s *session) resize(r *eventspb.SessionResize) {
	if s == nil || s.tty == nil {
		return
	}
	_ = pty.Setsize(s.tty, &pty.Winsize{Rows: uint16(r.GetRows()), Cols: uint16(r.GetCols())})
}

// close hangs up the session's process group.
func (s *session) close() {
	if s == nil || s.cmd.Process == nil {
		return
	}
	hangUpGroup(s.cmd.Process)
	killGroup(s.cmd.Process)
}

func (e *Entrypointer) closeSessions() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.sessions {
		s.close()
	}
}

// commandNotFound is a session's command missing from the image, told
// apart so that a check pod's caller can say so (a resource type's image
// without its check script) without reading the message.
type commandNotFound struct{ error }

func (e commandNotFound) Unwrap() error { return e.error }

// startFailed is the error of a session command that did not start.
func startFailed(argv0 string, err error) error {
	err = fmt.Errorf("start %q: %w", argv0, err)
	if errors.Is(err, fs.ErrNotExist) {
		return commandNotFound{err}
	}
	return err
}
