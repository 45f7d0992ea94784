// Package artifactfile reads a file of a build's artifact without a pod,
// for the steps that read one in the ATC (load_var, set_pipeline).
package artifactfile

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/blobstore"
)

// maxVarFile bounds a file load_var or set_pipeline reads: the ATC holds
// it in memory.
const maxVarFile = 4 << 20

// Read reads "<artifact>/<path>" from the build's artifacts (artifact
// finds one by name), without a pod. what names the step for errors
// ("load_var v").
func Read(ctx context.Context, store blobstore.Store, artifact func(name string) (api.ArtifactRef, bool), what, file string) ([]byte, error) {
	name, rel, ok := strings.Cut(file, "/")
	if !ok || name == "" || strings.Trim(rel, "/") == "" {
		return nil, fmt.Errorf("%s: file %q: want <artifact>/<path of the file in it>", what, file)
	}
	a, ok := artifact(name)
	if !ok {
		return nil, fmt.Errorf("%s: file %s: the build has no artifact %q (no earlier step produced it)", what, file, name)
	}
	body, err := blobstore.ReadFile(ctx, store, a.Key, rel, maxVarFile)
	switch {
	case errors.Is(err, blobstore.ErrFileNotFound):
		return nil, fmt.Errorf("%s: file %s: artifact %q has no file %q", what, file, name, rel)
	case err != nil:
		return nil, fmt.Errorf("%s: file %s: %w", what, file, err)
	}
	return body, nil
}
