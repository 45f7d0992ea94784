// Package pipeline reads, validates and compiles Concourse pipeline configs:
// Parse turns what `fly set-pipeline` sends into concourse.Config, Validate
// reports what Concourse would refuse or warn about, and JobPlan/CheckPlan
// compile a job or a resource check into a build plan.
package pipeline

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/porter-ci/porter/pkg/concourse"
)

// Parse reads a pipeline config (YAML or JSON) strictly: an unknown key in a
// group, resource, resource type, job or step is an error naming where it
// is. Unknown top-level keys are ignored, as Concourse does, so that
// pipelines can keep YAML anchors under keys of their own.
func Parse(data []byte) (*concourse.Config, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("parse pipeline config: %w", err)
	}
	if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
		return nil, errors.New("parse pipeline config: config is empty")
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil {
		return nil, errors.New("parse pipeline config: config must be an object")
	}

	p := &parser{}
	cfg := &concourse.Config{}
	p.list(top["groups"], "groups", func(raw json.RawMessage, loc string) {
		var g concourse.GroupConfig
		if p.strict(raw, loc, &g, nil) {
			cfg.Groups = append(cfg.Groups, g)
		}
	})
	p.list(top["resources"], "resources", func(raw json.RawMessage, loc string) {
		var r concourse.ResourceConfig
		if p.strict(raw, loc, &r, nil) {
			cfg.Resources = append(cfg.Resources, r)
		}
	})
	p.list(top["resource_types"], "resource_types", func(raw json.RawMessage, loc string) {
		var t concourse.ResourceType
		if p.strict(raw, loc, &t, nil) {
			cfg.ResourceTypes = append(cfg.ResourceTypes, t)
		}
	})
	p.list(top["jobs"], "jobs", func(raw json.RawMessage, loc string) {
		if j, ok := p.job(raw, loc); ok {
			cfg.Jobs = append(cfg.Jobs, j)
		}
	})
	p.value(top["var_sources"], "var_sources", &cfg.VarSources)
	p.value(top["prototypes"], "prototypes", &cfg.Prototypes)
	p.value(top["display"], "display", &cfg.Display)
	if len(p.errs) > 0 {
		return nil, fmt.Errorf("parse pipeline config: %w", errors.Join(p.errs...))
	}
	return cfg, nil
}

// parser collects every problem of a config so that one run reports them
// all.
type parser struct {
	errs []error
	// depth is how deep the step being read is nested (a job's own steps
	// and hooks are 1); tooDeep is set once MaxNestingDepth was passed.
	// Each level reads the whole of what it holds, so an unbounded depth
	// would cost its square.
	depth   int
	tooDeep bool
}

func (p *parser) errorf(loc, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s: %s", loc, fmt.Sprintf(format, args...)))
}

// list calls f for each element of a JSON list found under loc.
func (p *parser) list(raw json.RawMessage, loc string, f func(json.RawMessage, string)) {
	if isNull(raw) {
		return
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		p.errorf(loc, "must be a list")
		return
	}
	for i, item := range items {
		f(item, fmt.Sprintf("%s[%d]", loc, i))
	}
}

// value decodes raw into dst, keeping numbers exact.
func (p *parser) value(raw json.RawMessage, loc string, dst any) bool {
	if isNull(raw) {
		return true
	}
	if err := decode(raw, dst); err != nil {
		p.errorf(loc, "%s", describeDecodeError(err))
		return false
	}
	return true
}

// strict decodes the object raw into the struct dst, refusing keys dst has
// no field for. extra are keys accepted and dropped.
func (p *parser) strict(raw json.RawMessage, loc string, dst any, extra []string) bool {
	obj, ok := p.object(raw, loc)
	if !ok {
		return false
	}
	loc = named(loc, obj)
	fields := jsonFields(reflect.TypeOf(dst).Elem())
	v := reflect.ValueOf(dst).Elem()
	ok = true
	for _, key := range sortedKeys(obj) {
		idx, known := fields[key]
		if !known {
			if !contains(extra, key) {
				p.errorf(loc, "unknown key %q", key)
				ok = false
			}
			continue
		}
		if !p.value(obj[key], loc+"."+key, v.Field(idx).Addr().Interface()) {
			ok = false
		}
	}
	return ok
}

func (p *parser) object(raw json.RawMessage, loc string) (map[string]json.RawMessage, bool) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		p.errorf(loc, "must be an object")
		return nil, false
	}
	return obj, true
}

// jobKeysDropped are job keys Concourse accepts that this server has no
// use for.
func jobKeysDropped() []string { return []string{"disable_reruns"} }

func (p *parser) job(raw json.RawMessage, loc string) (concourse.JobConfig, bool) {
	var j concourse.JobConfig
	obj, ok := p.object(raw, loc)
	if !ok {
		return j, false
	}
	loc = named(loc, obj)
	plain := map[string]json.RawMessage{}
	for k, v := range obj {
		switch k {
		case "plan", "on_success", "on_failure", "on_abort", "on_error", "ensure":
		default:
			plain[k] = v
		}
	}
	rest, _ := json.Marshal(plain)
	errsBefore := len(p.errs)
	p.strict(rest, loc, &j, jobKeysDropped())
	j.Plan = []concourse.Step{}
	p.list(obj["plan"], loc+".plan", func(raw json.RawMessage, loc string) {
		if s, ok := p.step(raw, loc); ok {
			j.Plan = append(j.Plan, *s)
		}
	})
	if _, has := obj["plan"]; !has {
		p.errorf(loc, "has no plan")
	}
	j.OnSuccess = p.hook(obj, "on_success", loc)
	j.OnFailure = p.hook(obj, "on_failure", loc)
	j.OnAbort = p.hook(obj, "on_abort", loc)
	j.OnError = p.hook(obj, "on_error", loc)
	j.Ensure = p.hook(obj, "ensure", loc)
	return j, len(p.errs) == errsBefore
}

func (p *parser) hook(obj map[string]json.RawMessage, key, loc string) *concourse.Step {
	raw, ok := obj[key]
	if !ok || isNull(raw) {
		return nil
	}
	s, _ := p.step(raw, loc+"."+key)
	return s
}

// stepKinds are the keys that make a step, in the order errors name them.
func stepKinds() []string {
	return []string{"get", "put", "task", "set_pipeline", "load_var", "in_parallel", "do", "try"}
}

// stepKeys are the keys a step of a kind accepts besides its own and the
// modifiers.
func stepKeys(kind string) []string {
	switch kind {
	case "get":
		return []string{"resource", "version", "params", "passed", "trigger", "tags"}
	case "put":
		return []string{"resource", "params", "inputs", "get_params", "no_get", "restart_on_pod_loss", "tags"}
	case "task":
		return []string{"file", "config", "image", "privileged", "hermetic", "container_limits", "params", "vars", "input_mapping", "output_mapping", "tags"}
	case "set_pipeline":
		return []string{"file", "team", "vars", "var_files", "instance_vars"}
	case "load_var":
		return []string{"file", "format", "reveal"}
	}
	return nil
}

// modifierKeys are accepted on a step of any kind.
func modifierKeys() []string {
	return []string{"timeout", "attempts", "across", "on_success", "on_failure", "on_abort", "on_error", "ensure"}
}

// step parses one step of a plan. It returns the step even when it has
// errors, so that nested problems are all reported.
func (p *parser) step(raw json.RawMessage, loc string) (*concourse.Step, bool) {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > MaxNestingDepth {
		if !p.tooDeep {
			p.tooDeep = true
			p.errorf(loc, "steps nested deeper than %d (the limit)", MaxNestingDepth)
		}
		return nil, false
	}
	obj, ok := p.object(raw, loc)
	if !ok {
		return nil, false
	}
	errsBefore := len(p.errs)
	var kinds []string
	for _, k := range stepKinds() {
		if _, has := obj[k]; has {
			kinds = append(kinds, k)
		}
	}
	if _, has := obj["run"]; has {
		p.errorf(loc, "run steps (prototypes) are not supported")
		return nil, false
	}
	switch len(kinds) {
	case 0:
		p.errorf(loc, "no step configured: a step needs one of %s", strings.Join(stepKinds(), ", "))
		return nil, false
	case 1:
	default:
		p.errorf(loc, "a step can only be one of %s, not %s at once", strings.Join(stepKinds(), ", "), strings.Join(kinds, " and "))
		return nil, false
	}
	kind := kinds[0]
	if name, ok := stringField(obj, kind); ok {
		loc = fmt.Sprintf("%s.%s(%s)", loc, kind, name)
	} else {
		loc = fmt.Sprintf("%s.%s", loc, kind)
	}

	s := &concourse.Step{}
	for _, key := range sortedKeys(obj) {
		allowed := key == kind || contains(stepKeys(kind), key) || contains(modifierKeys(), key) ||
			(key == "fail_fast" && obj["across"] != nil)
		if !allowed {
			p.errorf(loc, "unknown key %q for a %s step", key, kind)
			continue
		}
		at := loc + "." + key
		if key == kind {
			at = loc // loc already ends with the kind
		}
		p.stepField(s, key, obj[key], at)
	}
	return s, len(p.errs) == errsBefore
}

func (p *parser) stepField(s *concourse.Step, key string, raw json.RawMessage, at string) {
	switch key {
	case "get":
		p.name(raw, at, &s.Get)
	case "put":
		p.name(raw, at, &s.Put)
	case "task":
		p.name(raw, at, &s.Task)
	case "set_pipeline":
		p.name(raw, at, &s.SetPipeline)
	case "load_var":
		p.name(raw, at, &s.LoadVar)
	case "passed":
		p.value(raw, at, &s.Passed)
	case "trigger":
		p.value(raw, at, &s.Trigger)
	case "version":
		p.value(raw, at, &s.Version)
	case "inputs":
		var v any
		if !p.value(raw, at, &v) {
			return
		}
		switch in := v.(type) {
		case string:
			if in != "all" && in != "detect" {
				p.errorf(at, `must be "all", "detect" or a list of names, not %q`, in)
				return
			}
		case []any:
			for _, name := range in {
				if _, ok := name.(string); !ok {
					p.errorf(at, "non-string put input: %v", name)
					return
				}
			}
		default:
			p.errorf(at, `must be "all", "detect" or a list of names`)
			return
		}
		s.Inputs = append(json.RawMessage(nil), raw...)
	case "get_params":
		p.value(raw, at, &s.GetParams)
	case "no_get":
		p.value(raw, at, &s.NoGet)
	case "restart_on_pod_loss":
		p.value(raw, at, &s.RestartOnPodLoss)
	case "resource":
		p.value(raw, at, &s.Resource)
	case "file":
		p.value(raw, at, &s.File)
	case "config":
		if _, ok := p.object(raw, at); ok {
			s.Config = append(json.RawMessage(nil), raw...)
		}
	case "image":
		p.value(raw, at, &s.Image)
	case "privileged":
		p.value(raw, at, &s.Privileged)
	case "hermetic":
		p.value(raw, at, &s.Hermetic)
	case "container_limits":
		if _, ok := p.object(raw, at); ok {
			s.Limits = append(json.RawMessage(nil), raw...)
		}
	case "input_mapping":
		p.value(raw, at, &s.InputMapping)
	case "output_mapping":
		p.value(raw, at, &s.OutputMapping)
	case "params":
		p.value(raw, at, &s.Params)
	case "vars":
		p.value(raw, at, &s.Vars)
	case "team":
		p.value(raw, at, &s.Team)
	case "var_files":
		p.value(raw, at, &s.VarFiles)
	case "instance_vars":
		p.value(raw, at, &s.InstanceVars)
	case "format":
		p.value(raw, at, &s.Format)
	case "reveal":
		p.value(raw, at, &s.Reveal)
	case "tags":
		p.value(raw, at, &s.Tags)
	case "timeout":
		p.value(raw, at, &s.Timeout)
	case "attempts":
		p.value(raw, at, &s.Attempts)
	case "across":
		s.Across = append(json.RawMessage(nil), raw...)
	case "fail_fast":
		p.value(raw, at, &s.FailFast)
	case "do":
		s.Do = []concourse.Step{}
		p.list(raw, at, func(raw json.RawMessage, loc string) {
			if sub, _ := p.step(raw, loc); sub != nil {
				s.Do = append(s.Do, *sub)
			}
		})
	case "try":
		s.Try, _ = p.step(raw, at)
		if s.Try == nil {
			// Keep the step's kind visible to callers even when the
			// inner step was refused (the error is already recorded).
			s.Try = &concourse.Step{}
		}
	case "in_parallel":
		s.InParallel = p.inParallel(raw, at)
	case "on_success":
		s.OnSuccess, _ = p.step(raw, at)
	case "on_failure":
		s.OnFailure, _ = p.step(raw, at)
	case "on_abort":
		s.OnAbort, _ = p.step(raw, at)
	case "on_error":
		s.OnError, _ = p.step(raw, at)
	case "ensure":
		s.Ensure, _ = p.step(raw, at)
	default:
		// stepKeys and stepField disagree: a bug here, not in the config.
		p.errorf(at, "key is accepted but not read")
	}
}

// name reads a step's name, which must be a string.
func (p *parser) name(raw json.RawMessage, loc string, dst *string) {
	if err := json.Unmarshal(raw, dst); err != nil {
		p.errorf(loc, "must be a string")
	}
}

// inParallel reads in_parallel as a list of steps or {steps, limit,
// fail_fast}.
func (p *parser) inParallel(raw json.RawMessage, loc string) *concourse.InParallelConfig {
	cfg := &concourse.InParallelConfig{Steps: []concourse.Step{}}
	steps := func(raw json.RawMessage, loc string) {
		p.list(raw, loc, func(raw json.RawMessage, loc string) {
			if sub, _ := p.step(raw, loc); sub != nil {
				cfg.Steps = append(cfg.Steps, *sub)
			}
		})
	}
	trimmed := bytes.TrimSpace(raw)
	switch {
	case len(trimmed) > 0 && trimmed[0] == '[':
		steps(raw, loc)
	case len(trimmed) > 0 && trimmed[0] == '{':
		obj, _ := p.object(raw, loc)
		for _, key := range sortedKeys(obj) {
			switch key {
			case "steps":
				steps(obj[key], loc+".steps")
			case "limit":
				p.value(obj[key], loc+".limit", &cfg.Limit)
			case "fail_fast":
				p.value(obj[key], loc+".fail_fast", &cfg.FailFast)
			default:
				p.errorf(loc, "unknown key %q (in_parallel takes steps, limit and fail_fast)", key)
			}
		}
	default:
		p.errorf(loc, "must be a list of steps or an object with steps, limit and fail_fast")
	}
	return cfg
}

// named appends an object's name to its location, Concourse style:
// resources[2] becomes resources.repo when it has one.
func named(loc string, obj map[string]json.RawMessage) string {
	name, ok := stringField(obj, "name")
	if !ok || name == "" {
		return loc
	}
	if i := strings.LastIndexByte(loc, '['); i > 0 {
		return loc[:i] + "." + name
	}
	return loc
}

func stringField(obj map[string]json.RawMessage, key string) (string, bool) {
	raw, ok := obj[key]
	if !ok {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

func decode(raw json.RawMessage, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(dst)
}

// describeDecodeError turns encoding/json's messages, which name Go
// types, into ones about the config.
func describeDecodeError(err error) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return fmt.Sprintf("cannot be a %s here (want %s)", typeErr.Value, describeType(typeErr.Type))
	}
	var valueErr *json.UnsupportedValueError
	if errors.As(err, &valueErr) {
		return valueErr.Str
	}
	return err.Error()
}

func describeType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "a whole number"
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return describeType(t.Elem())
	}
	return t.String()
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// jsonFields maps a struct's JSON keys to field indexes.
func jsonFields(t reflect.Type) map[string]int {
	out := map[string]int{}
	for i := range t.NumField() {
		tag := t.Field(i).Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || name == "" {
			continue
		}
		out[name] = i
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
