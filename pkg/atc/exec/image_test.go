package exec

import (
	"context"
	"encoding/json"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/atc/exec/imagecache"
	"github.com/porter-ci/porter/pkg/atc/exec/taskimage"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/taskconfig"
)

const testDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestArtifactImage(t *testing.T) {
	x := &RunState{artifacts: map[string]api.ArtifactRef{}}
	task := func(image string) *concourse.TaskPlan {
		return &concourse.TaskPlan{Name: "unit", ImageArtifactName: image}
	}

	x.setArtifact("img", api.ArtifactRef{Key: "k"})
	x.noteFetched(&concourse.GetPlan{Name: "img", Type: "registry-image",
		Source: map[string]any{"repository": "10.245.0.1:5000/app", "username": "robot", "password": "pw"}}, map[string]string{"digest": testDigest})
	got, err := x.artifactImage(context.Background(), task("img"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (taskimage.Image{Ref: "10.245.0.1:5000/app@" + testDigest, Pull: &podspec.RegistryAuth{Username: "robot", Password: "pw"}}); !reflect.DeepEqual(got, want) {
		t.Errorf("image = %+v, want %+v", got, want)
	}

	x.setArtifact("repo", api.ArtifactRef{Key: "k2"})
	x.noteFetched(&concourse.GetPlan{Name: "repo", Type: "git", Source: map[string]any{"uri": "https://example.com/r.git"}}, map[string]string{"ref": "abc"})
	x.setArtifact("built", api.ArtifactRef{Key: "k3"})
	for image, wantErr := range map[string]string{
		"missing": `task "unit": image artifact "missing" does not exist`,
		"built":   `task "unit": image artifact "built" was not fetched by a get step`,
		"repo":    `task "unit": image artifact "repo" comes from a get of type "git", which gives no image`,
	} {
		if _, err := x.artifactImage(context.Background(), task(image)); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("image %s: err = %v, want %q", image, err, wantErr)
		}
	}

	// A task output that replaces a fetched artifact is no image.
	x.setArtifact("img", api.ArtifactRef{Key: "k4"})
	if _, err := x.artifactImage(context.Background(), task("img")); err == nil || !strings.Contains(err.Error(), "was not fetched by a get step") {
		t.Errorf("replaced artifact: %v", err)
	}
}

func TestTaskImageBeforeAnyCheck(t *testing.T) {
	s := &Runner{images: taskimage.Resolver{Cache: imagecache.New(time.Minute, 10)}, log: slog.New(slog.DiscardHandler), delegates: &reports{}}
	x := newRunState(s, &buildstate.Build{TeamID: 1})
	taskPlan := func(cfg string, types []concourse.ResourceType) *concourse.Plan {
		raw, _ := json.Marshal(types)
		return &concourse.Plan{ID: "7", Task: &concourse.TaskPlan{Name: "unit", Config: json.RawMessage(cfg), ResourceTypes: raw}}
	}
	for _, tc := range []struct {
		name    string
		ir      *taskconfig.ImageResource
		types   []concourse.ResourceType
		want    string
		wantErr string
	}{
		{name: "none", wantErr: `task "unit" has no image: give its config an image_resource, or the step an image:`},
		{name: "pinned", ir: &taskconfig.ImageResource{Type: "registry-image", Source: map[string]any{"repository": "busybox"}, Version: map[string]string{"digest": testDigest}},
			want: "busybox@" + testDigest},
		{name: "pinned by a pipeline type", ir: &taskconfig.ImageResource{Type: "my-registry", Source: map[string]any{"repository": "busybox"}, Version: map[string]string{"digest": testDigest}},
			types: []concourse.ResourceType{{Name: "my-registry", Type: "registry-image", Source: map[string]any{"repository": "my/registry-image"}}},
			want:  "busybox@" + testDigest},
		{name: "unknown type", ir: &taskconfig.ImageResource{Type: "nope", Source: map[string]any{"repository": "busybox"}},
			wantErr: `task "unit": image_resource: unknown resource type 'nope'`},
		{name: "no repository", ir: &taskconfig.ImageResource{Type: "registry-image", Source: map[string]any{"tag": "1"}},
			wantErr: `task "unit": image_resource: type "registry-image": source has no repository`},
		{name: "tag in repository", ir: &taskconfig.ImageResource{Type: "registry-image", Source: map[string]any{"repository": "busybox:1.36"}},
			wantErr: `source.repository "busybox:1.36" must be a repository without tag or digest`},
		{name: "version without digest", ir: &taskconfig.ImageResource{Type: "registry-image", Source: map[string]any{"repository": "busybox"}, Version: map[string]string{"tag": "1"}},
			wantErr: `task "unit": image_resource: busybox: version map[tag:1] has no digest`},
		{name: "half a login", ir: &taskconfig.ImageResource{Type: "registry-image", Source: map[string]any{"repository": "busybox", "username": "me"}},
			wantErr: "source.username and source.password must be given together"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := x.taskImage(context.Background(), taskPlan("{}", tc.types), &taskconfig.Config{ImageResource: tc.ir})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got.Ref != tc.want {
				t.Errorf("image = %+v, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestTaskImageFromTheCache(t *testing.T) {
	s := &Runner{images: taskimage.Resolver{Cache: imagecache.New(time.Minute, 10),
		Defaults: map[string]map[string]any{"registry-image": {"insecure": true}}}, log: slog.New(slog.DiscardHandler), delegates: &reports{}}
	x := newRunState(s, &buildstate.Build{TeamID: 3})
	ir := &taskconfig.ImageResource{Type: "registry-image", Source: map[string]any{"repository": "busybox"}}
	// The key is of the source with the defaults: what the check would see.
	key, err := imagecache.Key(3, "registry-image", concourse.TypeImage{BaseType: "registry-image"}, nil, map[string]any{"repository": "busybox", "insecure": true})
	if err != nil {
		t.Fatal(err)
	}
	s.images.Cache.Put(key, testDigest)
	// No check runs (this executor could not run one).
	got, err := x.taskImage(context.Background(), &concourse.Plan{ID: "1", Task: &concourse.TaskPlan{Name: "unit"}}, &taskconfig.Config{ImageResource: ir})
	if err != nil || got.Ref != "busybox@"+testDigest {
		t.Errorf("image = %+v, %v", got, err)
	}
}

// A get's source keeps its ((vars)) as the plan wrote them; the image it
// gives is built from the filled-in source.
func TestArtifactImageFillsInTheGetsVars(t *testing.T) {
	x, _ := credsExecutor(t, nil, credSecret("concourse-main", "registry", map[string]string{"repo": "10.245.0.1:5000/app", "password": "pw"}))
	x.setArtifact("img", api.ArtifactRef{Key: "k"})
	x.noteFetched(&concourse.GetPlan{Name: "img", Type: "registry-image",
		Source: map[string]any{"repository": "((registry.repo))", "username": "robot", "password": "((registry.password))"}},
		map[string]string{"digest": testDigest})
	got, err := x.artifactImage(context.Background(), &concourse.TaskPlan{Name: "unit", ImageArtifactName: "img"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (taskimage.Image{Ref: "10.245.0.1:5000/app@" + testDigest, Pull: &podspec.RegistryAuth{Username: "robot", Password: "pw"}}); !reflect.DeepEqual(got, want) {
		t.Errorf("image = %+v, want %+v", got, want)
	}
}
