package atc

import (
	"slices"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/concourse"
)

func TestDetectInputs(t *testing.T) {
	params := map[string]any{
		"file":    "built/app.tgz",
		"options": map[string]any{"notes": "release-notes/notes.md", "n": 3},
		"list":    []any{"repo", "./x", "../y", "built/other"},
	}
	var got []string
	detectInputs(params, func(name string) { got = append(got, name) })
	want := []string{"built", "repo", "built", "release-notes"}
	if !slices.Equal(got, want) {
		t.Fatalf("detectInputs = %v, want %v", got, want)
	}
}

func TestParseBaseResourceTypes(t *testing.T) {
	types, err := ParseBaseResourceTypes([]string{"git=example.com/git:1", "s3=example.com/s3:2"})
	if err != nil {
		t.Fatal(err)
	}
	if types["git"] != "example.com/git:1" || types["s3"] != "example.com/s3:2" || types["mock"] != "porter.local/resource-mock:dev" {
		t.Fatalf("types = %v", types)
	}
	if _, err := ParseBaseResourceTypes([]string{"git"}); err == nil || !strings.Contains(err.Error(), "want NAME=IMAGE") {
		t.Fatalf("err = %v", err)
	}
}

func TestValidateResourceStep(t *testing.T) {
	base := concourse.TypeImage{BaseType: "mock"}
	for _, tc := range []struct {
		plan concourse.Plan
		want string
	}{
		{concourse.Plan{Get: &concourse.GetPlan{Name: "r", TypeImage: base}}, `get "r" has no version`},
		{concourse.Plan{Put: &concourse.PutPlan{Name: "r"}}, `put "r": its resource type has no image`},
		{concourse.Plan{Check: &concourse.CheckPlan{Name: "r", TypeImage: base, Timeout: "soon"}}, `check "r": timeout`},
		{concourse.Plan{Check: &concourse.CheckPlan{TypeImage: base}}, "a check step has no name"},
		{concourse.Plan{Get: &concourse.GetPlan{Name: "r", TypeImage: base, Version: map[string]string{"v": "1"}}}, ""},
	} {
		err := validateResourceStep(&tc.plan)
		if tc.want == "" {
			if err != nil {
				t.Errorf("unexpected error %v", err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want it to contain %q", err, tc.want)
		}
	}
}
