package exec

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/porter-ci/porter/pkg/atc/exec/loadvarstep"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
)

// maxVarFile bounds a file load_var or set_pipeline reads: the ATC holds
// it in memory.
const maxVarFile = 4 << 20

// readArtifactFile reads "<artifact>/<path>" from the build's artifacts,
// without a pod. what names the step for errors ("load_var v").
func (x *RunState) readArtifactFile(ctx context.Context, what, file string) ([]byte, error) {
	name, rel, ok := strings.Cut(file, "/")
	if !ok || name == "" || strings.Trim(rel, "/") == "" {
		return nil, fmt.Errorf("%s: file %q: want <artifact>/<path of the file in it>", what, file)
	}
	a, ok := x.artifact(name)
	if !ok {
		return nil, fmt.Errorf("%s: file %s: the build has no artifact %q (no earlier step produced it)", what, file, name)
	}
	body, err := blobstore.ReadFile(ctx, x.r.store, a.Key, rel, maxVarFile)
	switch {
	case errors.Is(err, blobstore.ErrFileNotFound):
		return nil, fmt.Errorf("%s: file %s: artifact %q has no file %q", what, file, name, rel)
	case err != nil:
		return nil, fmt.Errorf("%s: file %s: %w", what, file, err)
	}
	return body, nil
}

// LoadVarStep reads a file of an artifact into a local var of the build
// (loadvarstep.Step).
type LoadVarStep struct{ Plan *concourse.Plan }

func (s LoadVarStep) Run(ctx context.Context, x *RunState) (bool, error) {
	p := s.Plan
	d := x.delegate(p.ID)
	r := x.b.Record(p.ID, p.LoadVar.Name, concourse.KindLoadVar)
	in := podless{x: x, d: d, r: r}
	return loadvarstep.Step{Plan: p.LoadVar, Quiet: r.Finished(), Delegate: d, End: in, Files: in, Locals: in, Redactor: in}.Run(ctx)
}
