package main

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestBuildsForWindows cross-compiles porter for Windows: a Windows worker's
// step pods run the Windows build of the sidecar and the entrypoint, and no
// Windows node is at hand to run them, so compiling is the proof kept here.
func TestBuildsForWindows(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles porter (slow); skipped with -short")
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		if goBin, err = exec.LookPath("go"); err != nil {
			t.Fatalf("no go toolchain to cross-compile with: %v", err)
		}
	}
	statSources(t, filepath.Join("..", ".."))
	out := filepath.Join(t.TempDir(), "porter.exe")
	cmd := exec.Command(goBin, "build", "-o", out, ".")
	cmd.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("GOOS=windows go build ./cmd/porter: %v\n%s", err, b)
	}
	// A PE executable starts with "MZ".
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || string(b[:2]) != "MZ" {
		t.Fatalf("%s is not a Windows executable", out)
	}
}

// statSources stats every Go file of the module and go.mod/go.sum. The go
// command's test cache then reruns this test whenever one changes: the
// Windows-only files are no part of the test binary it otherwise keys on.
func statSources(t *testing.T, root string) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".go") || d.Name() == "go.mod" || d.Name() == "go.sum") {
			_, err = os.Stat(p)
		}
		return err
	})
	if err != nil {
		t.Fatalf("list the module's sources: %v", err)
	}
}
