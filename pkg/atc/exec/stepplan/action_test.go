package stepplan

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/concourse"
)

func TestResourceAction(t *testing.T) {
	id := Identity{Build: action.Build{ID: "12", Name: "3", Team: "main"}, BuildID: 12}
	for kind, want := range map[concourse.StepKind]struct{ path, dir string }{
		concourse.KindCheck: {"/opt/resource/check", "/tmp/build/check"},
		concourse.KindGet:   {"/opt/resource/in", "/tmp/build"},
		concourse.KindPut:   {"/opt/resource/out", "/tmp/build/put"},
	} {
		a, err := ResourceAction(id, Resource{Kind: kind, Name: "Repo", Image: "git@sha256:" + strings.Repeat("a", 64)})
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if a.Run.Path != want.path || a.WorkDir != want.dir || !a.StdinSecret || a.Type != action.Kind(kind) ||
			!strings.HasPrefix(a.StepID, "b12-repo-") {
			t.Errorf("%s: %+v", kind, a)
		}
	}
	if _, err := ResourceAction(id, Resource{Kind: concourse.KindTask, Name: "t"}); err == nil {
		t.Error("a task made a resource action")
	}
}

func TestPutInputs(t *testing.T) {
	all := map[string]api.ArtifactRef{"a": {Key: "ka"}, "b": {Key: "kb"}, "c": {Key: "kc"}}
	names := func(in []action.Input) []string {
		var out []string
		for _, i := range in {
			out = append(out, i.Name)
		}
		return out
	}
	for raw, want := range map[string][]string{
		`"all"`:     {"a", "b", "c"},
		`["c","a"]`: {"a", "c"},
		``:          {"b"}, // detect: the params name b
	} {
		pp := &concourse.PutPlan{Name: "p", Inputs: json.RawMessage(raw), Params: map[string]any{"file": "b/version"}}
		got, err := PutInputs(pp, all)
		if err != nil || !slices.Equal(names(got), want) {
			t.Errorf("inputs %s: %v %v, want %v", raw, names(got), err, want)
		}
	}
	_, err := PutInputs(&concourse.PutPlan{Name: "p", Inputs: json.RawMessage(`["z"]`)}, all)
	if err == nil || !strings.Contains(err.Error(), "missing inputs: z") {
		t.Errorf("err %v", err)
	}
}
