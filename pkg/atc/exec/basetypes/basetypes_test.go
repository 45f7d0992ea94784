package basetypes

import (
	"cmp"
	"reflect"
	"testing"

	"github.com/porter-ci/porter/pkg/concourse"
)

func TestApply(t *testing.T) {
	s := Defaults{"registry-image": {"insecure": true, "registry_mirror": map[string]any{"host": "mirror:5000"}}}
	source := map[string]any{"repository": "busybox", "insecure": false}
	get := &concourse.Plan{ID: "1", Get: &concourse.GetPlan{Name: "img", Type: "registry-image", Source: source,
		TypeImage: concourse.TypeImage{BaseType: "registry-image"}}}
	got := s.Apply(get)
	want := map[string]any{"repository": "busybox", "insecure": false, "registry_mirror": map[string]any{"host": "mirror:5000"}}
	if !reflect.DeepEqual(got.Get.Source, want) {
		t.Errorf("source = %v, want %v (the step's own settings win)", got.Get.Source, want)
	}
	if len(get.Get.Source) != 2 || got.ID != "1" {
		t.Errorf("the build's plan was changed: %v", get.Get.Source)
	}
	check := &concourse.Plan{ID: "2", Check: &concourse.CheckPlan{Name: "img", Type: "registry-image", Source: nil,
		TypeImage: concourse.TypeImage{BaseType: "registry-image"}}}
	if got := s.Apply(check); got.Check.Source["insecure"] != true {
		t.Errorf("check source = %v", got.Check.Source)
	}
	put := &concourse.Plan{ID: "3", Put: &concourse.PutPlan{Name: "img", Type: "registry-image", Source: source,
		TypeImage: concourse.TypeImage{BaseType: "registry-image"}}}
	if got := s.Apply(put); got.Put.Source["registry_mirror"] == nil {
		t.Errorf("put source = %v", got.Put.Source)
	}
	// A pipeline's own type named like a base type is not the base type.
	custom := &concourse.Plan{ID: "4", Get: &concourse.GetPlan{Name: "x", Type: "registry-image", Source: source,
		TypeImage: concourse.TypeImage{BaseType: "registry-image", CheckPlan: &concourse.Plan{ID: "4/image-check"}}}}
	if got := s.Apply(custom); !reflect.DeepEqual(got.Get.Source, source) {
		t.Errorf("custom type's source = %v, want it unchanged", got.Get.Source)
	}
	other := &concourse.Plan{ID: "5", Get: &concourse.GetPlan{Name: "x", Type: "git", Source: map[string]any{"uri": "u"},
		TypeImage: concourse.TypeImage{BaseType: "git"}}}
	if got := s.Apply(other); len(got.Get.Source) != 1 {
		t.Errorf("git source = %v, want no defaults", got.Get.Source)
	}
}

func TestSource(t *testing.T) {
	s := Defaults{"registry-image": {"insecure": true}}
	if got := s.Source("registry-image", nil, map[string]any{"repository": "busybox"}); !reflect.DeepEqual(got, map[string]any{"repository": "busybox", "insecure": true}) {
		t.Errorf("base type: %v", got)
	}
	types := []concourse.ResourceType{{Name: "my-registry", Type: "registry-image", Defaults: map[string]any{"tag": "stable"}}}
	if got := s.Source("my-registry", types, map[string]any{"repository": "busybox"}); !reflect.DeepEqual(got, map[string]any{"repository": "busybox", "tag": "stable"}) {
		t.Errorf("pipeline type: %v", got)
	}
}

// typeImage is the image of a pipeline's type of type typ with source and
// params, as pkg/pipeline plans it.
func typeImage(typ string, parent concourse.TypeImage, source, params map[string]any) concourse.TypeImage {
	return concourse.TypeImage{BaseType: cmp.Or(parent.BaseType, typ),
		CheckPlan: &concourse.Plan{ID: "c", Check: &concourse.CheckPlan{Type: typ, Source: source, TypeImage: parent}},
		GetPlan:   &concourse.Plan{ID: "g", Get: &concourse.GetPlan{Type: typ, Source: source, Params: params}}}
}

func TestMirrorsSelf(t *testing.T) {
	base := concourse.TypeImage{BaseType: "mock"}
	self := map[string]any{"mirror_self": true}
	viaParams := map[string]any{"mirror_self_via_params": true}
	// Concourse's testflight types: a mock mirroring itself by source or
	// by params, a type of that type mirroring itself again, and types
	// that do not mirror.
	mirroring := typeImage("mock", base, self, nil)
	mirroringByParams := typeImage("mock", base, nil, viaParams)
	ofMirroring := typeImage("custom", mirroring, self, nil)
	notAsked := typeImage("mock", base, map[string]any{"check_failure": "x"}, nil)
	ownMock := typeImage("registry-image", concourse.TypeImage{BaseType: "registry-image"}, map[string]any{"repository": "x"}, nil)
	for _, c := range []struct {
		name           string
		typ            string
		ti             concourse.TypeImage
		source, params map[string]any
		want           bool
	}{
		{"source", "mock", base, self, nil, true},
		{"params", "mock", base, nil, viaParams, true},
		{"no type image", "mock", concourse.TypeImage{}, self, nil, true},
		{"not asked", "mock", base, map[string]any{"mirror_self": "yes"}, nil, false},
		{"another base type", "git", concourse.TypeImage{BaseType: "git"}, self, nil, false},
		{"a type mirroring itself", "custom", mirroring, self, nil, true},
		{"a type mirroring itself by params", "custom", mirroringByParams, self, nil, true},
		{"a type of a type mirroring itself", "custom2", ofMirroring, self, nil, true},
		{"a type mirroring itself, not asked", "custom", mirroring, nil, nil, false},
		{"a mock type not mirroring", "custom", notAsked, self, nil, false},
		{"a pipeline's own type named mock", "mock", ownMock, self, nil, false},
	} {
		if got := MirrorsSelf(c.typ, c.ti, c.source, c.params); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	for ti, want := range map[*concourse.TypeImage]bool{&base: false, &mirroring: true, &mirroringByParams: true, &ofMirroring: true, &notAsked: false, &ownMock: false} {
		if got := TypeMirrorsSelf(*ti); got != want {
			t.Errorf("TypeMirrorsSelf(%+v) = %v, want %v", ti.CheckPlan, got, want)
		}
	}
}
