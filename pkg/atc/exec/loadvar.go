package exec

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/atc/exec/stepplan"
	"github.com/porter-ci/porter/pkg/atc/exec/stepvars"
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

// loadVar reads a file of an artifact into a local var of the build (of
// the across run it is in), redacted from the build's log unless reveal.
// A step finished before a restart is read again, silently: local vars
// are not kept in the database, since they may be secrets.
type LoadVarStep struct{ Plan *concourse.Plan }

func (s LoadVarStep) Run(ctx context.Context, x *RunState) (bool, error) {
	p := s.Plan
	lv := p.LoadVar
	d := x.delegate(p.ID)
	r := x.b.Record(p.ID, lv.Name, concourse.KindLoadVar)
	quiet := r.Finished()
	if !quiet {
		d.Initializing()
	}
	value, err := x.readLoadVar(ctx, lv)
	if err != nil {
		return x.failStep(ctx, d, r, err)
	}
	if !lv.Reveal {
		x.d.Redact(stepvars.Secrets(value))
	}
	x.scope(ctx).Set(lv.Name, value)
	if !quiet {
		d.Starting()
		d.Stdout(fmt.Sprintf("var %s fetched.\n", lv.Name))
		d.Stdout(fmt.Sprintf("added var %s to build.\n", lv.Name))
		d.Finished(true)
		x.b.Update(func() { r.Status, r.EndTime = concourse.StatusSucceeded, time.Now().Unix() })
		x.r.SaveState(ctx, x.b)
	}
	return true, nil
}

func (x *RunState) readLoadVar(ctx context.Context, lv *concourse.LoadVarPlan) (any, error) {
	format, err := stepplan.LoadVarFormat(lv)
	if err != nil {
		return nil, err
	}
	what := "load_var " + lv.Name
	body, err := x.readArtifactFile(ctx, what, lv.File)
	if err != nil {
		return nil, err
	}
	value, err := stepplan.ParseVarFile(body, format)
	if err != nil {
		return nil, fmt.Errorf("%s: file %s: %w", what, lv.File, err)
	}
	return value, nil
}

// failStep ends a step that runs no pod as errored, with err in the build.
func (x *RunState) failStep(ctx context.Context, d StepDelegate, r *buildstate.StepRecord, err error) (bool, error) {
	if errors.Is(err, ErrAborted) || errors.Is(err, ErrShutdown) || errors.Is(err, ErrTimeout) {
		return false, err
	}
	d.Errored(err.Error())
	x.b.Update(func() { r.Status, r.Error, r.EndTime = concourse.StatusErrored, err.Error(), time.Now().Unix() })
	x.r.SaveState(ctx, x.b)
	return false, err
}
