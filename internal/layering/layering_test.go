// Package layering holds the test that keeps the server's parts in their
// layers (shared/DESIGN.md, "The server's inside"): the HTTP API above
// the engine, the engine above the steps, the steps above the runtime, and
// the step runtime knowing nothing of pipelines.
package layering

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/porter-ci/porter/"

// rules: the packages matching a pattern (a trailing "/..." takes the
// subpackages too) must not import, directly or not, any package of
// forbidden.
var rules = []struct {
	pkgs, why string
	forbidden []string
}{
	{"pkg/action", "the step runtime knows nothing of pipelines or the server",
		[]string{"pkg/atc/...", "pkg/pipeline", "pkg/concourse", "pkg/db/...", "pkg/scheduler"}},
	{"pkg/podspec", "the step runtime knows nothing of pipelines or the server",
		[]string{"pkg/atc/...", "pkg/pipeline", "pkg/concourse", "pkg/db/...", "pkg/scheduler"}},
	{"pkg/sidecar/...", "the step runtime knows nothing of pipelines or the server",
		[]string{"pkg/atc/...", "pkg/pipeline", "pkg/concourse", "pkg/db/...", "pkg/scheduler"}},
	{"pkg/sidecar/entrypoint", "the entrypoint (main container) obeys the sidecar only over the control protocol (controlpb), never by importing the coordinator",
		[]string{"pkg/sidecar"}},
	{"pkg/stepserver", "the step runtime knows nothing of pipelines or the server",
		[]string{"pkg/atc/...", "pkg/pipeline", "pkg/concourse", "pkg/db/...", "pkg/scheduler"}},
	{"pkg/podwatch", "the step runtime knows nothing of pipelines or the server",
		[]string{"pkg/atc/...", "pkg/pipeline", "pkg/concourse", "pkg/db/...", "pkg/scheduler"}},
	{"pkg/atc/exec/...", "the steps reach the engine, the API and the pods only through interfaces",
		[]string{"pkg/atc", "pkg/atc/apiserver/...", "pkg/atc/kuberuntime", "pkg/stepserver"}},
	{"pkg/atc", "the engine knows nothing of the HTTP API or the web UI: the composition root (cmd/atc-porter-runtime) puts them over it",
		[]string{"pkg/atc/apiserver/...", "pkg/atc/webui"}},
	{"pkg/atc/apiserver/...", "the API sees the engine and the steps only through its Engine interface",
		[]string{"pkg/atc", "pkg/atc/exec/...", "pkg/atc/kuberuntime"}},
	{"pkg/atc/kuberuntime", "the runtime runs pods, not plans",
		[]string{"pkg/atc", "pkg/atc/exec/...", "pkg/atc/apiserver/...", "pkg/pipeline"}},
	{"pkg/db/...", "the store is below everything that uses it",
		[]string{"pkg/atc/...", "pkg/scheduler", "pkg/auth"}},
}

// direct: packages whose own imports (not their dependencies') must not
// include these.
var direct = []struct {
	pkg, why  string
	forbidden []string
}{
	{"pkg/atc/exec", "steps report through their delegates, never into a build's log",
		[]string{"pkg/atc/buildlog"}},
}

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.Fields(string(out))
}

func matches(pattern, pkg string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pkg == pattern
}

func TestLayering(t *testing.T) {
	for _, r := range rules {
		for _, pkg := range goList(t, "../../"+r.pkgs) {
			for _, dep := range goList(t, "-deps", pkg) {
				dep, ok := strings.CutPrefix(dep, module)
				if !ok {
					continue
				}
				for _, f := range r.forbidden {
					if matches(f, dep) {
						t.Errorf("%s imports %s: %s", strings.TrimPrefix(pkg, module), dep, r.why)
					}
				}
			}
		}
	}
	for _, d := range direct {
		for _, imp := range goList(t, "-f", `{{join .Imports " "}}`, "../../"+d.pkg) {
			for _, f := range d.forbidden {
				if imp == module+f {
					t.Errorf("%s imports %s: %s", d.pkg, f, d.why)
				}
			}
		}
	}
}

// maxPackageLines bounds a package's non-test lines: a package past it
// holds more than one idea (issue "The engine in Concourse's shape").
const maxPackageLines = 3000

// TestPackagesStaySmall counts each package's non-test lines as the
// closing notes do (`ls DIR/*.go | grep -v _test.go | xargs cat | wc -l`).
func TestPackagesStaySmall(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dir := range strings.Fields(string(out)) {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		lines := 0
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			body, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			lines += bytes.Count(body, []byte("\n"))
		}
		if lines > maxPackageLines {
			t.Errorf("%s has %d non-test lines, over %d: split it by idea", dir, lines, maxPackageLines)
		}
	}
}
