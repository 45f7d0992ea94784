package exec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/porter-ci/porter/pkg/atc/exec/imagecache"
	"github.com/porter-ci/porter/pkg/atc/exec/stepplan"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/pipeline"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/taskconfig"
)

// A task's image is a registry image pinned by digest: the pod runs
// repository@sha256:digest and the kubelet pulls it, so no image content
// passes through Porter. image_resource resolves to a digest with its
// type's check (unless its version names one); image: takes the digest a
// get of the build fetched.

const (
	// imageCacheTTL is how long a checked image digest is reused: repeated
	// `fly execute`s do not pay a check pod each, and a pushed tag is seen
	// within a minute.
	imageCacheTTL = time.Minute
	// imageCacheSize bounds the cache: the number of (team, type, source)
	// resolutions kept.
	imageCacheSize = 1024
	// imageCheckTimeout bounds an image check, which holds up its task.
	imageCheckTimeout = "5m"
	// imageCheckName is the name of an image check step, as Concourse's.
	imageCheckName = "image"
)

// taskImage is what a task's image resolved to.
type taskImage struct {
	ref string // repository@sha256:digest
	// pull is the login the kubelet pulls with (nil: none).
	pull *podspec.RegistryAuth
}

// taskImage resolves the image of a task: the step's image: artifact, else
// its config's image_resource.
// imageCheckSuffix ends the plan ID of a task image's check.
const imageCheckSuffix = "/image-check"

func (x *RunState) taskImage(ctx context.Context, p *concourse.Plan, cfg *taskconfig.Config) (taskImage, error) {
	tp := p.Task
	if tp.ImageArtifactName != "" {
		// As in Concourse, the step's image: wins over the config's.
		return x.artifactImage(ctx, tp)
	}
	if cfg.ImageResource == nil {
		return taskImage{}, fmt.Errorf("task %q has no image: give its config an image_resource, or the step an image: naming a registry-image get", tp.Name)
	}
	img, err := x.imageResourceImage(ctx, p, cfg.ImageResource)
	if err != nil {
		return taskImage{}, fmt.Errorf("task %q: image_resource: %w", tp.Name, err)
	}
	return img, nil
}

// fetchedVersion is what a get of the build fetched, for a task whose
// image: names its artifact. It is kept in memory only: the source may hold
// credentials, which must not reach the build's stored state.
type fetchedVersion struct {
	typ     string
	source  map[string]any
	version map[string]string
}

// noteFetched records what a get fetched into its artifact; call it after
// setArtifact, which forgets what an artifact's previous producer fetched.
func (x *RunState) noteFetched(gp *concourse.GetPlan, version map[string]string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.fetched == nil {
		x.fetched = map[string]fetchedVersion{}
	}
	x.fetched[gp.Name] = fetchedVersion{typ: gp.Type, source: gp.Source, version: version}
}

// artifactImage is the image a registry-image-like get of the build
// fetched: its source's repository at its version's digest. The source is
// kept as the plan wrote it, so its ((vars)) are filled in here.
func (x *RunState) artifactImage(ctx context.Context, tp *concourse.TaskPlan) (taskImage, error) {
	name := tp.ImageArtifactName
	x.mu.Lock()
	f, fetched := x.fetched[name]
	_, exists := x.artifacts[name]
	x.mu.Unlock()
	switch {
	case !exists:
		return taskImage{}, fmt.Errorf("task %q: image artifact %q does not exist: no get step of the build fetched it before the task", tp.Name, name)
	case !fetched:
		return taskImage{}, fmt.Errorf("task %q: image artifact %q was not fetched by a get step (a task's output or an uploaded input cannot be an image); image: names the artifact of a registry-image get", tp.Name, name)
	}
	source, err := x.stepVars(nil).InterpolateMap(ctx, f.source)
	if err != nil {
		return taskImage{}, fmt.Errorf("task %q: image artifact %q: %w", tp.Name, name, err)
	}
	ref, err := taskconfig.PinnedImage(source, f.version)
	if err != nil {
		return taskImage{}, fmt.Errorf("task %q: image artifact %q comes from a get of type %q, which gives no image (a registry-image-like resource has source.repository and versions with a sha256 digest): %w",
			tp.Name, name, f.typ, err)
	}
	pull, err := pullAuth(source)
	if err != nil {
		return taskImage{}, fmt.Errorf("task %q: image artifact %q: %w", tp.Name, name, err)
	}
	return taskImage{ref: ref, pull: pull}, nil
}

// imageResourceImage resolves an image_resource: its version's digest, a
// digest checked within imageCacheTTL, or its type's check now.
func (x *RunState) imageResourceImage(ctx context.Context, p *concourse.Plan, ir *taskconfig.ImageResource) (taskImage, error) {
	tp := p.Task
	var types []concourse.ResourceType
	if len(tp.ResourceTypes) > 0 && string(tp.ResourceTypes) != "null" {
		if err := json.Unmarshal(tp.ResourceTypes, &types); err != nil {
			return taskImage{}, fmt.Errorf("the pipeline's resource types: %w", err)
		}
	}
	if ir.Type == "" {
		return taskImage{}, errors.New("missing type")
	}
	checkID := p.ID + imageCheckSuffix
	ti, err := pipeline.TypeImage(checkID, ir.Type, tp.Tags, types, pipeline.PlanOptions{BaseTypes: x.r.baseTypeNames()})
	if err != nil {
		return taskImage{}, err
	}
	source := x.r.cfg.BaseResourceTypeDefaults.Source(ir.Type, types, ir.Source)
	// Checked before any pod runs: without a repository no check can give
	// an image.
	repository, err := taskconfig.ImageRepository(source)
	if err != nil {
		return taskImage{}, fmt.Errorf("type %q: %w", ir.Type, err)
	}
	pull, err := pullAuth(source)
	if err != nil {
		return taskImage{}, fmt.Errorf("%s: %w", repository, err)
	}
	if len(ir.Params) > 0 {
		x.delegate(p.ID).Stderr("[WARNING] image_resource params are ignored: the image is not fetched by a get, the kubelet pulls it by digest\n")
	}
	if ir.Version != nil {
		ref, err := taskconfig.PinnedImage(source, ir.Version)
		if err != nil {
			return taskImage{}, fmt.Errorf("%s: %w", repository, err)
		}
		return taskImage{ref: ref, pull: pull}, nil
	}

	key, err := imagecache.Key(x.b.TeamID, ir.Type, ti, types, source)
	if err != nil {
		return taskImage{}, err
	}
	if digest, ok := x.r.images.Get(key); ok {
		ref, err := taskconfig.PinnedImage(source, map[string]string{"digest": digest})
		if err == nil {
			x.r.log.Info("task image from the image cache", "build", x.b.ID, "task", tp.Name, "image", ref)
			return taskImage{ref: ref, pull: pull}, nil
		}
	}
	tag, err := taskconfig.ImageTag(source)
	if err != nil {
		return taskImage{}, fmt.Errorf("%s: %w", repository, err)
	}
	check := &concourse.Plan{ID: checkID, Check: &concourse.CheckPlan{
		Name: imageCheckName, Type: ir.Type, Source: source, TypeImage: ti, Tags: tp.Tags, Timeout: imageCheckTimeout,
	}}
	version, err := x.imageCheck(ctx, p, check)
	if err != nil {
		return taskImage{}, fmt.Errorf("check %s:%s: %w", repository, tag, err)
	}
	if version == nil {
		return taskImage{}, fmt.Errorf("check %s:%s found no version: the repository or the tag does not exist", repository, tag)
	}
	ref, err := taskconfig.PinnedImage(source, version)
	if err != nil {
		return taskImage{}, fmt.Errorf("check %s:%s of type %q gives no image: %w", repository, tag, ir.Type, err)
	}
	x.r.images.Put(key, version["digest"])
	x.r.log.Info("task image checked", "build", x.b.ID, "task", tp.Name, "image", ref)
	return taskImage{ref: ref, pull: pull}, nil
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
	r := x.b.record(p.ID, cp.Name, concourse.KindCheck)
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
func (x *RunState) removeImageCheck(ctx context.Context, r *StepRecord) {
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

// pullAuth is the registry login of a source (nil: none).
func pullAuth(source map[string]any) (*podspec.RegistryAuth, error) {
	username, password, err := taskconfig.RegistryCredentials(source)
	if err != nil || username == "" {
		return nil, err
	}
	return &podspec.RegistryAuth{Username: username, Password: password}, nil
}
