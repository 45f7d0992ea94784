// Package buildshare holds the test that keeps hack/k8s-shared-modules.txt
// current: the modules Porter's commands compile with client-go, at the
// versions Porter's go.mod selects. hack/build-tools.sh makes the local
// cluster's Kubernetes build require the same versions, so that the two
// builds share their compiled packages in Go's build cache.
package buildshare

import (
	"flag"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const listFile = "../../hack/k8s-shared-modules.txt"

// update writes the list instead of checking it (`make generate` runs the
// test so).
var update = flag.Bool("update", false, "write hack/k8s-shared-modules.txt from go.mod")

func goList(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	return string(out)
}

// sharedModules is the list: the modules of every package the k8s.io
// packages Porter's commands import depend on, but k8s.io/api,
// apimachinery and client-go, which the Kubernetes build pins to its own
// release.
func sharedModules(t *testing.T) string {
	var k8s []string
	for _, pkg := range strings.Fields(goList(t, "-deps", "./cmd/...")) {
		if strings.HasPrefix(pkg, "k8s.io/") {
			k8s = append(k8s, pkg)
		}
	}
	seen := map[string]bool{}
	var lines []string
	for _, line := range strings.Split(goList(t, append([]string{"-deps", "-f", "{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}}{{end}}{{end}}"}, k8s...)...), "\n") {
		path, _, _ := strings.Cut(line, " ")
		if line == "" || seen[line] || path == "k8s.io/api" || path == "k8s.io/apimachinery" || path == "k8s.io/client-go" {
			continue
		}
		seen[line] = true
		lines = append(lines, line)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}

func TestSharedModulesListIsCurrent(t *testing.T) {
	want := sharedModules(t)
	if *update {
		if err := os.WriteFile(listFile, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(listFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("hack/k8s-shared-modules.txt is not what go.mod selects (run make generate; the next tool build then rebuilds Kubernetes once):\n--- the file\n%s--- go.mod's\n%s", got, want)
	}
}
