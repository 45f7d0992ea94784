// Package basetypes is the server's base resource types: the images that
// provide them and the source defaults (--base-resource-type-defaults) a
// step of a base type gets under its own source.
package basetypes

import (
	"cmp"
	"maps"
	"slices"

	"github.com/porter-ci/porter/pkg/concourse"
)

// Defaults are source defaults by base resource type name.
type Defaults map[string]map[string]any

// Images are the images of the base resource types when no
// --base-resource-type flag names them.
func Images() map[string]string {
	return map[string]string{
		"registry-image": "porter.local/resource-registry-image:dev",
		"git":            "porter.local/resource-git:dev",
		"time":           "porter.local/resource-time:dev",
		"mock":           "porter.local/resource-mock:dev",
	}
}

// Mock is the base type whose resource can be its own image.
const Mock = "mock"

// MirrorsSelf says whether a resource of type typ (ti: how its type's
// image is obtained) with source and get params gives its own image, as
// Concourse's mock does: it asks to (source.mirror_self or
// params.mirror_self_via_params), and its type is the base mock or a
// pipeline's type whose image is such a mock (TypeMirrorsSelf). Its image
// is then the base mock type's, and no check or get need run for it.
func MirrorsSelf(typ string, ti concourse.TypeImage, source, params map[string]any) bool {
	self, _ := source["mirror_self"].(bool)
	viaParams, _ := params["mirror_self_via_params"].(bool)
	if !self && !viaParams {
		return false
	}
	if ti.CheckPlan == nil && ti.GetPlan == nil {
		return typ == Mock && cmp.Or(ti.BaseType, typ) == Mock
	}
	return TypeMirrorsSelf(ti)
}

// TypeMirrorsSelf says whether ti, the image of a pipeline's resource type,
// is a mock mirroring itself: the type is of type mock (or of such a type)
// with mirror_self in its source or mirror_self_via_params in its params.
func TypeMirrorsSelf(ti concourse.TypeImage) bool {
	if ti.CheckPlan == nil || ti.CheckPlan.Check == nil {
		return false
	}
	c := ti.CheckPlan.Check
	var params map[string]any
	if ti.GetPlan != nil && ti.GetPlan.Get != nil {
		params = ti.GetPlan.Get.Params
	}
	return MirrorsSelf(c.Type, c.TypeImage, c.Source, params)
}

// Names are the names of the base resource types (nil: Images).
func Names(types map[string]string) []string {
	if types == nil {
		types = Images()
	}
	return slices.Sorted(maps.Keys(types))
}

// MergeSource is source over defaults (a new map; neither is changed).
// Like Concourse's, the merge is shallow: a key the source sets replaces
// the default's whole value.
func MergeSource(defaults, source map[string]any) map[string]any {
	merged := make(map[string]any, len(defaults)+len(source))
	maps.Copy(merged, defaults)
	maps.Copy(merged, source)
	return merged
}

// Source is an image_resource's source over its type's defaults: a
// pipeline resource type's own, or the server's for a base type.
func (d Defaults) Source(typ string, types []concourse.ResourceType, source map[string]any) map[string]any {
	for _, t := range types {
		if t.Name == typ {
			return MergeSource(t.Defaults, source)
		}
	}
	return MergeSource(d[typ], source)
}

// Apply is a resource step with the server's defaults of its base type
// under its source. A step of a pipeline's own type got that type's
// defaults when it was planned.
func (d Defaults) Apply(p *concourse.Plan) *concourse.Plan {
	defaults := d
	if len(defaults) == 0 {
		return p
	}
	base := func(typ string, ti concourse.TypeImage) (map[string]any, bool) {
		d, ok := defaults[typ]
		return d, ok && ti.CheckPlan == nil && ti.GetPlan == nil && cmp.Or(ti.BaseType, typ) == typ
	}
	q := *p
	switch {
	case p.Get != nil:
		if d, ok := base(p.Get.Type, p.Get.TypeImage); ok {
			g := *p.Get
			g.Source = MergeSource(d, g.Source)
			q.Get = &g
		}
	case p.Put != nil:
		if d, ok := base(p.Put.Type, p.Put.TypeImage); ok {
			put := *p.Put
			put.Source = MergeSource(d, put.Source)
			q.Put = &put
		}
	case p.Check != nil:
		if d, ok := base(p.Check.Type, p.Check.TypeImage); ok {
			c := *p.Check
			c.Source = MergeSource(d, c.Source)
			q.Check = &c
		}
	}
	return &q
}
