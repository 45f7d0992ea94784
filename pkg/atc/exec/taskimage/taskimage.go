// Package taskimage resolves a task's image to a registry image pinned by
// digest: the pod runs repository@sha256:digest and the kubelet pulls it,
// so no image content passes through Porter. An image_resource resolves
// with its version's digest, a digest checked within the cache's TTL, or
// its type's check (which the caller runs as a step of the build); a
// step's image: takes the digest a get of the build fetched.
package taskimage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/porter-ci/porter/pkg/atc/exec/basetypes"
	"github.com/porter-ci/porter/pkg/atc/exec/imagecache"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/pipeline"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/taskconfig"
)

const (
	// CacheTTL is how long a checked image digest is reused: repeated `fly
	// execute`s do not pay a check pod each, and a pushed tag is seen
	// within a minute.
	CacheTTL = time.Minute
	// CacheSize bounds the cache: the number of (team, type, source)
	// resolutions kept.
	CacheSize = 1024
	// checkTimeout bounds an image check, which holds up its task.
	checkTimeout = "5m"
	// checkName is the name of an image check step, as Concourse's.
	checkName = "image"
	// CheckSuffix ends the plan ID of a task image's check.
	CheckSuffix = "/image-check"
)

// Image is what a task's image resolved to.
type Image struct {
	Ref string // repository@sha256:digest
	// Pull is the login the kubelet pulls with (nil: none).
	Pull *podspec.RegistryAuth
}

// Fetched is what a get of the build fetched into an artifact, for a task
// whose image: names it. It is kept in memory only: the source may hold
// credentials, which must not reach the build's stored state.
type Fetched struct {
	Type    string
	Source  map[string]any
	Version map[string]string
	// MirrorSelf: the get was of a mock mirroring itself
	// (basetypes.MirrorsSelf), whose image is the base mock type's.
	MirrorSelf bool
}

// FromGet is the image a registry-image-like get fetched: its source's
// repository (source: the get's, its ((vars)) filled in) at its version's
// digest.
func FromGet(f Fetched, source map[string]any) (Image, error) {
	ref, err := taskconfig.PinnedImage(source, f.Version)
	if err != nil {
		return Image{}, fmt.Errorf("comes from a get of type %q, which gives no image (a registry-image-like resource has source.repository and versions with a sha256 digest): %w", f.Type, err)
	}
	pull, err := PullAuth(source)
	if err != nil {
		return Image{}, fmt.Errorf("has a source without a usable registry login: %w", err)
	}
	return Image{Ref: ref, Pull: pull}, nil
}

// Resolver resolves image_resources, one for all builds.
type Resolver struct {
	Cache     *imagecache.Cache
	BaseTypes []string
	Defaults  basetypes.Defaults
	// BaseImages are the base types' images (nil: basetypes.Images), for
	// a mock image_resource that mirrors itself.
	BaseImages map[string]string
}

// mirrorSelf is the image of a base mock image_resource that mirrors
// itself (basetypes.MirrorsSelf): the image the server runs the mock type
// in, with no check, as a step pod runs an image and not a fetched rootfs.
func (r Resolver) mirrorSelf(ti concourse.TypeImage, ir *taskconfig.ImageResource, source map[string]any) (Image, bool, error) {
	if !basetypes.MirrorsSelf(ir.Type, ti, source, ir.Params) {
		return Image{}, false, nil
	}
	images := r.BaseImages
	if images == nil {
		images = basetypes.Images()
	}
	ref, ok := images[basetypes.Mock]
	if !ok {
		return Image{}, true, fmt.Errorf("mirror_self: this server has no image for base type %q", basetypes.Mock)
	}
	return Image{Ref: ref}, true, nil
}

// Request is one task's image_resource to resolve.
type Request struct {
	Task   *concourse.Plan
	TeamID int
	Image  *taskconfig.ImageResource
	// Warn shows a warning in the task's log.
	Warn func(msg string)
	// Log is the build's logger.
	Log *slog.Logger
	// Check runs the check of the image (its plan) and returns the latest
	// version it found (nil: none).
	Check func(ctx context.Context, check *concourse.Plan) (map[string]string, error)
}

// ImageResource resolves an image_resource: its version's digest, a
// digest checked within CacheTTL, or its type's check now.
func (r Resolver) ImageResource(ctx context.Context, req Request) (Image, error) {
	p, ir := req.Task, req.Image
	tp := p.Task
	var types []concourse.ResourceType
	if len(tp.ResourceTypes) > 0 && string(tp.ResourceTypes) != "null" {
		if err := json.Unmarshal(tp.ResourceTypes, &types); err != nil {
			return Image{}, fmt.Errorf("the pipeline's resource types: %w", err)
		}
	}
	if ir.Type == "" {
		return Image{}, errors.New("missing type")
	}
	checkID := p.ID + CheckSuffix
	ti, err := pipeline.TypeImage(checkID, ir.Type, tp.Tags, types, pipeline.PlanOptions{BaseTypes: r.BaseTypes})
	if err != nil {
		return Image{}, err
	}
	source := r.Defaults.Source(ir.Type, types, ir.Source)
	if img, ok, err := r.mirrorSelf(ti, ir, source); ok {
		return img, err
	}
	// Checked before any pod runs: without a repository no check can give
	// an image.
	repository, err := taskconfig.ImageRepository(source)
	if err != nil {
		return Image{}, fmt.Errorf("type %q: %w", ir.Type, err)
	}
	pull, err := PullAuth(source)
	if err != nil {
		return Image{}, fmt.Errorf("%s: %w", repository, err)
	}
	if len(ir.Params) > 0 {
		req.Warn("[WARNING] image_resource params are ignored: the image is not fetched by a get, the kubelet pulls it by digest\n")
	}
	if ir.Version != nil {
		ref, err := taskconfig.PinnedImage(source, ir.Version)
		if err != nil {
			return Image{}, fmt.Errorf("%s: %w", repository, err)
		}
		return Image{Ref: ref, Pull: pull}, nil
	}

	key, err := imagecache.Key(req.TeamID, ir.Type, ti, types, source)
	if err != nil {
		return Image{}, err
	}
	if digest, ok := r.Cache.Get(key); ok {
		ref, err := taskconfig.PinnedImage(source, map[string]string{"digest": digest})
		if err == nil {
			req.Log.Info("task image from the image cache", "task", tp.Name, "image", ref)
			return Image{Ref: ref, Pull: pull}, nil
		}
	}
	tag, err := taskconfig.ImageTag(source)
	if err != nil {
		return Image{}, fmt.Errorf("%s: %w", repository, err)
	}
	check := &concourse.Plan{ID: checkID, Check: &concourse.CheckPlan{
		Name: checkName, Type: ir.Type, Source: source, TypeImage: ti, Tags: tp.Tags, Timeout: checkTimeout,
	}}
	version, err := req.Check(ctx, check)
	if err != nil {
		return Image{}, fmt.Errorf("check %s:%s: %w", repository, tag, err)
	}
	if version == nil {
		return Image{}, fmt.Errorf("check %s:%s found no version: the repository or the tag does not exist", repository, tag)
	}
	ref, err := taskconfig.PinnedImage(source, version)
	if err != nil {
		return Image{}, fmt.Errorf("check %s:%s of type %q gives no image: %w", repository, tag, ir.Type, err)
	}
	r.Cache.Put(key, version["digest"])
	req.Log.Info("task image checked", "task", tp.Name, "image", ref)
	return Image{Ref: ref, Pull: pull}, nil
}

// PullAuth is the registry login of a source (nil: none).
func PullAuth(source map[string]any) (*podspec.RegistryAuth, error) {
	username, password, err := taskconfig.RegistryCredentials(source)
	if err != nil || username == "" {
		return nil, err
	}
	return &podspec.RegistryAuth{Username: username, Password: password}, nil
}
