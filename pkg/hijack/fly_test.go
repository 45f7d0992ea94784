package hijack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events/eventspb"
)

// findFly returns Concourse's fly: $FLY, else shared/tools/fly beside the
// repository (found walking up from here), else fly on PATH. Without one
// the test is skipped, unless CI is set.
func findFly(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FLY"); p != "" {
		return p
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		p := filepath.Join(dir, "shared", "tools", "fly")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	if p, err := exec.LookPath("fly"); err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatal("fly not found: set FLY, or put it at shared/tools/fly beside the repository or on PATH")
	}
	t.Skip("fly not found (set FLY, or put it at shared/tools/fly beside the repository or on PATH)")
	return ""
}

const flyContainerID = "924a6a98-4e6b-464c-85e4-33a6c2908229"

// flyServer answers what `fly intercept -b 41 -s one-off` asks, as the
// captured Concourse 8.2.5 did: info, the container lookup, the hijack.
type flyServer struct {
	*httptest.Server
	specs chan concourse.HijackProcessSpec
	auth  chan string
	ended chan string
}

func newFlyServer(t *testing.T, opts ServeOptions, process func(*fakeSession)) *flyServer {
	t.Helper()
	s := &flyServer{specs: make(chan concourse.HijackProcessSpec, 10), auth: make(chan string, 10), ended: make(chan string, 10)}
	opts.Log = slog.New(slog.DiscardHandler)
	if opts.Open == nil {
		opts.Open = func(ctx context.Context, open *eventspb.SessionOpen) (Session, error) {
			f := newFakeSession(open)
			go process(f)
			return f, nil
		}
	}
	writeJSON := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/info", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, concourse.Info{Version: "8.2.5", WorkerVersion: "2.5", FeatureFlags: map[string]bool{}})
	})
	mux.HandleFunc("GET /api/v1/teams/main/containers", func(w http.ResponseWriter, r *http.Request) {
		if q := r.URL.Query(); q.Get("build_id") != "41" || q.Get("step_name") != "one-off" {
			t.Errorf("container lookup %q; want build_id=41&step_name=one-off", r.URL.RawQuery)
			writeJSON(w, []concourse.Container{})
			return
		}
		writeJSON(w, []concourse.Container{{
			ID: flyContainerID, WorkerName: "porter", State: concourse.ContainerCreated, Type: "task",
			StepName: "one-off", BuildID: 41, BuildName: "41", WorkingDirectory: "/tmp/build/b1dda4c3",
		}})
	})
	mux.HandleFunc("GET /api/v1/teams/main/containers/{id}/hijack", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != flyContainerID {
			http.NotFound(w, r)
			return
		}
		s.auth <- r.Header.Get("Authorization")
		// Record the spec as Open sees it, then open as configured.
		o := opts
		o.Open = func(ctx context.Context, open *eventspb.SessionOpen) (Session, error) {
			s.specs <- concourse.HijackProcessSpec{Path: first(open.GetCommand()), Env: open.GetEnv()}
			return opts.Open(ctx, open)
		}
		s.ended <- Serve(w, r, o)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("fly asked for %s %s, which this test does not answer", r.Method, r.URL)
		http.NotFound(w, r)
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// fly runs the real fly against the server with a ~/.flyrc of its own and
// returns its stdout, stderr and exit code.
func (s *flyServer) fly(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	fly := findFly(t)
	home := t.TempDir()
	rc := "targets:\n  x:\n    api: " + s.URL + "\n    team: main\n    token:\n      type: bearer\n      value: anything\n"
	if err := os.WriteFile(filepath.Join(home, ".flyrc"), []byte(rc), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, fly, append([]string{"-t", "x"}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+home, "TERM=dumb")
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run fly: %v\nstderr: %s", err, stderr.String())
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

func (s *flyServer) end(t *testing.T) string {
	t.Helper()
	select {
	case how := <-s.ended:
		return how
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
		return ""
	}
}

func TestFlyCommandAndExitStatus(t *testing.T) {
	srv := newFlyServer(t, ServeOptions{}, func(f *fakeSession) {
		if !slices.Equal(f.open.GetCommand(), []string{"sh", "-c", "echo hi; exit 3"}) {
			f.fail("unexpected command " + strings.Join(f.open.GetCommand(), " "))
			return
		}
		f.stdout("hi\n")
		f.exit(3)
	})
	stdout, stderr, code := srv.fly(t, "", "intercept", "-b", "41", "-s", "one-off", "--", "sh", "-c", "echo hi; exit 3")
	if stdout != "hi\n" || code != 3 {
		t.Fatalf("fly: stdout %q, exit %d; want \"hi\\n\", 3\nstderr: %s", stdout, code, stderr)
	}
	// fly sends its own token type verbatim: lowercase "bearer" on the
	// hijack, unlike its other requests ("Bearer").
	if got := <-srv.auth; got != "bearer anything" {
		t.Errorf("Authorization = %q", got)
	}
	spec := <-srv.specs
	if !slices.Equal(spec.Env, []string{"TERM=dumb"}) {
		t.Errorf("env = %q; want fly's TERM", spec.Env)
	}
	if how := srv.end(t); how != "exit 3" {
		t.Errorf("Serve ended with %q", how)
	}
}

func TestFlyStdinAndStderr(t *testing.T) {
	srv := newFlyServer(t, ServeOptions{}, func(f *fakeSession) {
		in, ok := f.readStdin()
		if !ok {
			return
		}
		f.stdout(in)
		f.stderr("to stderr\n")
		f.exit(0)
	})
	stdout, stderr, code := srv.fly(t, "hello\nworld\n", "intercept", "-b", "41", "-s", "one-off", "--", "cat")
	if stdout != "hello\nworld\n" || !strings.Contains(stderr, "to stderr\n") || code != 0 {
		t.Fatalf("fly: stdout %q, stderr %q, exit %d", stdout, stderr, code)
	}
	srv.end(t)
}

// Without a command fly asks for "bash" and, told it is not there, asks
// again for "sh": an image without bash still gets a shell.
func TestFlyRetriesWithoutBash(t *testing.T) {
	srv := newFlyServer(t, ServeOptions{}, func(f *fakeSession) {
		if first(f.open.GetCommand()) == "bash" {
			f.fail(`start "bash": executable file not found in PATH (/usr/bin:/bin)`)
			return
		}
		f.stdout("in " + first(f.open.GetCommand()) + "\n")
		f.exit(0)
	})
	stdout, stderr, code := srv.fly(t, "", "intercept", "-b", "41", "-s", "one-off")
	if stdout != "in sh\n" || code != 0 || !strings.Contains(stderr, `Couldn't find "bash" on container, retrying with "sh"`) {
		t.Fatalf("fly: stdout %q, stderr %q, exit %d", stdout, stderr, code)
	}
	if a, b := <-srv.specs, <-srv.specs; a.Path != "bash" || b.Path != "sh" {
		t.Errorf("paths %q then %q; want bash then sh", a.Path, b.Path)
	}
	srv.end(t)
	srv.end(t)
}

func TestFlyShowsSessionErrors(t *testing.T) {
	srv := newFlyServer(t, ServeOptions{
		Open: func(context.Context, *eventspb.SessionOpen) (Session, error) {
			return nil, errors.New("the step's pod is gone")
		},
	}, nil)
	stdout, stderr, code := srv.fly(t, "", "intercept", "-b", "41", "-s", "one-off", "--", "true")
	if code != 255 || !strings.Contains(stderr, "the step's pod is gone") || stdout != "" {
		t.Fatalf("fly: stdout %q, stderr %q, exit %d; want the error and 255", stdout, stderr, code)
	}
	srv.end(t)
}

// With a terminal fly asks for one of its size, and passes on resizes
// (SIGWINCH) as they happen.
func TestFlyTerminalAndResize(t *testing.T) {
	opened, resized := make(chan struct{}), make(chan [2]uint32, 1)
	srv := newFlyServer(t, ServeOptions{}, func(f *fakeSession) {
		close(opened)
		f.stdout(fmt.Sprintf("ready %dx%d tty=%v\r\n", f.open.GetRows(), f.open.GetCols(), f.open.GetTty()))
		rows, cols, ok := f.waitResize()
		if !ok {
			return
		}
		resized <- [2]uint32{rows, cols}
		f.stdout("resized\r\n")
		f.exit(0)
	})
	fly := findFly(t)
	home := t.TempDir()
	rc := "targets:\n  x:\n    api: " + srv.URL + "\n    team: main\n    token:\n      type: bearer\n      value: anything\n"
	if err := os.WriteFile(filepath.Join(home, ".flyrc"), []byte(rc), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, fly, "-t", "x", "intercept", "-b", "41", "-s", "one-off")
	cmd.Env = append(os.Environ(), "HOME="+home, "TERM=xterm")
	term, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	var out bytes.Buffer
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		_, _ = io.Copy(&out, term) // ends with EIO once fly has exited
	}()

	// fly starts watching SIGWINCH only once the session is open, so wait
	// for it and keep changing the size until one arrives.
	select {
	case <-opened:
	case <-ctx.Done():
		t.Fatal("fly opened no session")
	}
	var got [2]uint32
	for cols := uint16(132); got == [2]uint32{}; cols++ {
		if err := pty.Setsize(term, &pty.Winsize{Rows: 50, Cols: cols}); err != nil {
			t.Fatal(err)
		}
		select {
		case got = <-resized:
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("no resize reached the session")
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("fly: %v", err)
	}
	<-readDone
	if got[0] != 50 || got[1] < 132 {
		t.Errorf("resize to %dx%d; want 50 rows, at least 132 columns", got[0], got[1])
	}
	if !strings.Contains(out.String(), "ready 24x80 tty=true") || !strings.Contains(out.String(), "resized") {
		t.Errorf("fly's terminal shows %q", out.String())
	}
	spec := <-srv.specs
	if spec.Path != "bash" || !slices.Equal(spec.Env, []string{"TERM=xterm"}) {
		t.Errorf("spec = %+v", spec)
	}
	srv.end(t)
}
