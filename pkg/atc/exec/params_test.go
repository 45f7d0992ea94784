package exec

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/test/testenv"
	"sigs.k8s.io/yaml"
)

// TestStepParamsOverrideConfigParams: a task step's own params win over
// its config's params of the same name (Concourse merges them, the step's
// last), whether the config is inline, from a file, or holds ((vars)).
func TestStepParamsOverrideConfigParams(t *testing.T) {
	store := testenv.MinIOStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const config = `
platform: linux
image_resource:
  type: registry-image
  source: {repository: busybox}
  version: {digest: "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}
params:
  EXIT_CODE: "0"
  FROM_CONFIG: ((greeting))
run: {path: sh, args: [-c, 'exit $EXIT_CODE']}
`
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "ci"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ci", "task.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	art, err := blobstore.UploadDir(ctx, store, dir, blobstore.NewBlobKey("main", "test"), blobstore.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inline, err := yaml.YAMLToJSON([]byte(config))
	if err != nil {
		t.Fatal(err)
	}
	for name, tp := range map[string]*concourse.TaskPlan{
		"inline":      {Name: "t", Config: inline},
		"file":        {Name: "t", ConfigPath: "repo/ci/task.yml"},
		"vars":        {Name: "t", Config: inline, Params: map[string]any{"EXIT_CODE": "((code))"}},
		"file, vars":  {Name: "t", ConfigPath: "repo/ci/task.yml", Params: map[string]any{"EXIT_CODE": "((code))"}},
		"inline, int": {Name: "t", Config: inline},
	} {
		t.Run(name, func(t *testing.T) {
			x, _ := credsExecutor(t, store)
			x.setArtifact("repo", artifactRef(art))
			tp.Vars = map[string]any{"greeting": "hello", "code": 1}
			if tp.Params == nil {
				tp.Params = map[string]any{"EXIT_CODE": 1}
			}
			a, _, _, _, err := x.resolvePreparedTask(ctx, &concourse.Plan{ID: "1", Task: tp})
			if err != nil {
				t.Fatal(err)
			}
			if a.Params["EXIT_CODE"] != "1" || a.Params["FROM_CONFIG"] != "hello" {
				t.Errorf("params = %v, want EXIT_CODE=1 (the step's) and FROM_CONFIG=hello (the config's)", a.Params)
			}
		})
	}
}
