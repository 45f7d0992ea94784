//go:build linux

package cli

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/gorilla/websocket"
	"golang.org/x/sys/unix"

	"github.com/porter-ci/porter/pkg/concourse"
)

// TestInterceptOnATerminal drives intercept with a pseudo-terminal as
// stdin: the session gets a TTY of the terminal's size, the terminal is raw
// while it lasts and restored after, and window changes are passed on.
func TestInterceptOnATerminal(t *testing.T) {
	master, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	defer master.Close()
	defer tty.Close()
	if err := pty.Setsize(master, &pty.Winsize{Rows: 33, Cols: 99}); err != nil {
		t.Fatal(err)
	}
	canonical := func() bool {
		tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		return tio.Lflag&unix.ICANON != 0
	}

	srv := newFakeServer(t)
	resized := make(chan concourse.HijackWindowSize, 1)
	typed := make(chan string, 1)
	srv.hijack = func(spec concourse.HijackProcessSpec, conn *websocket.Conn) {
		var keys strings.Builder
		for {
			var in concourse.HijackInput
			if err := conn.ReadJSON(&in); err != nil {
				return
			}
			if in.TTYSpec != nil {
				select {
				case resized <- in.TTYSpec.WindowSize:
				default:
				}
			}
			keys.Write(in.Stdin)
			if strings.Contains(keys.String(), "\x04") { // ^D: the shell exits
				typed <- keys.String()
				status := 5
				_ = conn.WriteJSON(concourse.HijackOutput{Stdout: []byte("bye"), ExitStatus: &status})
				return
			}
		}
	}
	r := newRunner(t)
	r.loginTo(srv, "good")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan result, 1)
	go func() { done <- r.run(ctx, tty, "-t", "x", "intercept", "-b", "42") }()

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	waitFor("raw mode", func() bool { return !canonical() })
	if err := pty.Setsize(master, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	// The terminal is not this process's controlling one: say it ourselves,
	// and again, as a signal may come before intercept listens.
	var size concourse.HijackWindowSize
	waitFor("the resize", func() bool {
		_ = syscall.Kill(os.Getpid(), syscall.SIGWINCH)
		select {
		case size = <-resized:
			return true
		case <-time.After(50 * time.Millisecond):
			return false
		}
	})
	if size != (concourse.HijackWindowSize{Columns: 120, Rows: 40}) {
		t.Errorf("resized to %+v", size)
	}
	if _, err := master.Write([]byte("ls\x04")); err != nil {
		t.Fatal(err)
	}
	if got := <-typed; got != "ls\x04" {
		t.Errorf("typed %q: in raw mode keystrokes go out as they are", got)
	}
	res := <-done
	if res.code != 5 || res.stdout != "bye" {
		t.Errorf("exit %d stdout %q stderr %q", res.code, res.stdout, res.stderr)
	}
	if !canonical() {
		t.Error("the terminal was not restored")
	}
	spec := srv.specs[0]
	if spec.TTY == nil || spec.TTY.WindowSize != (concourse.HijackWindowSize{Columns: 99, Rows: 33}) || spec.Path != "bash" {
		t.Errorf("spec %+v", spec)
	}
}
