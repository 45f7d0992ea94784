// Package resourceimage is the image a check, get or put runs: a base
// type's, from the server's configuration; the base mock's, for a type
// that is a mock mirroring itself; or a pipeline's own type's, pinned at
// the version its image's check or get found. Running that check is
// exec's: this package runs nothing, so the lookahead can also tell
// whether a step's image is known before its turn.
package resourceimage

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/porter-ci/porter/pkg/atc/exec/basetypes"
	"github.com/porter-ci/porter/pkg/concourse"
)

// Images are the server's images of the base types, by name (nil:
// basetypes.Images).
type Images map[string]string

func (im Images) all() map[string]string {
	if im == nil {
		return basetypes.Images()
	}
	return im
}

// Mock is the image of the base type mock, which a mock mirroring itself
// gives.
func (im Images) Mock() (string, bool) {
	image, ok := im.all()[basetypes.Mock]
	return image, ok
}

// Known is the image of ti when no check has to run for it (ok): a base
// type's (an error when the server has no image for it) or a mock
// mirroring itself. Otherwise the type's image is pinned from a version
// (Source, Pinned).
func (im Images) Known(ti concourse.TypeImage) (image string, ok bool, err error) {
	// A pipeline's own type names the base type at the bottom of its chain
	// too; its image is the one its check finds.
	if ti.BaseType != "" && ti.CheckPlan == nil && ti.GetPlan == nil {
		types := im.all()
		image, ok := types[ti.BaseType]
		if !ok {
			return "", true, fmt.Errorf("resource type %q: this server has no image for it (known base types: %s; add one with --base-resource-type NAME=IMAGE)",
				ti.BaseType, strings.Join(slices.Sorted(maps.Keys(types)), ", "))
		}
		return image, true, nil
	}
	if basetypes.TypeMirrorsSelf(ti) {
		image, ok := im.Mock()
		return image, ok, nil
	}
	return "", false, nil
}

// Source is what a pipeline's type's image comes from, as its get gives
// it: the source, type and version (nil: its check is to find it).
func Source(ti concourse.TypeImage) (source map[string]any, typ string, version map[string]string) {
	if ti.GetPlan != nil && ti.GetPlan.Get != nil {
		g := ti.GetPlan.Get
		return g.Source, g.Type, g.Version
	}
	return nil, "", nil
}

// NeedsCheck says whether the image of ti is known only once its check
// ran: neither Known nor pinned to a version by its get.
func (im Images) NeedsCheck(ti concourse.TypeImage) bool {
	if _, ok, _ := im.Known(ti); ok {
		return false
	}
	_, _, version := Source(ti)
	return version == nil
}

// Pinned is the image of resource type typ, a pipeline's own, at version
// of its image's resource (of type from, with source, its ((vars)) filled
// in): only a registry-image-like type gives an image, its
// source.repository at the version's digest.
func Pinned(typ, from string, source map[string]any, version map[string]string) (string, error) {
	repo, _ := source["repository"].(string)
	digest := version["digest"]
	if repo == "" || !strings.HasPrefix(digest, "sha256:") {
		return "", fmt.Errorf("resource type %q: its image comes from a %q resource, but only registry-image-like types (source.repository and a version with a sha256 digest) can give an image", typ, from)
	}
	return repo + "@" + digest, nil
}
