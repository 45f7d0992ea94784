//go:build !windows

package entrypoint

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTerminateGroupReachesChildren starts a shell that starts a child in
// the background, as a step's script would, and checks that terminating the
// process group ends the child too.
func TestTerminateGroupReachesChildren(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	cmd := exec.Command("/bin/sh", "-c", `sleep 300 & echo $! > "$1"; wait`, "sh", pidFile)
	cmd.SysProcAttr = processAttr(nil, true)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var child int
	// Kills whatever is left if the test fails; cmd.Wait runs below.
	t.Cleanup(func() {
		killGroup(cmd.Process)
		_ = cmd.Process.Kill()
		if child != 0 {
			_ = syscall.Kill(child, syscall.SIGKILL)
		}
	})

	deadline := time.Now().Add(10 * time.Second)
	for child == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the shell did not start its child")
		}
		if b, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(b), "\n") {
			child, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		time.Sleep(10 * time.Millisecond)
	}

	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	terminateGroup(cmd.Process)
	select {
	case err := <-waited:
		if err == nil {
			t.Fatal("the shell exited 0 after TERM")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the shell still runs 10 s after its group was terminated")
	}
	deadline = time.Now().Add(10 * time.Second)
	for syscall.Kill(child, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("child %d still runs after its group was terminated", child)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLookupUser(t *testing.T) {
	if cred, _, err := lookupUser(""); err != nil || cred != nil {
		t.Fatalf("empty user: %v, %v", cred, err)
	}
	if _, _, err := lookupUser("no-such-user-here"); err == nil {
		t.Fatal("unknown user accepted")
	}
	cred, _, err := lookupUser("0:0")
	if err != nil || cred.Uid != 0 || cred.Gid != 0 {
		t.Fatalf("0:0 = %+v, %v", cred, err)
	}
}
