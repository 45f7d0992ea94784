package pipeline

import (
	"fmt"
	"strings"

	"github.com/porter-ci/porter/pkg/concourse"
)

// typeChain is how a resource type's image is obtained: the custom types
// whose images fetch one another, the type itself first, down to the base
// type at the bottom. A base type's chain has no custom types.
type typeChain struct {
	custom []*concourse.ResourceType
	base   string
	err    error
}

// typeResolver resolves types to their chains, each type once per pass
// (a validation or the planning of one plan): resolving every step and
// every type of a pipeline then costs what the chains' lengths add up to,
// however the types nest.
type typeResolver struct {
	byName map[string]*concourse.ResourceType
	base   []string
	memo   map[string]typeChain
}

func newTypeResolver(types []concourse.ResourceType, base []string) *typeResolver {
	byName := make(map[string]*concourse.ResourceType, len(types))
	for i := range types {
		// The first of a name wins, as a lookup in order finds it;
		// duplicates are refused by validation anyway.
		if _, dup := byName[types[i].Name]; !dup {
			byName[types[i].Name] = &types[i]
		}
	}
	return &typeResolver{byName: byName, base: base, memo: map[string]typeChain{}}
}

// chain resolves typ. A type is fetched by its own type, looked up among
// the types not yet on the chain (a type never fetches itself, and a
// custom type may shadow the base type of its name), so the walk follows
// one parent per type and ends at a base type, an unknown name, a cycle or
// MaxTypeChainDepth; it never walks further than the cap.
func (r *typeResolver) chain(typ string) typeChain {
	if c, ok := r.memo[typ]; ok {
		return c
	}
	var c typeChain
	on := map[string]bool{}
	for name := typ; ; {
		t, ok := r.byName[name]
		if ok && !on[name] {
			if len(c.custom) == MaxTypeChainDepth {
				c.err = &TypeChainTooDeepError{Type: typ}
				break
			}
			on[name] = true
			c.custom = append(c.custom, t)
			name = t.Type
			continue
		}
		switch {
		case contains(r.base, name):
			c.base = name
		case on[name]:
			c.err = fmt.Errorf("resource types form a cycle: %s (a type cannot fetch the image of a type it is fetched for)", cyclePath(c.custom, name))
		case len(c.custom) > 0:
			c.err = fmt.Errorf("resource type '%s': unknown resource type '%s'", c.custom[len(c.custom)-1].Name, name)
		default:
			c.err = fmt.Errorf("unknown resource type '%s'", name)
		}
		break
	}
	r.memo[typ] = c
	return c
}

// cyclePath reads a cycle from the type that closes it: "a -> b -> a".
func cyclePath(chain []*concourse.ResourceType, closing string) string {
	var names []string
	for _, t := range chain {
		if len(names) > 0 || t.Name == closing {
			names = append(names, t.Name)
		}
	}
	return strings.Join(append(names, closing), " -> ")
}

// TypeChainTooDeepError is a resource type whose image is fetched through
// more than MaxTypeChainDepth custom types.
type TypeChainTooDeepError struct {
	Type string
}

func (e *TypeChainTooDeepError) Error() string {
	return fmt.Sprintf("resource type %s: type chain deeper than %d (the limit)", e.Type, MaxTypeChainDepth)
}

// image says how the image of a step of type typ is obtained: a base
// type's image comes with the worker; a custom type's is checked (and, in
// Concourse's shape, fetched) by its own type, resolved the same way down
// the chain. Sub-plan ids extend id, as Concourse's do.
//
// Only the check carries the whole chain below it: the executor takes an
// image from the check's version, and the get's image is the check's, so
// the get names just the base type and privilege of the image it would
// run with. Concourse repeats the chain under both, which doubles the plan
// with every level.
func (r *typeResolver) image(id concourse.PlanID, typ string, tags []string) (concourse.TypeImage, error) {
	c := r.chain(typ)
	if c.err != nil {
		return concourse.TypeImage{}, c.err
	}
	return chainImage(id, c.custom, c.base, tags), nil
}

func chainImage(id concourse.PlanID, custom []*concourse.ResourceType, base string, tags []string) concourse.TypeImage {
	if len(custom) == 0 {
		return concourse.TypeImage{BaseType: base}
	}
	t := custom[0]
	if len(t.Tags) > 0 {
		tags = t.Tags
	}
	checkID := id + "/image-check"
	parent := chainImage(checkID, custom[1:], base, tags)
	check := concourse.Plan{ID: checkID, Check: &concourse.CheckPlan{
		Name:      t.Name,
		Type:      t.Type,
		Source:    t.Source,
		TypeImage: parent,
		Tags:      tags,
	}}
	getImage := concourse.TypeImage{BaseType: parent.BaseType, Privileged: parent.Privileged}
	get := concourse.Plan{ID: id + "/image-get", Get: &concourse.GetPlan{
		Name:        t.Name,
		Type:        t.Type,
		Source:      t.Source,
		Params:      t.Params,
		TypeImage:   getImage,
		VersionFrom: &check.ID,
		Tags:        tags,
	}}
	return concourse.TypeImage{
		// The base type at the bottom of the chain runs the image fetch.
		BaseType:   base,
		Privileged: t.Privileged,
		CheckPlan:  &check,
		GetPlan:    &get,
	}
}
