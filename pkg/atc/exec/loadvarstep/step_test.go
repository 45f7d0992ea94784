package loadvarstep

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/concourse"
)

// fake is the build the step runs in: what it reports, its artifacts'
// files, its local vars and what it redacts.
type fake struct {
	lines    []string
	files    map[string]string
	locals   map[string]any
	redacted []string
}

func (f *fake) add(format string, args ...any) {
	f.lines = append(f.lines, fmt.Sprintf(format, args...))
}

func (f *fake) Initializing()     { f.add("initializing") }
func (f *fake) Starting()         { f.add("starting") }
func (f *fake) Stdout(msg string) { f.add("stdout %s", msg) }

func (f *fake) Finished(_ context.Context, succeeded bool) (bool, error) {
	f.add("finished %v", succeeded)
	return succeeded, nil
}

func (f *fake) Errored(_ context.Context, err error) (bool, error) {
	f.add("errored %v", err)
	return false, err
}

func (f *fake) ReadArtifactFile(_ context.Context, what, file string) ([]byte, error) {
	body, ok := f.files[file]
	if !ok {
		return nil, fmt.Errorf("%s: file %s: not found", what, file)
	}
	return []byte(body), nil
}

func (f *fake) SetVar(_ context.Context, name string, value any) { f.locals[name] = value }

func (f *fake) Redact(secrets []string) { f.redacted = append(f.redacted, secrets...) }

func newFake() *fake {
	return &fake{files: map[string]string{"a/v.txt": " s3cret \n", "a/bad.json": "{"}, locals: map[string]any{}}
}

func (f *fake) step(lv concourse.LoadVarPlan, quiet bool) Step {
	return Step{Plan: &lv, Quiet: quiet, Delegate: f, End: f, Files: f, Locals: f, Redactor: f}
}

func TestLoadVarSetsARedactedVar(t *testing.T) {
	f := newFake()
	ok, err := f.step(concourse.LoadVarPlan{Name: "v", File: "a/v.txt"}, false).Run(context.Background())
	if !ok || err != nil {
		t.Fatalf("run: %v, %v", ok, err)
	}
	want := []string{"initializing", "starting", "stdout var v fetched.\n", "stdout added var v to build.\n", "finished true"}
	if !reflect.DeepEqual(f.lines, want) {
		t.Errorf("reported %q, want %q", f.lines, want)
	}
	if f.locals["v"] != "s3cret" || !reflect.DeepEqual(f.redacted, []string{"s3cret"}) {
		t.Errorf("locals %v, redacted %q", f.locals, f.redacted)
	}
}

func TestLoadVarAgainIsQuietAndRevealed(t *testing.T) {
	f := newFake()
	ok, err := f.step(concourse.LoadVarPlan{Name: "v", File: "a/v.txt", Reveal: true}, true).Run(context.Background())
	if !ok || err != nil || len(f.lines) != 0 || len(f.redacted) != 0 || f.locals["v"] != "s3cret" {
		t.Errorf("run: %v, %v; reported %q, redacted %q, locals %v", ok, err, f.lines, f.redacted, f.locals)
	}
}

func TestLoadVarErrors(t *testing.T) {
	for _, tc := range []struct {
		file, want string
	}{
		{"a/none.txt", "load_var v: file a/none.txt: not found"},
		{"a/bad.json", "load_var v: file a/bad.json: invalid json"},
	} {
		f := newFake()
		ok, err := f.step(concourse.LoadVarPlan{Name: "v", File: tc.file}, false).Run(context.Background())
		if ok || err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v, %v; want %q", tc.file, ok, err, tc.want)
		}
		if last := f.lines[len(f.lines)-1]; !strings.HasPrefix(last, "errored "+tc.want) || len(f.locals) != 0 {
			t.Errorf("%s: reported %q, locals %v", tc.file, f.lines, f.locals)
		}
	}
}
