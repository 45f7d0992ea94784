package resourceimage

import (
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/concourse"
)

func TestKnownAndNeedsCheck(t *testing.T) {
	im := Images{"git": "example.com/git:1", "mock": "example.com/mock:1"}
	check := func(typ string, source map[string]any) *concourse.Plan {
		return &concourse.Plan{ID: "c", Check: &concourse.CheckPlan{Name: "image", Type: typ, Source: source, TypeImage: concourse.TypeImage{BaseType: typ}}}
	}
	get := func(version map[string]string) *concourse.Plan {
		return &concourse.Plan{ID: "g", Get: &concourse.GetPlan{Name: "image", Type: "registry-image", Source: map[string]any{"repository": "r"}, Version: version}}
	}
	for _, tc := range []struct {
		name       string
		ti         concourse.TypeImage
		image      string
		known      bool
		err        string
		needsCheck bool
	}{
		{name: "base type", ti: concourse.TypeImage{BaseType: "git"}, image: "example.com/git:1", known: true},
		{name: "unknown base type", ti: concourse.TypeImage{BaseType: "s3"}, known: true,
			err: `resource type "s3": this server has no image for it (known base types: git, mock;`},
		{name: "a mock mirroring itself", ti: concourse.TypeImage{BaseType: "mock", CheckPlan: check("mock", map[string]any{"mirror_self": true})},
			image: "example.com/mock:1", known: true},
		{name: "a type checked at its turn", ti: concourse.TypeImage{BaseType: "registry-image",
			CheckPlan: check("registry-image", map[string]any{"repository": "r"}), GetPlan: get(nil)}, needsCheck: true},
		{name: "a type whose get names its version", ti: concourse.TypeImage{BaseType: "registry-image",
			CheckPlan: check("registry-image", map[string]any{"repository": "r"}), GetPlan: get(map[string]string{"digest": "sha256:1"})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			image, known, err := im.Known(tc.ti)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if image != tc.image || known != tc.known {
				t.Errorf("Known = %q, %v; want %q, %v", image, known, tc.image, tc.known)
			}
			if got := im.NeedsCheck(tc.ti); got != tc.needsCheck {
				t.Errorf("NeedsCheck = %v, want %v", got, tc.needsCheck)
			}
		})
	}
}

func TestNilImagesAreTheDefaults(t *testing.T) {
	image, ok := Images(nil).Mock()
	if !ok || image != "porter.local/resource-mock:dev" {
		t.Fatalf("Mock = %q, %v", image, ok)
	}
}

func TestPinned(t *testing.T) {
	got, err := Pinned("my-type", "registry-image", map[string]any{"repository": "example.com/t"}, map[string]string{"digest": "sha256:ab"})
	if err != nil || got != "example.com/t@sha256:ab" {
		t.Fatalf("Pinned = %q, %v", got, err)
	}
	_, err = Pinned("my-type", "git", map[string]any{"uri": "x"}, map[string]string{"ref": "abc"})
	if err == nil || !strings.Contains(err.Error(), `resource type "my-type": its image comes from a "git" resource`) {
		t.Fatalf("err = %v", err)
	}
}
