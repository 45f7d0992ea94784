//go:build !windows

package sidecar

import (
	"os"
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
