package resource_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/resource"
)

// echo is a minimal type: check returns the request's version, in and out
// return params.version (which may be missing).
type echo struct{}

func (echo) Check(_ context.Context, req resource.CheckRequest, _ io.Writer) ([]resource.Version, error) {
	if req.Version == nil {
		return nil, nil
	}
	return []resource.Version{req.Version}, nil
}

func (echo) In(_ context.Context, dir string, req resource.InRequest, _ io.Writer) (resource.Response, error) {
	return resource.Response{Version: req.Version}, os.WriteFile(filepath.Join(dir, "here"), nil, 0o644)
}

func (echo) Out(_ context.Context, _ string, req resource.OutRequest, _ io.Writer) (resource.Response, error) {
	var p struct {
		Version resource.Version `json:"version"`
	}
	err := resource.Decode("params", req.Params, &p)
	return resource.Response{Version: p.Version}, err
}

func run(t *testing.T, action, stdin string, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := resource.Run(context.Background(), echo{}, action, args, strings.NewReader(stdin), &stdout, &stderr)
	return stdout.String(), err
}

func TestRun(t *testing.T) {
	if out, err := run(t, "check", `{"source":{}}`); err != nil || strings.TrimSpace(out) != "[]" {
		t.Fatalf("check without versions = %q, %v; want []", out, err)
	}
	if out, err := run(t, "check", `{"source":{},"version":{"v":"1"}}`); err != nil || strings.TrimSpace(out) != `[{"v":"1"}]` {
		t.Fatalf("check = %q, %v", out, err)
	}
	dir := filepath.Join(t.TempDir(), "new")
	out, err := run(t, "in", `{"source":{},"version":{"v":"2"}}`, dir)
	if err != nil {
		t.Fatal(err)
	}
	var resp resource.Response
	if err := json.Unmarshal([]byte(out), &resp); err != nil || resp.Version["v"] != "2" {
		t.Fatalf("in = %q, %v", out, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "here")); err != nil {
		t.Fatalf("in did not get its directory created: %v", err)
	}
	for _, tc := range []struct{ action, stdin, want string }{
		{"out", `{"source":{},"params":{}}`, "produced no version"},
		{"out", `{"source":{},"params":{"verison":{}}}`, `unknown field "verison"`},
		{"check", ``, "empty request"},
		{"check", `[1]`, "decode request"},
		{"destroy", `{}`, `unknown action "destroy"`},
	} {
		if _, err := run(t, tc.action, tc.stdin, t.TempDir()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: err = %v, want it to mention %q", tc.action, tc.stdin, err, tc.want)
		}
	}
	if _, err := run(t, "in", `{"source":{},"version":{"v":"1"}}`); err == nil || !strings.Contains(err.Error(), "exactly one argument") {
		t.Fatalf("in without a directory: err = %v", err)
	}
}

func TestJoinInside(t *testing.T) {
	if p, err := resource.JoinInside("/d", "a/../b"); err != nil || p != "/d/b" {
		t.Fatalf("JoinInside(a/../b) = %q, %v", p, err)
	}
	for _, bad := range []string{"", "/etc/passwd", "..", "../x", "a/../../x"} {
		if _, err := resource.JoinInside("/d", bad); err == nil {
			t.Errorf("JoinInside(%q) succeeded", bad)
		}
	}
}
