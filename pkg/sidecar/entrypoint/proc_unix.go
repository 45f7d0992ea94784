//go:build !windows

package entrypoint

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// credential is the user a process is started as; nil keeps the container's.
type credential = syscall.Credential

// processAttr starts a process as cred, in a process group of its own when
// newGroup is set, so that stopping it reaches its children too.
func processAttr(cred *credential, newGroup bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: newGroup, Credential: cred}
}

func terminateGroup(p *os.Process) { _ = syscall.Kill(-p.Pid, syscall.SIGTERM) }
func killGroup(p *os.Process)      { _ = syscall.Kill(-p.Pid, syscall.SIGKILL) }
func hangUpGroup(p *os.Process)    { _ = syscall.Kill(-p.Pid, syscall.SIGHUP) }

// lookPath resolves a command against the step's PATH, not the wrapper's.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable file not found in PATH (%s): %w", path, fs.ErrNotExist)
}

// defaultShell is the first shell the image has.
func defaultShell() string {
	for _, sh := range []string{"/bin/bash", "/bin/sh", "/busybox/sh"} {
		if _, err := os.Stat(sh); err == nil {
			return sh
		}
	}
	return "sh"
}
