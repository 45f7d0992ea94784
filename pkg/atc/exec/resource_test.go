package exec

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/atc/exec/stepplan"
	"github.com/porter-ci/porter/pkg/concourse"
)

func TestDetectInputs(t *testing.T) {
	params := map[string]any{
		"file":    "built/app.tgz",
		"options": map[string]any{"notes": "release-notes/notes.md", "n": 3},
		"list":    []any{"repo", "./x", "../y", "built/other"},
	}
	var got []string
	stepplan.DetectInputs(params, func(name string) { got = append(got, name) })
	want := []string{"built", "repo", "built", "release-notes"}
	if !slices.Equal(got, want) {
		t.Fatalf("detectInputs = %v, want %v", got, want)
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
		err := stepplan.ValidateResource(&tc.plan)
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

func TestResourceImage(t *testing.T) {
	x := &RunState{r: &Runner{cfg: Config{BaseResourceTypes: map[string]string{"git": "example.com/git:1"}}}}
	pinned := func(typ string, source map[string]any, version map[string]string) concourse.TypeImage {
		return concourse.TypeImage{GetPlan: &concourse.Plan{ID: "i", Get: &concourse.GetPlan{Name: "image", Type: typ, Source: source, Version: version}}}
	}
	for _, tc := range []struct {
		name  string
		image concourse.TypeImage
		want  string
		err   string
	}{
		{"base type", concourse.TypeImage{BaseType: "git"}, "example.com/git:1", ""},
		{"unknown base type", concourse.TypeImage{BaseType: "s3"}, "", `resource type "s3": this server has no image for it (known base types: git;`},
		{"custom type from a registry", pinned("registry-image", map[string]any{"repository": "example.com/my-type"}, map[string]string{"digest": "sha256:abc"}),
			"example.com/my-type@sha256:abc", ""},
		{"custom type from another kind of resource", pinned("mock", map[string]any{}, map[string]string{"version": "1"}),
			"", `its image comes from a "mock" resource, but only registry-image-like types`},
		{"no image at all", concourse.TypeImage{}, "", "has no image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := x.resourceImage(t.Context(), resourceStep{typ: "my-type", image: tc.image})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("resourceImage = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// A pod declared ahead for a get is withdrawn at its turn only when the
// resource cache holds its version by then, looked up by the image given.
func TestStillWantedWithdrawsOnlyACachedGet(t *testing.T) {
	ok := func() (map[string]any, error) { return map[string]any{}, nil }
	var looked []string
	cache := func(hit bool) resourceRun {
		return resourceRun{cache: func(image string) (bool, error) { looked = append(looked, image); return hit, nil }}
	}
	for _, tc := range []struct {
		name    string
		run     resourceRun
		request func() (map[string]any, error)
		want    string
	}{
		{"a put (no cache)", resourceRun{}, ok, ""},
		{"a get whose version is not cached", cache(false), ok, ""},
		{"a get whose version was cached since", cache(true), ok, "its version was in the resource cache at its turn"},
		{"a get whose request fails now keeps the pod it was declared with", cache(true),
			func() (map[string]any, error) { return nil, errors.New("var gone") }, ""},
	} {
		if got := tc.run.stillWanted(tc.request)("own-image"); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if len(looked) != 2 || looked[0] != "own-image" {
		t.Errorf("cache looked up with %v, want twice with the image given", looked)
	}
}
