package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/sidecar"
	"github.com/porter-ci/porter/pkg/sidecar/entrypoint"
)

// fakeRun runs porter ARGS... with its work recorded instead of done.
type fakeRun struct {
	installed  []string
	sidecars   int
	entrypoint *entrypoint.EntrypointConfig
	stdout     bytes.Buffer
	stderr     bytes.Buffer
}

func (f *fakeRun) run(args ...string) int {
	return run(context.Background(), args, commands{
		install: func(dir string) error {
			f.installed = append(f.installed, dir)
			if dir == "/unwritable" {
				return errors.New("permission denied")
			}
			return nil
		},
		sidecar: func(context.Context, *slog.Logger) error { f.sidecars++; return nil },
		entrypoint: func(_ context.Context, cfg entrypoint.EntrypointConfig) int {
			f.entrypoint = &cfg
			return 42
		},
		stdout: &f.stdout,
		stderr: &f.stderr,
	})
}

// The command lines of a step pod (pkg/podspec): the postStart hook, the
// sidecar and the main container.
func TestPodCommandLines(t *testing.T) {
	var f fakeRun
	if code := f.run("install", podspec.PorterBinDir); code != 0 || !slices.Equal(f.installed, []string{podspec.PorterBinDir}) {
		t.Errorf("install: exit %d installed %q stderr %q", code, f.installed, f.stderr.String())
	}
	if code := f.run("install", podspec.WindowsPorterBinDir); code != 0 || f.installed[1] != podspec.WindowsPorterBinDir {
		t.Errorf("install (windows): exit %d installed %q", code, f.installed)
	}
	if code := f.run("sidecar"); code != 0 || f.sidecars != 1 {
		t.Errorf("sidecar: exit %d runs %d stderr %q", code, f.sidecars, f.stderr.String())
	}
	// Everything after "--" is the step's, flags and "--" included; its
	// exit status is porter's.
	argv := []string{"sh", "-c", "echo $$HOME", "--socket", "x", "--", "-h", "--help", "install", "version"}
	t.Setenv("PORTER_SOCKET", "")
	if code := f.run(append([]string{"entrypoint", "--"}, argv...)...); code != 42 || f.entrypoint == nil ||
		!slices.Equal(f.entrypoint.Argv, argv) || f.entrypoint.SocketPath != defaultSocket {
		t.Errorf("entrypoint: exit %d config %+v stderr %q", code, f.entrypoint, f.stderr.String())
	}
}

func TestEntrypointSocket(t *testing.T) {
	for _, args := range [][]string{
		{"entrypoint", "--socket", "/s", "--", "ls", "-l"},
		{"entrypoint", "--socket=/s", "--", "ls", "-l"},
		// Flags end at the step's command even without "--".
		{"entrypoint", "--socket", "/s", "ls", "-l"},
	} {
		var f fakeRun
		if code := f.run(args...); code != 42 || f.entrypoint.SocketPath != "/s" || !slices.Equal(f.entrypoint.Argv, []string{"ls", "-l"}) {
			t.Errorf("%q: exit %d config %+v stderr %q", args, code, f.entrypoint, f.stderr.String())
		}
	}
	t.Setenv("PORTER_SOCKET", "/from-env")
	var f fakeRun
	if f.run("entrypoint", "--", "true"); f.entrypoint.SocketPath != "/from-env" {
		t.Errorf("socket %q, want PORTER_SOCKET's", f.entrypoint.SocketPath)
	}
}

func TestWrongCommandLinesExit2(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"install"},
		{"install", "a", "b"},
		{"bogus"},
		{"sidecar", "extra"},
		{"entrypoint", "--no-such-flag", "--", "true"},
	} {
		var f fakeRun
		code := f.run(args...)
		if code != 2 || !strings.Contains(f.stderr.String(), "usage:") || len(f.installed)+f.sidecars > 0 || f.entrypoint != nil {
			t.Errorf("%q: exit %d stderr %q", args, code, f.stderr.String())
		}
	}
}

func TestInstallFailureExits1(t *testing.T) {
	var f fakeRun
	if code := f.run("install", "/unwritable"); code != 1 || !strings.Contains(f.stderr.String(), "porter install: permission denied") {
		t.Errorf("exit %d stderr %q", code, f.stderr.String())
	}
}

func TestVersion(t *testing.T) {
	var f fakeRun
	if code := f.run("version"); code != 0 || f.stdout.String() != sidecar.Version+"\n" {
		t.Errorf("exit %d stdout %q", code, f.stdout.String())
	}
}
