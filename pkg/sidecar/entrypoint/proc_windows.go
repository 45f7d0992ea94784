package entrypoint

import (
	"errors"
	"os"
	"syscall"
)

// credential is empty on Windows: a step switches user through the pod's
// securityContext.windowsOptions.runAsUserName, not inside the container.
type credential struct{}

func lookupUser(spec string) (*credential, string, error) {
	if spec == "" {
		return nil, "", nil
	}
	return nil, "", errors.New("run.user " + spec + ": switching user is not supported on Windows workers")
}

// processAttr has no process groups to offer: Windows would need a job
// object to stop a process's children with it, which porter does not use
// yet. Stopping a step kills its process only; children may outlive it
// until the container ends.
func processAttr(*credential, bool) *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

// Windows has no TERM or HUP for a console process in a container: every
// stop is a kill.
func terminateGroup(p *os.Process) { _ = p.Kill() }
func killGroup(p *os.Process)      { _ = p.Kill() }
func hangUpGroup(p *os.Process)    { _ = p.Kill() }

// lookPath resolves a command against the step's PATH, not the wrapper's.
func lookPath(name string, env []string) (string, error) {
	return windowsLookPath(name, env, func(p string) bool {
		fi, err := os.Stat(p)
		return err == nil && fi.Mode().IsRegular()
	})
}

// defaultShell is what an intercept runs without a command: every Windows
// image has cmd.exe.
func defaultShell() string { return "cmd.exe" }
