package artifactfile

import (
	"testing"

	"github.com/porter-ci/porter/pkg/api"
)

func TestReadNamesTheFileItCannotRead(t *testing.T) {
	artifacts := func(name string) (api.ArtifactRef, bool) { return api.ArtifactRef{}, false }
	for file, want := range map[string]string{
		"no-slash":  `load_var v: file "no-slash": want <artifact>/<path of the file in it>`,
		"/v.json":   `load_var v: file "/v.json": want <artifact>/<path of the file in it>`,
		"a/":        `load_var v: file "a/": want <artifact>/<path of the file in it>`,
		"gone/v.ym": `load_var v: file gone/v.ym: the build has no artifact "gone" (no earlier step produced it)`,
	} {
		if _, err := Read(t.Context(), nil, artifacts, "load_var v", file); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %q", file, err, want)
		}
	}
}
