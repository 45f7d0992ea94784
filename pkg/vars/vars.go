package vars

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// Resolver looks vars up. Get returns the value of the var named by
// ref.Source and ref.Path; ref.Fields are picked out of that value by the
// caller, so a resolver need not handle them.
type Resolver interface {
	Get(ctx context.Context, ref Ref) (value any, found bool, err error)
}

// Static resolves vars of the default source from a map, as a task's
// `vars:` or `fly -v` do.
type Static map[string]any

// Get returns the var named ref.Path; refs to other sources are not found.
func (s Static) Get(_ context.Context, ref Ref) (any, bool, error) {
	if ref.Source != "" {
		return nil, false, nil
	}
	v, ok := s[ref.Path]
	return v, ok, nil
}

// Multi tries resolvers in order; the first to find the var, or to fail,
// answers.
type Multi []Resolver

// Get asks each resolver in turn.
func (m Multi) Get(ctx context.Context, ref Ref) (any, bool, error) {
	for _, r := range m {
		v, found, err := r.Get(ctx, ref)
		if found || err != nil {
			return v, found, err
		}
	}
	return nil, false, nil
}

// UndefinedVarsError lists every var no resolver had.
type UndefinedVarsError struct {
	Vars []string
}

func (e *UndefinedVarsError) Error() string {
	return "undefined vars: " + strings.Join(e.Vars, ", ")
}

// Used are the vars an interpolation read, by name as written in the
// config (source:path.field), with the value it used as text (JSON for
// lists and maps).
type Used map[string]string

// Redactions are the strings that must not appear in logs: every used
// value and, for lists and maps, every scalar inside them.
func (u Used) Redactions() []string {
	set := map[string]bool{}
	for _, v := range u {
		set[v] = true
		var tree any
		if json.Unmarshal([]byte(v), &tree) == nil {
			collectLeaves(tree, set)
		}
	}
	delete(set, "")
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

func collectLeaves(v any, set map[string]bool) {
	switch n := v.(type) {
	case map[string]any:
		for _, x := range n {
			collectLeaves(x, set)
		}
	case []any:
		for _, x := range n {
			collectLeaves(x, set)
		}
	case string:
		set[n] = true
	}
}

// varPattern finds ((vars)): an optional source, then the name, which may
// hold quoted segments.
var varPattern = regexp.MustCompile(`\(\((([-/\.\w\pL]+:)?[-/\.:@"\w\pL]+)\)\)`)

// Interpolate returns a copy of value with every var filled in. value is
// what encoding/json or sigs.k8s.io/yaml decode: maps, lists, strings,
// numbers, booleans and nil; map keys are interpolated too. Every var no
// resolver has is listed in one *UndefinedVarsError.
func Interpolate(ctx context.Context, value any, r Resolver) (any, Used, error) {
	in := &interpolator{ctx: ctx, r: r, used: Used{}, undefined: map[string]bool{}}
	out, err := in.node(value)
	if err != nil {
		return nil, nil, err
	}
	if len(in.undefined) > 0 {
		names := make([]string, 0, len(in.undefined))
		for n := range in.undefined {
			names = append(names, n)
		}
		sort.Strings(names)
		return nil, nil, &UndefinedVarsError{Vars: names}
	}
	return out, in.used, nil
}

// InterpolateTemplate fills in the vars of a YAML or JSON document (a task
// config file, say) and returns it as JSON, which YAML readers also read.
func InterpolateTemplate(ctx context.Context, data []byte, r Resolver) ([]byte, Used, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, nil, fmt.Errorf("parse template: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, nil, fmt.Errorf("parse template: %w", err)
	}
	out, used, err := Interpolate(ctx, tree, r)
	if err != nil {
		return nil, nil, err
	}
	result, err := json.Marshal(out)
	if err != nil {
		return nil, nil, fmt.Errorf("write template: %w", err)
	}
	return result, used, nil
}

// InterpolateTemplateDefined is InterpolateTemplate that leaves the vars
// r does not have as they are written, for a later lookup: a
// set_pipeline's config keeps its credentials' ((vars)) for the builds.
func InterpolateTemplateDefined(ctx context.Context, data []byte, r Resolver) ([]byte, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("parse template: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, fmt.Errorf("parse template: %w", err)
	}
	in := &interpolator{ctx: ctx, r: r, used: Used{}, undefined: map[string]bool{}}
	out, err := in.node(tree)
	if err != nil {
		return nil, err
	}
	result, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("write template: %w", err)
	}
	return result, nil
}

// Names lists the vars written in s, in order, as written.
func Names(s string) []string {
	var out []string
	for _, m := range varPattern.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

type interpolator struct {
	ctx       context.Context
	r         Resolver
	used      Used
	undefined map[string]bool
}

func (in *interpolator) node(v any) (any, error) {
	switch n := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(n))
		for k, x := range n {
			key, err := in.key(k)
			if err != nil {
				return nil, err
			}
			if out[key], err = in.node(x); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[any]any:
		out := make(map[any]any, len(n))
		for k, x := range n {
			key := k
			if s, ok := k.(string); ok {
				var err error
				if key, err = in.key(s); err != nil {
					return nil, err
				}
			}
			var err error
			if out[key], err = in.node(x); err != nil {
				return nil, err
			}
		}
		return out, nil
	case []any:
		out := make([]any, len(n))
		for i, x := range n {
			var err error
			if out[i], err = in.node(x); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[string]string:
		out := make(map[string]any, len(n))
		for k, x := range n {
			key, err := in.key(k)
			if err != nil {
				return nil, err
			}
			if out[key], err = in.str(x); err != nil {
				return nil, err
			}
		}
		return out, nil
	case []string:
		out := make([]any, len(n))
		for i, x := range n {
			var err error
			if out[i], err = in.str(x); err != nil {
				return nil, err
			}
		}
		return out, nil
	case string:
		return in.str(n)
	}
	return v, nil
}

// key interpolates a map key, which must stay a string.
func (in *interpolator) key(k string) (string, error) {
	v, err := in.embedded(k)
	if err != nil {
		return "", err
	}
	return v, nil
}

// str interpolates a string: one that is exactly a var becomes its value.
func (in *interpolator) str(s string) (any, error) {
	if m := varPattern.FindStringSubmatchIndex(s); m != nil && m[0] == 0 && m[1] == len(s) {
		v, found, err := in.lookup(s[m[2]:m[3]])
		if err != nil || !found {
			return s, err
		}
		return v, nil
	}
	return in.embedded(s)
}

// embedded writes the vars of s into it as text.
func (in *interpolator) embedded(s string) (string, error) {
	var firstErr error
	out := varPattern.ReplaceAllStringFunc(s, func(match string) string {
		if firstErr != nil {
			return match
		}
		name := match[2 : len(match)-2]
		v, found, err := in.lookup(name)
		if err != nil {
			firstErr = err
			return match
		}
		if !found {
			return match
		}
		text, ok := scalarText(v)
		if !ok {
			firstErr = fmt.Errorf("cannot interpolate non-primitive value (%s) from var: %s", describe(v), name)
			return match
		}
		return text
	})
	return out, firstErr
}

// lookup resolves a var and picks its fields, recording it as used or
// undefined.
func (in *interpolator) lookup(name string) (any, bool, error) {
	ref, err := ParseRef(name)
	if err != nil {
		return nil, false, err
	}
	v, found, err := in.r.Get(in.ctx, ref)
	if err != nil {
		return nil, false, fmt.Errorf("get var %s: %w", ref, err)
	}
	if !found {
		in.undefined[ref.String()] = true
		return nil, false, nil
	}
	v, err = Traverse(v, ref)
	if err != nil {
		return nil, false, err
	}
	if text, ok := scalarText(v); ok {
		in.used[ref.String()] = text
	} else if js, err := json.Marshal(v); err == nil {
		in.used[ref.String()] = string(js)
	}
	return v, true, nil
}

// Traverse picks ref.Fields out of a var's value.
func Traverse(v any, ref Ref) (any, error) {
	for _, f := range ref.Fields {
		var found bool
		switch m := v.(type) {
		case map[string]any:
			v, found = m[f]
		case map[any]any:
			v, found = m[f]
		case map[string]string:
			v, found = m[f]
		default:
			return nil, fmt.Errorf("cannot access field '%s' of non-map value (%s) from var: %s", f, describe(v), ref)
		}
		if !found {
			return nil, fmt.Errorf("missing field '%s' in var: %s", f, ref)
		}
	}
	return v, nil
}

// scalarText writes a string, number or boolean as it reads in a config.
func scalarText(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case json.Number:
		return x.String(), true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	case float32:
		return strconv.FormatFloat(float64(x), 'f', -1, 32), true
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, bool:
		return fmt.Sprint(x), true
	}
	return "", false
}

func describe(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any, map[any]any, map[string]string:
		return "a map"
	case []any, []string:
		return "a list"
	}
	return fmt.Sprintf("%T", v)
}
