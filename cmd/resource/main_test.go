package main_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// buildResource builds the binary and lays it out as an image does:
// DIR/opt/resource/{check,in,out} linking to DIR/opt/resource/resource.
func buildResource(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "opt", "resource")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "resource"), ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, name := range []string{"check", "in", "out"} {
		if err := os.Symlink("resource", filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type result struct {
	stdout, stderr string
	code           int
}

func runScript(t *testing.T, script string, env []string, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(script, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %s: %v", script, err)
	}
	return result{stdout.String(), stderr.String(), code}
}

func TestProtocolThroughScripts(t *testing.T) {
	bin := buildResource(t)
	env := []string{"PORTER_RESOURCE_TYPE=mock"}

	r := runScript(t, filepath.Join(bin, "check"), env, `{"source":{"versions":["a","b","c"]},"version":{"version":"b"}}`)
	if r.code != 0 {
		t.Fatalf("check exited %d: %s", r.code, r.stderr)
	}
	var versions []map[string]string
	if err := json.Unmarshal([]byte(r.stdout), &versions); err != nil {
		t.Fatalf("check stdout %q: %v", r.stdout, err)
	}
	if len(versions) != 2 || versions[0]["version"] != "b" || versions[1]["version"] != "c" {
		t.Fatalf("check versions = %v", versions)
	}

	dest := t.TempDir()
	r = runScript(t, filepath.Join(bin, "in"), env, `{"source":{"create_files":{"hello":"world"},"metadata":[{"name":"m","value":"1"}]},"version":{"version":"c"}}`, dest)
	if r.code != 0 {
		t.Fatalf("in exited %d: %s", r.code, r.stderr)
	}
	var resp struct {
		Version  map[string]string   `json:"version"`
		Metadata []map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &resp); err != nil {
		t.Fatalf("in stdout %q: %v", r.stdout, err)
	}
	if resp.Version["version"] != "c" || len(resp.Metadata) != 1 || resp.Metadata[0]["name"] != "m" {
		t.Fatalf("in response = %+v", resp)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "hello")); string(b) != "world" {
		t.Fatalf("in wrote hello = %q", b)
	}

	// params.file is relative to the put's directory, where inputs are named dirs.
	r = runScript(t, filepath.Join(bin, "out"), env, `{"source":{},"params":{"file":"`+filepath.Base(dest)+`/version"}}`, filepath.Dir(dest))
	if r.code != 0 || !strings.Contains(r.stdout, `"version":"c"`) {
		t.Fatalf("out: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}

	// Failures exit non-zero with the reason on stderr and nothing on stdout.
	r = runScript(t, filepath.Join(bin, "check"), env, `{"source":{"check_failure":"boom"}}`)
	if r.code == 0 || !strings.Contains(r.stderr, "boom") || r.stdout != "" {
		t.Fatalf("failing check: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runScript(t, filepath.Join(bin, "in"), env, `{"source":{},"version":{"version":"x"}}`)
	if r.code == 0 || !strings.Contains(r.stderr, "want exactly one argument") {
		t.Fatalf("in without a directory: exit %d stderr %q", r.code, r.stderr)
	}
	r = runScript(t, filepath.Join(bin, "check"), []string{"PORTER_RESOURCE_TYPE=nope"}, `{}`)
	if r.code == 0 || !strings.Contains(r.stderr, `unknown resource type "nope"`) {
		t.Fatalf("unknown type: exit %d stderr %q", r.code, r.stderr)
	}
	r = runScript(t, filepath.Join(bin, "check"), env, `not json`)
	if r.code == 0 || !strings.Contains(r.stderr, "decode request") {
		t.Fatalf("bad request: exit %d stderr %q", r.code, r.stderr)
	}
	// By its own name, the action is the first argument and -type overrides the env.
	// (Run privileged, as a test run by root may be, the mock says so in
	// its versions, as Concourse's.)
	r = runScript(t, filepath.Join(bin, "resource"), []string{"PORTER_RESOURCE_TYPE=nope"}, `{"source":{}}`, "-type", "mock", "check")
	versions = nil
	if err := json.Unmarshal([]byte(r.stdout), &versions); r.code != 0 || err != nil || len(versions) != 1 || versions[0]["version"] != "mock" {
		t.Fatalf("resource -type mock check: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
}

// The registry-image type through the scripts, against a real in-process registry.
func TestRegistryImageThroughScripts(t *testing.T) {
	bin := buildResource(t)
	env := []string{"PORTER_RESOURCE_TYPE=registry-image"}
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	repo := strings.TrimPrefix(reg.URL, "http://") + "/app"
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewTag(repo+":dev", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	source := `{"repository":"` + repo + `","tag":"dev","insecure":true}`

	r := runScript(t, filepath.Join(bin, "check"), env, `{"source":`+source+`}`)
	if r.code != 0 || strings.TrimSpace(r.stdout) != `[{"digest":"`+digest.String()+`"}]` {
		t.Fatalf("check: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	dest := t.TempDir()
	r = runScript(t, filepath.Join(bin, "in"), env, `{"source":`+source+`,"version":{"digest":"`+digest.String()+`"}}`, dest)
	if r.code != 0 {
		t.Fatalf("in: exit %d stderr %q", r.code, r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "digest")); string(b) != digest.String() {
		t.Fatalf("digest file = %q", b)
	}
}
