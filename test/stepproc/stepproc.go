// Package stepproc runs a step's in-pod processes on this machine the way a
// pod runs them: `porter entrypoint` and `porter sidecar` as real processes
// sharing directories as a pod's containers share emptyDir volumes. Used by
// the in-pod suite and the sidecar benchmark.
package stepproc

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/blobstore"
)

// BuildPorter compiles cmd/porter into dir and returns the binary's path.
func BuildPorter(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "porter")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/porter-ci/porter/cmd/porter")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build porter: %w\n%s", err, out)
	}
	return bin, nil
}

// Options describe one step run.
type Options struct {
	Porter     string
	Action     *action.Action
	ATCAddress string
	Token      string
	Blobstore  blobstore.Config
	// Root holds the shared porter directory (control socket, journal).
	Root string
	// EntrypointEnv is added to the main container's environment.
	EntrypointEnv []string
	// Outputs of the two processes.
	Stdout, Stderr, SidecarLog io.Writer
}

// Step is a running step.
type Step struct {
	Sidecar, Entrypoint *exec.Cmd
	// SidecarDone and EntrypointDone are closed when each process has exited.
	SidecarDone, EntrypointDone chan struct{}
}

// BlobstoreEnv is the sidecar environment that points it at a store.
func BlobstoreEnv(c blobstore.Config) []string {
	return []string{
		"PORTER_BLOBSTORE_DRIVER=" + c.Driver,
		"PORTER_BLOBSTORE_ENDPOINT=" + c.Endpoint,
		"PORTER_BLOBSTORE_BUCKET=" + c.Bucket,
		"PORTER_BLOBSTORE_REGION=" + c.Region,
		"PORTER_BLOBSTORE_ACCESS_KEY=" + c.AccessKey,
		"PORTER_BLOBSTORE_SECRET_KEY=" + c.SecretKey,
		fmt.Sprintf("PORTER_BLOBSTORE_SECURE=%t", c.Secure),
	}
}

// Start starts the entrypoint first (a main container may well start before
// its sidecar is ready), then the sidecar.
func Start(o Options) (*Step, error) {
	actionJSON, err := o.Action.Encode()
	if err != nil {
		return nil, err
	}
	socket := filepath.Join(o.Root, "porter", "run", "control.sock")
	s := &Step{SidecarDone: make(chan struct{}), EntrypointDone: make(chan struct{})}

	s.Sidecar = exec.Command(o.Porter, "sidecar")
	s.Sidecar.Env = append(append(os.Environ(), BlobstoreEnv(o.Blobstore)...),
		action.EnvVar+"="+string(actionJSON),
		"PORTER_ATC_ADDRESS="+o.ATCAddress,
		"PORTER_STEP_TOKEN="+o.Token,
		"PORTER_SOCKET="+socket,
		"PORTER_POD_NAME=pod-"+o.Action.StepID,
		// In a pod the journal has a volume of its own; here it stays under
		// Root, which the caller removes, instead of the system's /tmp.
		"PORTER_JOURNAL_DIR="+filepath.Join(o.Root, "porter", "journal"),
	)
	s.Sidecar.Stdout, s.Sidecar.Stderr = o.SidecarLog, o.SidecarLog
	s.Sidecar.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	argv := append([]string{"entrypoint", "--socket", socket, "--", o.Action.Run.Path}, o.Action.Run.Args...)
	s.Entrypoint = exec.Command(o.Porter, argv...)
	s.Entrypoint.Env = append(os.Environ(), o.EntrypointEnv...)
	s.Entrypoint.Stdout, s.Entrypoint.Stderr = o.Stdout, o.Stderr
	s.Entrypoint.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	if err := s.Entrypoint.Start(); err != nil {
		return nil, fmt.Errorf("start entrypoint: %w", err)
	}
	go func() { s.Entrypoint.Wait(); close(s.EntrypointDone) }()
	if err := s.Sidecar.Start(); err != nil {
		syscall.Kill(-s.Entrypoint.Process.Pid, syscall.SIGKILL)
		<-s.EntrypointDone
		return nil, fmt.Errorf("start sidecar: %w", err)
	}
	go func() { s.Sidecar.Wait(); close(s.SidecarDone) }()
	return s, nil
}

// Kill ends whatever is left of the step and waits for it.
func (s *Step) Kill() {
	for _, c := range []struct {
		cmd  *exec.Cmd
		done chan struct{}
	}{{s.Entrypoint, s.EntrypointDone}, {s.Sidecar, s.SidecarDone}} {
		select {
		case <-c.done:
		default:
			syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			<-c.done
		}
	}
}
