package exec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/porter-ci/porter/pkg/atc/exec/basetypes"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/atc/exec/stepplan"
	"github.com/porter-ci/porter/pkg/atc/exec/taskimage"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/taskconfig"
)

// taskImage resolves the image of a task (taskimage): the step's image:
// artifact, else its config's image_resource, whose check runs as a step
// of the build.
func (x *RunState) taskImage(ctx context.Context, p *concourse.Plan, cfg *taskconfig.Config) (taskimage.Image, error) {
	tp := p.Task
	if tp.ImageArtifactName != "" {
		// As in Concourse, the step's image: wins over the config's.
		return x.artifactImage(ctx, tp)
	}
	if cfg.ImageResource == nil {
		return taskimage.Image{}, fmt.Errorf("task %q has no image: give its config an image_resource, or the step an image: naming a registry-image get", tp.Name)
	}
	img, err := x.r.images.ImageResource(ctx, taskimage.Request{Task: p, TeamID: x.b.TeamID, Image: cfg.ImageResource,
		Warn: x.delegate(p.ID).Stderr, Log: x.r.log.With("build", x.b.ID),
		Check: func(ctx context.Context, check *concourse.Plan) (map[string]string, error) {
			return x.imageCheck(ctx, p, check)
		}})
	if err != nil {
		return taskimage.Image{}, fmt.Errorf("task %q: image_resource: %w", tp.Name, err)
	}
	return img, nil
}

// noteFetched records what a get fetched into its artifact; call it after
// setArtifact, which forgets what an artifact's previous producer fetched.
func (x *RunState) noteFetched(gp *concourse.GetPlan, version map[string]string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.fetched == nil {
		x.fetched = map[string]taskimage.Fetched{}
	}
	x.fetched[gp.Name] = taskimage.Fetched{Type: gp.Type, Source: gp.Source, Version: version,
		MirrorSelf: basetypes.MirrorsSelf(gp.Type, gp.TypeImage, gp.Source, gp.Params)}
}

// artifactImage is the image a registry-image-like get of the build
// fetched. The source is kept as the plan wrote it, so its ((vars)) are
// filled in here.
func (x *RunState) artifactImage(ctx context.Context, tp *concourse.TaskPlan) (taskimage.Image, error) {
	name := tp.ImageArtifactName
	x.mu.Lock()
	f, fetched := x.fetched[name]
	_, exists := x.artifacts[name]
	x.mu.Unlock()
	switch {
	case !exists:
		return taskimage.Image{}, fmt.Errorf("task %q: image artifact %q does not exist: no get step of the build fetched it before the task", tp.Name, name)
	case !fetched:
		return taskimage.Image{}, fmt.Errorf("task %q: image artifact %q was not fetched by a get step (a task's output or an uploaded input cannot be an image); image: names the artifact of a registry-image get", tp.Name, name)
	case f.MirrorSelf:
		// A mock mirroring itself fetched its own image, as in Concourse.
		ref, ok := x.baseImages().Mock()
		if !ok {
			return taskimage.Image{}, fmt.Errorf("task %q: image artifact %q is a mock mirroring itself, but this server has no image for base type %q", tp.Name, name, basetypes.Mock)
		}
		return taskimage.Image{Ref: ref}, nil
	}
	source, err := x.stepVars(nil).InterpolateMap(ctx, f.Source)
	if err != nil {
		return taskimage.Image{}, fmt.Errorf("task %q: image artifact %q: %w", tp.Name, name, err)
	}
	img, err := taskimage.FromGet(f, source)
	if err != nil {
		return taskimage.Image{}, fmt.Errorf("task %q: image artifact %q %w", tp.Name, name, err)
	}
	return img, nil
}

// imageCheck runs the check of a task's image as a step of the build (its
// pod, container and record, followed again after a restart) and returns
// the latest version it found (nil: none). Its events carry the check's
// plan id, announced by an image-check event as Concourse does; it shows
// no worker line, so a task's output reads the same whether its image was
// checked or cached. Its versions are no resource's.
func (x *RunState) imageCheck(ctx context.Context, task, p *concourse.Plan) (map[string]string, error) {
	ctx, span := x.stepSpan(ctx, p)
	defer span.End()
	cp := p.Check
	step := resourceStep{kind: concourse.KindCheck, name: cp.Name, typ: cp.Type, source: cp.Source, image: cp.TypeImage, tags: cp.Tags, timeout: cp.Timeout, restartable: true}
	r := x.b.Record(p.ID, cp.Name, concourse.KindCheck)
	announce := func() {
		public, _ := json.Marshal(map[string]any{"id": p.ID, "check": map[string]any{"name": cp.Name, "type": cp.Type}})
		x.delegate(task.ID).ImageCheck(public)
	}
	fin, done, err := x.runResource(ctx, p, r, step, announce, func() (map[string]any, error) {
		return map[string]any{"source": stepplan.NonNilMap(cp.Source), "version": nil}, nil
	}, withoutWorkerEvent())
	if done || fin != nil {
		defer x.removeImageCheck(ctx, r)
	}
	if done || fin == nil {
		ok, err := x.replayed(r, err)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, errors.New("the check failed; its log is above")
		}
		var version map[string]string
		x.b.Update(func() { version = r.Version })
		return version, nil
	}
	if fin.GetResult() != eventspb.Result_RESULT_SUCCEEDED {
		if _, err := x.endResource(ctx, p, r, fin); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("the check failed (exit status %d); its log is above", fin.GetExitStatus())
	}
	var printed []map[string]string
	if err := json.Unmarshal(fin.GetResponse(), &printed); err != nil {
		_, err = x.failResource(ctx, p, r, fmt.Errorf("check printed JSON that is not a list of versions: %w", err))
		return nil, err
	}
	var version map[string]string
	if len(printed) > 0 {
		version = printed[len(printed)-1]
	}
	x.b.Update(func() { r.Version = version })
	if _, err := x.endResource(ctx, p, r, fin); err != nil {
		return nil, err
	}
	return version, nil
}

// removeImageCheck removes an image check's pod and container once it
// ended: its outcome and log are in the build's events, and the task's
// container is then the build's one to intercept, as before the check.
func (x *RunState) removeImageCheck(ctx context.Context, r *buildstate.StepRecord) {
	var stepID, workerName, container string
	x.b.Update(func() { stepID, workerName, container = r.StepID, r.Worker, r.Container })
	if stepID == "" {
		return
	}
	ctx = context.WithoutCancel(ctx)
	if w, err := x.r.pods.Worker(workerName); err == nil {
		x.r.pods.DeletePod(ctx, w, stepID)
	}
	if container != "" {
		if err := x.r.db.DeleteContainer(ctx, container); err != nil && !errors.Is(err, db.ErrNotFound) {
			x.r.log.Warn("remove an image check's container record", "container", container, "err", err)
		}
	}
}
