package hijack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/stepserver"
)

// fakeSession is a process played by a test function: what the client
// sends arrives on in, what the function emits goes to the client.
type fakeSession struct {
	open   *eventspb.SessionOpen
	out    chan *eventspb.SessionOutput
	in     chan fakeInput
	closed chan struct{}
	once   sync.Once
}

// fakeInput is one call of Input or Resize.
type fakeInput struct {
	data       []byte
	eof        bool
	rows, cols uint32
}

func newFakeSession(open *eventspb.SessionOpen) *fakeSession {
	return &fakeSession{open: open, out: make(chan *eventspb.SessionOutput), in: make(chan fakeInput, 1024), closed: make(chan struct{})}
}

func (f *fakeSession) Next(ctx context.Context) (*eventspb.SessionOutput, bool, error) {
	select {
	case out := <-f.out:
		return out, true, nil
	case <-f.closed:
		return nil, false, nil
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

func (f *fakeSession) Input(data []byte, eof bool) error {
	f.in <- fakeInput{data: data, eof: eof}
	return nil
}

func (f *fakeSession) Resize(rows, cols uint32) error {
	f.in <- fakeInput{rows: rows, cols: cols}
	return nil
}

func (f *fakeSession) Close() error {
	f.once.Do(func() { close(f.closed) })
	return nil
}

func (f *fakeSession) emit(out *eventspb.SessionOutput) {
	select {
	case f.out <- out:
	case <-f.closed:
	}
}

func (f *fakeSession) stdout(s string) {
	f.emit(&eventspb.SessionOutput{Stream: eventspb.Stream_STREAM_STDOUT, Data: []byte(s)})
}

func (f *fakeSession) stderr(s string) {
	f.emit(&eventspb.SessionOutput{Stream: eventspb.Stream_STREAM_STDERR, Data: []byte(s)})
}

func (f *fakeSession) exit(status int) {
	f.emit(&eventspb.SessionOutput{Exited: true, ExitStatus: int32(status)})
}

func (f *fakeSession) fail(msg string) {
	f.emit(&eventspb.SessionOutput{Exited: true, ExitStatus: -1, Error: msg})
}

// readStdin returns stdin up to its end; ok is false if the session was
// closed first.
func (f *fakeSession) readStdin() (string, bool) {
	var buf bytes.Buffer
	for {
		select {
		case in := <-f.in:
			buf.Write(in.data)
			if in.eof {
				return buf.String(), true
			}
		case <-f.closed:
			return buf.String(), false
		}
	}
}

// waitResize returns the next terminal size the client sent.
func (f *fakeSession) waitResize() (rows, cols uint32, ok bool) {
	for {
		select {
		case in := <-f.in:
			if in.rows > 0 {
				return in.rows, in.cols, true
			}
		case <-f.closed:
			return 0, 0, false
		}
	}
}

// server is an httptest server whose hijack route calls Serve with fake
// sessions played by process.
type server struct {
	*httptest.Server
	sessions chan *fakeSession
	ended    chan string
}

func hijackPath(id string) string { return "/api/v1/teams/main/containers/" + id + "/hijack" }

func newServer(t *testing.T, opts ServeOptions, process func(*fakeSession)) *server {
	t.Helper()
	s := &server{sessions: make(chan *fakeSession, 10), ended: make(chan string, 10)}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Open == nil {
		opts.Open = func(ctx context.Context, open *eventspb.SessionOpen) (Session, error) {
			f := newFakeSession(open)
			s.sessions <- f
			go process(f)
			return f, nil
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+hijackPath("{id}"), func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "c1" {
			http.Error(w, "no such container", http.StatusNotFound)
			return
		}
		s.ended <- Serve(w, r, opts)
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// end returns how Serve ended the session.
func (s *server) end(t *testing.T) string {
	t.Helper()
	select {
	case how := <-s.ended:
		return how
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
		return ""
	}
}

func (s *server) session(t *testing.T) *fakeSession {
	t.Helper()
	select {
	case f := <-s.sessions:
		return f
	case <-time.After(10 * time.Second):
		t.Fatal("no session was opened")
		return nil
	}
}

func (s *server) client(spec concourse.HijackProcessSpec) (ClientOptions, *bytes.Buffer, *bytes.Buffer) {
	var stdout, stderr bytes.Buffer
	return ClientOptions{
		URL:    s.URL + hijackPath("c1"),
		Header: http.Header{"Authorization": {"bearer anything"}},
		Spec:   spec,
		Stdout: &stdout,
		Stderr: &stderr,
	}, &stdout, &stderr
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestCommandWithArgsAndExitStatus(t *testing.T) {
	srv := newServer(t, ServeOptions{}, func(f *fakeSession) {
		f.stdout(strings.Join(f.open.GetCommand()[1:], " ") + "\n")
		f.exit(3)
	})
	opts, stdout, _ := srv.client(concourse.HijackProcessSpec{Path: "sh", Args: []string{"-c", "echo hi; exit 3"}})
	status, err := Run(testContext(t), opts)
	if err != nil || status != 3 {
		t.Fatalf("Run = %d, %v; want 3, nil", status, err)
	}
	if got, want := stdout.String(), "-c echo hi; exit 3\n"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	if got := srv.session(t).open.GetCommand(); !slices.Equal(got, []string{"sh", "-c", "echo hi; exit 3"}) {
		t.Errorf("command = %q", got)
	}
	if how := srv.end(t); how != "exit 3" {
		t.Errorf("Serve ended with %q, want exit 3", how)
	}
}

func TestStdinPipedAndClosed(t *testing.T) {
	srv := newServer(t, ServeOptions{}, func(f *fakeSession) {
		in, ok := f.readStdin()
		if !ok {
			return
		}
		f.stdout(strings.ToUpper(in))
		f.exit(0)
	})
	opts, stdout, _ := srv.client(concourse.HijackProcessSpec{Path: "tr"})
	// More than one chunk, so that order and completeness both count.
	input := strings.Repeat("hello, world\n", 10000)
	opts.Stdin = strings.NewReader(input)
	status, err := Run(testContext(t), opts)
	if err != nil || status != 0 {
		t.Fatalf("Run = %d, %v; want 0, nil", status, err)
	}
	if got := stdout.String(); got != strings.ToUpper(input) {
		t.Errorf("stdout has %d bytes, want %d: the process did not get stdin whole", len(got), len(input))
	}
	srv.end(t)
}

func TestStdoutAndStderrKeptApart(t *testing.T) {
	srv := newServer(t, ServeOptions{}, func(f *fakeSession) {
		f.stdout("out 1\n")
		f.stderr("err 1\n")
		f.stdout("out 2\n")
		f.stderr("err 2\n")
		f.exit(0)
	})
	opts, stdout, stderr := srv.client(concourse.HijackProcessSpec{Path: "x"})
	if status, err := Run(testContext(t), opts); err != nil || status != 0 {
		t.Fatalf("Run = %d, %v; want 0, nil", status, err)
	}
	if stdout.String() != "out 1\nout 2\n" || stderr.String() != "err 1\nerr 2\n" {
		t.Errorf("stdout = %q, stderr = %q", stdout, stderr)
	}
	srv.end(t)
}

func TestTTYAndResize(t *testing.T) {
	srv := newServer(t, ServeOptions{}, func(f *fakeSession) {
		rows, cols, ok := f.waitResize()
		if !ok {
			return
		}
		f.stdout(fmt.Sprintf("%d %d %d %d", f.open.GetRows(), f.open.GetCols(), rows, cols))
		f.exit(0)
	})
	opts, stdout, _ := srv.client(concourse.HijackProcessSpec{
		TTY: &concourse.HijackTTYSpec{WindowSize: concourse.HijackWindowSize{Columns: 80, Rows: 24}},
	})
	resize := make(chan concourse.HijackWindowSize, 1)
	resize <- concourse.HijackWindowSize{Columns: 132, Rows: 50}
	opts.Resize = resize
	// A terminal's stdin never ends.
	stdin, w := io.Pipe()
	defer w.Close()
	opts.Stdin = stdin
	if status, err := Run(testContext(t), opts); err != nil || status != 0 {
		t.Fatalf("Run = %d, %v; want 0, nil", status, err)
	}
	if got, want := stdout.String(), "24 80 50 132"; got != want {
		t.Errorf("sizes (open rows cols, resize rows cols) = %q, want %q", got, want)
	}
	f := srv.session(t)
	if !f.open.GetTty() || len(f.open.GetCommand()) != 0 {
		t.Errorf("open = %v; want a TTY and the image's shell", f.open)
	}
	srv.end(t)
}

func TestOpenErrorReachesTheClient(t *testing.T) {
	srv := newServer(t, ServeOptions{
		Open: func(context.Context, *eventspb.SessionOpen) (Session, error) {
			return nil, errors.New("the step's sidecar is not connected")
		},
	}, nil)
	opts, _, _ := srv.client(concourse.HijackProcessSpec{Path: "sh"})
	status, err := Run(testContext(t), opts)
	var serr *SessionError
	if !errors.As(err, &serr) || !strings.Contains(serr.Message, "the step's sidecar is not connected") {
		t.Fatalf("Run = %d, %v; want a SessionError about the sidecar", status, err)
	}
	srv.end(t)
}

func TestExecutableNotFound(t *testing.T) {
	srv := newServer(t, ServeOptions{}, func(f *fakeSession) {
		f.fail(`start "bash": executable file not found in PATH (/usr/bin:/bin)`)
	})
	opts, _, _ := srv.client(concourse.HijackProcessSpec{Path: "bash"})
	_, err := Run(testContext(t), opts)
	if !errors.Is(err, ErrExecutableNotFound) || !strings.Contains(err.Error(), `start "bash"`) {
		t.Fatalf("Run: %v; want ErrExecutableNotFound with the server's message", err)
	}
	srv.end(t)
}

func TestLostSidecarEndsTheSession(t *testing.T) {
	var alive atomic.Bool
	alive.Store(true)
	srv := newServer(t, ServeOptions{
		Alive:      alive.Load,
		LostAfter:  200 * time.Millisecond,
		CheckEvery: 20 * time.Millisecond,
	}, func(f *fakeSession) {
		f.stdout("started\n")
		alive.Store(false)
		<-f.closed // the process never exits by itself
	})
	opts, stdout, _ := srv.client(concourse.HijackProcessSpec{Path: "sleep"})
	status, err := Run(testContext(t), opts)
	var serr *SessionError
	if !errors.As(err, &serr) || !strings.Contains(serr.Message, "lost the step's sidecar") {
		t.Fatalf("Run = %d, %v; want a SessionError about the lost sidecar", status, err)
	}
	if stdout.String() != "started\n" {
		t.Errorf("stdout = %q", stdout)
	}
	f := srv.session(t)
	select {
	case <-f.closed:
	case <-time.After(5 * time.Second):
		t.Error("the session was not closed")
	}
	srv.end(t)
}

func TestClientGoingAwayClosesTheSession(t *testing.T) {
	srv := newServer(t, ServeOptions{}, func(f *fakeSession) {
		f.stdout("ready\n")
		<-f.closed
	})
	ctx, cancel := context.WithCancel(testContext(t))
	opts, _, _ := srv.client(concourse.HijackProcessSpec{Path: "sleep"})
	// Cancel once the first output has arrived.
	opts.Stdout = writerFunc(func(p []byte) (int, error) {
		cancel()
		return len(p), nil
	})
	_, err := Run(ctx, opts)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v; want context.Canceled", err)
	}
	f := srv.session(t)
	select {
	case <-f.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the session was not closed when the client went away")
	}
	if how := srv.end(t); how != "client went away" {
		t.Errorf("Serve ended with %q", how)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// An idle session outlives several of the server's read timeouts (here
// 200 ms): the client answers pings, and its answers keep the server's read
// deadline moving.
func TestIdleSessionSurvivesPings(t *testing.T) {
	srv := newServer(t, ServeOptions{PingEvery: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond}, func(f *fakeSession) {
		select {
		case <-time.After(time.Second):
		case <-f.closed:
			return
		}
		f.stdout("still here\n")
		f.exit(0)
	})
	opts, stdout, _ := srv.client(concourse.HijackProcessSpec{Path: "sleep"})
	stdin, w := io.Pipe()
	defer w.Close()
	opts.Stdin = stdin
	if status, err := Run(testContext(t), opts); err != nil || status != 0 || stdout.String() != "still here\n" {
		t.Fatalf("Run = %d, %v, stdout %q", status, err, stdout)
	}
	srv.end(t)
}

func TestRefusedBeforeUpgrade(t *testing.T) {
	srv := newServer(t, ServeOptions{}, nil)
	opts, _, _ := srv.client(concourse.HijackProcessSpec{Path: "sh"})
	opts.URL = srv.URL + hijackPath("other")
	_, err := Run(testContext(t), opts)
	var serr *StatusError
	if !errors.As(err, &serr) || serr.StatusCode != http.StatusNotFound || serr.Body != "no such container" {
		t.Fatalf("Run: %v; want a 404 StatusError with the body", err)
	}
}

// The frames on the wire are Concourse's, byte for byte where it matters.
func TestWireFormat(t *testing.T) {
	srv := newServer(t, ServeOptions{}, func(f *fakeSession) {
		in, _ := f.readStdin()
		f.stdout(in)
		f.stderr("e")
		f.exit(3)
	})
	conn, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+hijackPath("c1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// What fly 8.2.5 sends, as captured.
	for _, msg := range []string{
		`{"path":"sh","args":["-c","cat"],"env":["TERM="],"dir":"/tmp/build/b1dda4c3","privileged":true,"user":"","tty":null}`,
		`{"stdin":"aGk="}`,
		`{"closed":true}`,
	} {
		if err := conn.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for {
		typ, data, err := conn.ReadMessage()
		if err != nil {
			if !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
				t.Errorf("the session did not end with a normal close frame: %v", err)
			}
			break
		}
		if typ != websocket.TextMessage {
			t.Errorf("frame type %d, want text", typ)
		}
		got = append(got, string(data))
	}
	// gorilla's WriteJSON ends each with a newline, in Concourse too.
	want := []string{`{"stdout":"aGk="}` + "\n", `{"stderr":"ZQ=="}` + "\n", `{"exit_status":3}` + "\n"}
	if !slices.Equal(got, want) {
		t.Errorf("frames = %q, want %q", got, want)
	}
	f := srv.session(t)
	if !slices.Equal(f.open.GetEnv(), []string{"TERM="}) || f.open.GetTty() {
		t.Errorf("open = %v", f.open)
	}
	srv.end(t)
}

func TestMalformedSpec(t *testing.T) {
	srv := newServer(t, ServeOptions{}, nil)
	conn, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+hijackPath("c1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.WriteMessage(websocket.TextMessage, []byte(`{"path":`)); err != nil {
		t.Fatal(err)
	}
	var out concourse.HijackOutput
	if err := conn.ReadJSON(&out); err != nil || !strings.Contains(out.Error, "malformed process spec") {
		t.Fatalf("first message = %+v, %v; want an error", out, err)
	}
	if _, _, err := conn.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseUnsupportedData) {
		t.Errorf("then %v; want close 1003", err)
	}
	srv.end(t)
}

func TestSessionOpen(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spec    concourse.HijackProcessSpec
		want    *eventspb.SessionOpen
		wantErr string
	}{
		{
			name: "fly's default",
			spec: concourse.HijackProcessSpec{Path: "bash", Env: []string{"TERM=xterm-256color"}, Dir: "/tmp/build/x", User: "root", Privileged: true,
				TTY: &concourse.HijackTTYSpec{WindowSize: concourse.HijackWindowSize{Columns: 120, Rows: 40}}},
			want: &eventspb.SessionOpen{Command: []string{"bash"}, Env: []string{"TERM=xterm-256color"}, Tty: true, Rows: 40, Cols: 120},
		},
		{
			name: "command without a terminal",
			spec: concourse.HijackProcessSpec{Path: "sh", Args: []string{"-c", "echo hi; exit 3"}},
			want: &eventspb.SessionOpen{Command: []string{"sh", "-c", "echo hi; exit 3"}},
		},
		{name: "the image's shell", spec: concourse.HijackProcessSpec{}, want: &eventspb.SessionOpen{}},
		{name: "args without a path", spec: concourse.HijackProcessSpec{Args: []string{"-c"}}, wantErr: "args without a path"},
		{name: "bad env", spec: concourse.HijackProcessSpec{Path: "sh", Env: []string{"=x"}}, wantErr: "not NAME=value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SessionOpen(tc.spec)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.GetCommand(), tc.want.GetCommand()) || !slices.Equal(got.GetEnv(), tc.want.GetEnv()) ||
				got.GetTty() != tc.want.GetTty() || got.GetRows() != tc.want.GetRows() || got.GetCols() != tc.want.GetCols() {
				t.Errorf("SessionOpen = %v, want %v", got, tc.want)
			}
		})
	}
}

// The step server's sessions are what Serve relays in production.
var _ Session = (*stepserver.Session)(nil)

// Only a missing "bash" is flagged as not found (fly's default shell, which
// it then retries as "sh"). fly takes any error saying "executable file not
// found" for the flag and exits 0 silently, so another missing command is
// said in other words, which fly prints before exiting 255.
func TestOnlyAMissingBashIsFlagged(t *testing.T) {
	const msg = `start "x": executable file not found in PATH (/usr/bin:/bin)`
	if got := (&serverConn{path: "bash"}).errorOutputs(msg); len(got) != 2 || !got[0].ExecutableNotFound || got[1].Error != msg {
		t.Errorf("bash: %+v, want the flag, then the error", got)
	}
	for _, path := range []string{"nosuchcmd", "sh", ""} {
		got := (&serverConn{path: path}).errorOutputs(msg)
		if len(got) != 1 || got[0].ExecutableNotFound || got[0].Error != `start "x": command not found in PATH (/usr/bin:/bin)` {
			t.Errorf("%q: %+v, want the error alone, without fly's words for the flag", path, got)
		}
	}
	if got := (&serverConn{path: "bash"}).errorOutputs("the step's sidecar is not connected"); len(got) != 1 || got[0].ExecutableNotFound {
		t.Errorf("another error: %+v, want it alone", got)
	}
}
