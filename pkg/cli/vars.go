package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// Task files may hold ((vars)) that execute fills from -v, -y and -l, as
// fly does: an unknown var is left as it is, a value that is the whole
// string keeps its type, and one inside a longer string must be a string
// or a number.

// varPattern is Concourse's: ((name)), ((name.field)), ((source:name)).
var varPattern = regexp.MustCompile(`\(\((([-/\.\w\pL]+\:)?[-/\.:@"\w\pL]+)\)\)`)

// templateVars are the values of ((vars)): flags first, then files (later
// files win over earlier ones).
type templateVars struct {
	flags map[string]any
	files []map[string]any
}

// loadVars collects -v NAME=STRING, -y NAME=YAML and -l FILE.
func loadVars(vars, yamlVars, files []string) (templateVars, error) {
	tv := templateVars{flags: map[string]any{}}
	for _, kv := range vars {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return tv, fmt.Errorf("invalid variable pair '%s' (must be name=value)", kv)
		}
		if err := setVar(tv.flags, k, v); err != nil {
			return tv, err
		}
	}
	for _, kv := range yamlVars {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return tv, fmt.Errorf("invalid variable pair '%s' (must be name=value)", kv)
		}
		var val any
		if err := yaml.Unmarshal([]byte(v), &val); err != nil {
			return tv, fmt.Errorf("-y %s: %w", k, err)
		}
		if err := setVar(tv.flags, k, val); err != nil {
			return tv, err
		}
	}
	for i := len(files) - 1; i >= 0; i-- {
		data, err := os.ReadFile(files[i])
		if err != nil {
			return tv, fmt.Errorf("could not read template variables file (%s): %w", files[i], err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(data, &m); err != nil {
			return tv, fmt.Errorf("could not unmarshal template variables (%s): %w", files[i], err)
		}
		tv.files = append(tv.files, m)
	}
	return tv, nil
}

// setVar sets a flag's var; "a.b=v" sets field b of var a, as fly does.
func setVar(m map[string]any, name string, v any) error {
	path := strings.Split(name, ".")
	for i, p := range path {
		if p == "" {
			return fmt.Errorf("invalid var '%s': empty field", name)
		}
		if i == len(path)-1 {
			m[p] = v
			return nil
		}
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	return nil
}

// lookup finds a var: "name", "name.field..." or ".:name"; vars of other
// sources are not this client's to know.
func (tv templateVars) lookup(ref string) (any, bool) {
	if src, name, ok := strings.Cut(ref, ":"); ok {
		if src != "." {
			return nil, false
		}
		ref = name
	}
	path := strings.Split(strings.ReplaceAll(ref, `"`, ""), ".")
	for _, m := range append([]map[string]any{tv.flags}, tv.files...) {
		if v, ok := dig(m, path); ok {
			return v, true
		}
	}
	return nil, false
}

func dig(m map[string]any, path []string) (any, bool) {
	v, ok := m[path[0]]
	for _, p := range path[1:] {
		if !ok {
			return nil, false
		}
		sub, isMap := v.(map[string]any)
		if !isMap {
			return nil, false
		}
		v, ok = sub[p]
	}
	return v, ok
}

// interpolate fills the ((vars)) of a YAML document and returns it as JSON.
func (tv templateVars) interpolate(doc []byte) ([]byte, error) {
	var tree any
	if err := yaml.Unmarshal(doc, &tree); err != nil {
		return nil, fmt.Errorf("parse task config: %w", err)
	}
	tree, err := tv.fill(tree)
	if err != nil {
		return nil, err
	}
	out, err := json.Marshal(tree)
	if err != nil {
		return nil, fmt.Errorf("encode task config: %w", err)
	}
	return out, nil
}

func (tv templateVars) fill(node any) (any, error) {
	switch n := node.(type) {
	case map[string]any:
		out := make(map[string]any, len(n))
		for k, v := range n {
			fk, err := tv.fill(k)
			if err != nil {
				return nil, err
			}
			key, ok := fk.(string)
			if !ok {
				key = fmt.Sprint(fk)
			}
			if out[key], err = tv.fill(v); err != nil {
				return nil, err
			}
		}
		return out, nil
	case []any:
		for i, v := range n {
			var err error
			if n[i], err = tv.fill(v); err != nil {
				return nil, err
			}
		}
		return n, nil
	case string:
		return tv.fillString(n)
	}
	return node, nil
}

func (tv templateVars) fillString(s string) (any, error) {
	matches := varPattern.FindAllStringSubmatch(s, -1)
	for _, m := range matches {
		v, ok := tv.lookup(m[1])
		if !ok {
			continue
		}
		if m[0] == s {
			return v, nil // the whole value: keep its type
		}
		switch v.(type) {
		case string, float64, int, int64, json.Number:
			s = strings.ReplaceAll(s, m[0], fmt.Sprint(v))
		default:
			return nil, fmt.Errorf("cannot interpolate non-primitive value (%T) from var '%s'", v, m[1])
		}
	}
	return s, nil
}
