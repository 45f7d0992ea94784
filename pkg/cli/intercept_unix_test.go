//go:build linux

package cli_test

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atcclient/atcfake"
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
	if !canonical() {
		t.Fatal("a fresh terminal should be in canonical mode")
	}

	srv := atcfake.NewIntercept(t)
	srv.ExitStatus = 5
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan run, 1)
	go func() { done <- runWithStdin(ctx, srv.URL, tty, "intercept", "4") }()

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; sessions %+v", what, srv.Sessions())
			}
		}
	}
	waitFor("the session", func() bool { return len(srv.Sessions()) == 1 })
	q := srv.Sessions()[0].Query
	if q.Get("tty") != "true" || q.Get("rows") != "33" || q.Get("cols") != "99" {
		t.Errorf("query %v: want tty=true rows=33 cols=99", q)
	}
	// Raw mode is set right after the session opens.
	waitFor("raw mode", func() bool { return !canonical() })

	if err := pty.Setsize(master, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	resized := func() bool {
		for _, m := range srv.Sessions()[0].Received {
			if m.Type == api.InterceptResize && m.Rows == 40 && m.Cols == 120 {
				return true
			}
		}
		return false
	}
	// The terminal is not this process's controlling one: say it ourselves.
	// Signals may be missed before intercept listens, so repeat.
	waitFor("the resize", func() bool {
		_ = syscall.Kill(os.Getpid(), syscall.SIGWINCH)
		time.Sleep(50 * time.Millisecond)
		return resized()
	})

	// Keystrokes go out as typed: in raw mode nothing waits for a newline.
	if _, err := master.Write([]byte("ls")); err != nil {
		t.Fatal(err)
	}
	waitFor("the keystrokes", func() bool {
		var typed strings.Builder
		for _, m := range srv.Sessions()[0].Received {
			if m.Type == api.InterceptInput {
				typed.Write(m.Data)
			}
		}
		return typed.String() == "ls"
	})
	if _, err := master.Write([]byte{4}); err != nil { // ^D: the fake's shell exits
		t.Fatal(err)
	}
	var r run
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("intercept did not end")
	}
	if r.code != 5 {
		t.Errorf("exit %d, want 5; stderr %q", r.code, r.stderr)
	}
	if r.stdout != "ls" {
		t.Errorf("stdout %q, want the echo of the keystrokes", r.stdout)
	}
	if !canonical() {
		t.Error("the terminal was not restored")
	}
}
