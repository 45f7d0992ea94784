package mock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/resource"
	"github.com/porter-ci/porter/pkg/resource/mock"
)

// newMock is the mock type, not privileged whatever this test process is.
func newMock(image string) *mock.Type {
	t := mock.New(image)
	t.Privileged = func() (bool, error) { return false, nil }
	return t
}

func versions(vs ...string) []resource.Version {
	out := []resource.Version{}
	for _, v := range vs {
		out = append(out, resource.Version{"version": v})
	}
	return out
}

func check(t *testing.T, source string, version resource.Version) ([]resource.Version, error) {
	t.Helper()
	var log bytes.Buffer
	return newMock("").Check(context.Background(), resource.CheckRequest{Source: json.RawMessage(source), Version: version}, &log)
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		source  string
		version resource.Version
		want    []resource.Version
	}{
		{"default initial version", `{}`, nil, versions("mock")},
		{"initial version", `{"initial_version":"v0"}`, nil, versions("v0")},
		{"no initial version", `{"no_initial_version":true}`, nil, versions()},
		{"latest of the list", `{"versions":["a","b"]}`, nil, versions("b")},
		{"from the current version", `{"initial_version":"v0","versions":["a","b","c"]}`, resource.Version{"version": "a"}, versions("a", "b", "c")},
		{"current is latest", `{"versions":["a","b"]}`, resource.Version{"version": "b"}, versions("b")},
		// As Concourse's mock: the version given is returned, which is how
		// `fly check-resource -f version:v2` makes v2.
		{"a version not in the list", `{"versions":["a","b"]}`, resource.Version{"version": "v2"}, versions("v2")},
		{"a version given, no initial version", `{"no_initial_version":true}`, resource.Version{"version": "v2"}, versions("v2")},
		{"a version given over the default", `{}`, resource.Version{"version": "v2"}, versions("v2")},
		{"no version key", `{"initial_version":"v0"}`, resource.Version{"ref": "x"}, versions("v0")},
		{"numbers from YAML", `{"initial_version":1,"versions":[1.5,2]}`, nil, versions("2")},
		{"force version", `{"versions":["a"],"force_version":"forced"}`, resource.Version{"version": "a"}, versions("forced")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := check(t, tc.source, tc.version)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("check = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCheckFailures(t *testing.T) {
	if _, err := check(t, `{"check_failure":"im totally failing"}`, nil); err == nil || err.Error() != "intentionally failing to check: im totally failing" {
		t.Fatalf("check_failure: err = %v", err)
	}
	if _, err := check(t, `{"inital_version":"x"}`, nil); err == nil || !strings.Contains(err.Error(), `unknown field "inital_version"`) {
		t.Fatalf("typo in source: err = %v", err)
	}
	if _, err := check(t, `{"check_delay":"soon"}`, nil); err == nil || !strings.Contains(err.Error(), "soon") {
		t.Fatalf("bad duration: err = %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := newMock("").Check(ctx, resource.CheckRequest{Source: json.RawMessage(`{"check_delay":"1h"}`)}, &bytes.Buffer{})
	if err == nil || time.Since(start) > 10*time.Second {
		t.Fatalf("check_delay not cut by the context: err = %v after %s", err, time.Since(start))
	}
}

func TestCheckOutput(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := resource.Run(context.Background(), newMock(""), resource.ActionCheck, nil,
		strings.NewReader(`{"source":{"check_output":"not json {"}}`), &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if stdout.String() != "not json {" {
		t.Fatalf("stdout = %q", stdout.String())
	}
}

func TestIn(t *testing.T) {
	dir := t.TempDir()
	var log bytes.Buffer
	resp, err := newMock("porter.local/resource-mock:dev").In(context.Background(), dir, resource.InRequest{
		Source:  json.RawMessage(`{"create_files":{"a.txt":"A","sub/b.txt":"B","data.json":{"k":[1,2.50]},"vars.yml":"x: START_VARyEND_VAR"},"mirror_self":true,"log":"hello from mock","metadata":[{"name":"k","value":"v"}]}`),
		Params:  json.RawMessage(`{"create_files_via_params":{"c.txt":"C","a.txt":"A from params"}}`),
		Version: resource.Version{"version": "v1"},
	}, &log)
	if err != nil {
		t.Fatal(err)
	}
	want := resource.Response{Version: resource.Version{"version": "v1"}, Metadata: []resource.MetadataField{{Name: "k", Value: "v"}}}
	if !reflect.DeepEqual(resp, want) {
		t.Fatalf("response = %+v, want %+v", resp, want)
	}
	for name, content := range map[string]string{"version": "v1", "a.txt": "A from params", "sub/b.txt": "B", "c.txt": "C",
		"data.json": `{"k":[1,2.50]}`, "vars.yml": "x: ((y))", "repository": "porter.local/resource-mock", "tag": "dev"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(b) != content {
			t.Errorf("%s = %q, %v; want %q", name, b, err, content)
		}
	}
	if !strings.Contains(log.String(), "hello from mock") {
		t.Errorf("log = %q, want the source's log line", log.String())
	}

	_, err = newMock("").In(context.Background(), dir, resource.InRequest{
		Source: json.RawMessage(`{"create_files":{"../escape":"x"}}`), Version: resource.Version{"version": "v1"},
	}, &log)
	if err == nil || !strings.Contains(err.Error(), "leaves") {
		t.Fatalf("escaping path: err = %v", err)
	}
	_, err = newMock("").In(context.Background(), dir, resource.InRequest{
		Params: json.RawMessage(`{"fail":true}`), Version: resource.Version{"version": "v1"},
	}, &log)
	if err == nil || !strings.Contains(err.Error(), "params.fail") {
		t.Fatalf("params.fail: err = %v", err)
	}
}

func TestOut(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "out", "version"), []byte("from-file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ params, want, err string }{
		{`{"version":"v2"}`, "v2", ""},
		{`{"file":"out/version"}`, "from-file", ""},
		{`{"file":"out/missing"}`, "", "no such file"},
		{`{}`, "", "needs params.version or params.file"},
		{`{"version":"a","file":"out/version"}`, "", "both set"},
	} {
		resp, err := newMock("").Out(context.Background(), dir, resource.OutRequest{Params: json.RawMessage(tc.params)}, &bytes.Buffer{})
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("params %s: err = %v, want it to mention %q", tc.params, err, tc.err)
			}
			continue
		}
		if err != nil || resp.Version["version"] != tc.want {
			t.Errorf("params %s: version %v, err %v; want %s", tc.params, resp.Version, err, tc.want)
		}
	}
	var log bytes.Buffer
	t.Setenv("MOCK_TEST_ENV", "visible")
	if _, err := newMock("").Out(context.Background(), dir, resource.OutRequest{Params: json.RawMessage(`{"version":"x","print_env":true}`)}, &log); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "MOCK_TEST_ENV=visible") {
		t.Fatalf("print_env log = %q", log.String())
	}
}

// In a privileged container versions say so, and in writes it, as
// Concourse's mock does.
func TestPrivileged(t *testing.T) {
	priv := mock.New("")
	priv.Privileged = func() (bool, error) { return true, nil }
	ctx := context.Background()
	got, err := priv.Check(ctx, resource.CheckRequest{Source: json.RawMessage(`{}`), Version: resource.Version{"version": "v2"}}, &bytes.Buffer{})
	if want := []resource.Version{{"version": "v2", "privileged": "true"}}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("check = %v, %v; want %v", got, err, want)
	}
	dir := t.TempDir()
	resp, err := priv.In(ctx, dir, resource.InRequest{Version: resource.Version{"version": "v2", "privileged": "true"}}, &bytes.Buffer{})
	if want := (resource.Version{"version": "v2", "privileged": "true"}); err != nil || !reflect.DeepEqual(resp.Version, want) {
		t.Errorf("in = %v, %v; want the version as given, %v", resp.Version, err, want)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "privileged")); err != nil || string(b) != "true\n" {
		t.Errorf("privileged file = %q, %v", b, err)
	}
	resp, err = priv.Out(ctx, dir, resource.OutRequest{Params: json.RawMessage(`{"version":"v3"}`)}, &bytes.Buffer{})
	if want := (resource.Version{"version": "v3", "privileged": "true"}); err != nil || !reflect.DeepEqual(resp.Version, want) {
		t.Errorf("out = %v, %v; want %v", resp.Version, err, want)
	}

	priv.Privileged = func() (bool, error) { return false, errors.New("no /proc") }
	if _, err := priv.Check(ctx, resource.CheckRequest{Source: json.RawMessage(`{}`)}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "could not check privilege: no /proc") {
		t.Errorf("check without a privilege answer: %v", err)
	}
	// Not privileged: the file says false.
	if _, err := newMock("").In(ctx, dir, resource.InRequest{Version: resource.Version{"version": "v2"}}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "privileged")); err != nil || string(b) != "false\n" {
		t.Errorf("privileged file = %q, %v", b, err)
	}
}

// The real privilege check reads this process's capabilities.
func TestPrivilegeCheck(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc here")
	}
	if _, err := mock.New("").Privileged(); err != nil {
		t.Fatal(err)
	}
}
