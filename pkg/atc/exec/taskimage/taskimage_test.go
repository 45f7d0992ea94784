package taskimage

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/atc/exec/imagecache"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/taskconfig"
)

func resolve(t *testing.T, r Resolver, types string, ir *taskconfig.ImageResource) (Image, bool, error) {
	t.Helper()
	checked := false
	img, err := r.ImageResource(context.Background(), Request{
		Task:  &concourse.Plan{ID: "1", Task: &concourse.TaskPlan{Name: "t", ResourceTypes: json.RawMessage(types)}},
		Image: ir, Warn: func(string) {}, Log: slog.New(slog.DiscardHandler),
		Check: func(context.Context, *concourse.Plan) (map[string]string, error) {
			checked = true
			return map[string]string{"digest": "sha256:" + strings.Repeat("a", 64)}, nil
		},
	})
	return img, checked, err
}

// A mock image_resource that mirrors itself is the mock type's own image,
// as in Concourse, with no check.
func TestMirrorSelf(t *testing.T) {
	r := Resolver{Cache: imagecache.New(CacheTTL, CacheSize), BaseTypes: []string{"mock", "registry-image"},
		BaseImages: map[string]string{"mock": "registry.test/resource-mock@sha256:1234", "registry-image": "x"}}
	for _, ir := range []*taskconfig.ImageResource{
		{Type: "mock", Source: map[string]any{"mirror_self": true}},
		{Type: "mock", Source: map[string]any{}, Params: map[string]any{"mirror_self_via_params": true}},
	} {
		img, checked, err := resolve(t, r, "", ir)
		if err != nil || checked || img.Ref != "registry.test/resource-mock@sha256:1234" || img.Pull != nil {
			t.Errorf("%+v: image %+v, checked %v, err %v", ir, img, checked, err)
		}
	}
	// A pipeline's type that is a mock mirroring itself, as in Concourse's
	// testflight resource-types.yml.
	custom := `[{"name":"custom","type":"mock","source":{"mirror_self":true}}]`
	img, checked, err := resolve(t, r, custom, &taskconfig.ImageResource{Type: "custom", Source: map[string]any{"mirror_self": true}})
	if err != nil || checked || img.Ref != "registry.test/resource-mock@sha256:1234" {
		t.Errorf("a type mirroring itself: image %+v, checked %v, err %v", img, checked, err)
	}
	// Without mirror_self a mock gives no image.
	if _, _, err := resolve(t, r, "", &taskconfig.ImageResource{Type: "mock", Source: map[string]any{"mirror_self": false}}); err == nil {
		t.Error("a mock without mirror_self gave an image")
	}
	// A pipeline's own type named mock is not the base mock: its image is
	// the one its check finds.
	own := `[{"name":"mock","type":"registry-image","source":{"repository":"example.com/own-mock"}}]`
	img, checked, err = resolve(t, r, own, &taskconfig.ImageResource{Type: "mock", Source: map[string]any{"mirror_self": true, "repository": "example.com/img"}})
	if err != nil || !checked || !strings.HasPrefix(img.Ref, "example.com/img@sha256:") {
		t.Errorf("a pipeline's own type mock: image %+v, checked %v, err %v", img, checked, err)
	}
	// The server's default images when none are configured.
	r.BaseImages = nil
	if img, _, err := resolve(t, r, "", &taskconfig.ImageResource{Type: "mock", Source: map[string]any{"mirror_self": true}}); err != nil || img.Ref != "porter.local/resource-mock:dev" {
		t.Errorf("default images: %+v, %v", img, err)
	}
	// A server whose base types have no mock says so.
	r.BaseImages = map[string]string{"registry-image": "x"}
	r.BaseTypes = []string{"mock", "registry-image"}
	if _, _, err := resolve(t, r, "", &taskconfig.ImageResource{Type: "mock", Source: map[string]any{"mirror_self": true}}); err == nil || !strings.Contains(err.Error(), `no image for base type "mock"`) {
		t.Errorf("no mock image: %v", err)
	}
}
