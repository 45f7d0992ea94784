package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/creds/vaultconfig"
	"github.com/porter-ci/porter/pkg/names"
	"github.com/porter-ci/porter/pkg/taskconfig"
	"github.com/porter-ci/porter/pkg/vars"
)

// Warning is something Concourse accepts in a pipeline but points out, as
// the API returns it from a save.
type Warning struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// Warning types.
const (
	WarningInvalidIdentifier = "invalid_identifier"
	WarningDeprecatedField   = "deprecated_field"
	WarningPipeline          = "pipeline"
)

// Options say what a pipeline may refer to besides its own config.
type Options struct {
	// BaseTypes are the resource types workers provide; nil means
	// DefaultBaseTypes.
	BaseTypes []string
}

// DefaultBaseTypes are the resource types this server's workers provide.
func DefaultBaseTypes() []string {
	return []string{"registry-image", "git", "time", "mock"}
}

func (o Options) baseTypes() []string {
	if o.BaseTypes == nil {
		return DefaultBaseTypes()
	}
	return o.BaseTypes
}

// Validate checks a parsed config the way Concourse does before saving it.
// errs are grouped by section like Concourse's ("invalid jobs:\n\t...");
// a config with errors must not be saved, one with only warnings may.
func Validate(cfg *concourse.Config, opts Options) (warnings []Warning, errs []string) {
	v := &validator{cfg: cfg, base: opts.baseTypes()}
	sections := []struct {
		name  string
		check func() []string
	}{
		{"groups", v.groups},
		{"var_sources", v.varSources},
		{"resources", v.resources},
		{"resource types", v.resourceTypes},
		{"jobs", v.jobs},
		{"jobs", v.cycles},
	}
	for _, s := range sections {
		if problems := s.check(); len(problems) > 0 {
			errs = append(errs, formatSection(s.name, problems))
		}
	}
	return v.warnings, errs
}

func formatSection(name string, problems []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "invalid %s:\n", name)
	for _, p := range problems {
		b.WriteString("\t" + strings.ReplaceAll(p, "\n", "\n\t") + "\n")
	}
	return b.String()
}

type validator struct {
	cfg      *concourse.Config
	base     []string
	warnings []Warning
}

// identifier returns where a named item is: "resources.repo", or
// "resources[2]" when it has no name.
func identifier(section string, i int, name string) string {
	if name == "" {
		return fmt.Sprintf("%s[%d]", section, i)
	}
	return section + "." + name
}

// Identifiers start with a lowercase letter or a digit and go on with
// those, '-', '_' and '.'.
var (
	validIdentifier = regexp.MustCompile(`^[\p{Ll}\p{Lt}\p{Lm}\p{Lo}\d][\p{Ll}\p{Lt}\p{Lm}\p{Lo}\d\-_.]*$`)
	badFirstChar    = regexp.MustCompile(`^[^\p{Ll}\p{Lt}\p{Lm}\p{Lo}\d]`)
	badChar         = regexp.MustCompile(`[^\p{Ll}\p{Lt}\p{Lm}\p{Lo}\d\-_.]`)
	onlyDigits      = regexp.MustCompile(`^\d+$`)
)

// checkIdentifier records a warning for a name Concourse discourages and
// returns an error message for an empty one, and for one that cannot be
// part of an object key or path (names.Check), which Concourse would only
// warn about.
func (v *validator) checkIdentifier(name, where string) (problem string) {
	if name == "" {
		return where + ": identifier cannot be an empty string"
	}
	if err := names.Check(where, name); err != nil {
		return err.Error()
	}
	var reason string
	switch {
	case onlyDigits.MatchString(name):
		reason = "cannot be just numbers"
	case validIdentifier.MatchString(name):
		return ""
	case badFirstChar.MatchString(name):
		reason = "must start with a lowercase letter or a number"
	default:
		reason = fmt.Sprintf("illegal character '%s'", badChar.FindString(name[1:]))
	}
	v.warnings = append(v.warnings, Warning{
		Type:    WarningInvalidIdentifier,
		Message: fmt.Sprintf("%s: '%s' is not a valid identifier: %s", where, name, reason),
	})
	return ""
}

func (v *validator) groups() []string {
	var problems []string
	grouped := map[string]bool{}
	count := map[string]int{}
	var order []string
	for i, g := range v.cfg.Groups {
		where := identifier("groups", i, g.Name)
		if p := v.checkIdentifier(g.Name, where); p != "" {
			problems = append(problems, p)
		}
		if count[g.Name] == 0 {
			order = append(order, g.Name)
		}
		count[g.Name]++
		for _, pattern := range g.Jobs {
			if _, err := path.Match(pattern, ""); err != nil {
				problems = append(problems, fmt.Sprintf("invalid glob expression '%s' for group '%s'", pattern, g.Name))
				continue
			}
			matched := false
			for _, j := range v.cfg.Jobs {
				if ok, _ := path.Match(pattern, j.Name); ok {
					grouped[j.Name] = true
					matched = true
				}
			}
			if !matched {
				problems = append(problems, fmt.Sprintf("no jobs match '%s' for group '%s'", pattern, g.Name))
			}
		}
		for _, r := range g.Resources {
			if v.resource(r) == nil {
				problems = append(problems, fmt.Sprintf("group '%s' has unknown resource '%s'", g.Name, r))
			}
		}
	}
	for _, name := range order {
		if count[name] > 1 {
			problems = append(problems, fmt.Sprintf("group '%s' appears %d times. Duplicate names are not allowed.", name, count[name]))
		}
	}
	if len(v.cfg.Groups) > 0 {
		for _, j := range v.cfg.Jobs {
			if !grouped[j.Name] {
				problems = append(problems, fmt.Sprintf("job '%s' belongs to no group", j.Name))
			}
		}
	}
	return problems
}

func (v *validator) resources() []string {
	var problems []string
	seen := map[string]string{}
	for i, r := range v.cfg.Resources {
		loc := fmt.Sprintf("resources[%d]", i)
		where := identifier("resources", i, r.Name)
		if p := v.checkIdentifier(r.Name, where); p != "" {
			problems = append(problems, p)
		}
		if other, dup := seen[r.Name]; dup && r.Name != "" {
			problems = append(problems, fmt.Sprintf("%s and %s have the same name ('%s')", other, loc, r.Name))
		} else if r.Name != "" {
			seen[r.Name] = loc
		}
		if r.Name == "" {
			problems = append(problems, where+" has no name")
		}
		if r.Type == "" {
			problems = append(problems, where+" has no type")
		} else if !v.knownType(r.Type, "") {
			problems = append(problems, fmt.Sprintf("%s has unknown resource type '%s'", where, r.Type))
		}
		problems = append(problems, checkInterval(where+".check_every", r.CheckEvery)...)
		problems = append(problems, checkDuration(where+".check_timeout", r.CheckTimeout)...)
	}
	used := map[string]bool{}
	for _, j := range v.cfg.Jobs {
		j.EachStep(func(s *concourse.Step) {
			if s.Get != "" || s.Put != "" {
				used[resourceName(s)] = true
			}
		})
	}
	for _, r := range v.cfg.Resources {
		if !used[r.Name] {
			problems = append(problems, fmt.Sprintf("resource '%s' is not used", r.Name))
		}
	}
	return problems
}

func (v *validator) resourceTypes() []string {
	var problems []string
	seen := map[string]string{}
	for i, t := range v.cfg.ResourceTypes {
		loc := fmt.Sprintf("resource_types[%d]", i)
		where := identifier("resource_types", i, t.Name)
		if p := v.checkIdentifier(t.Name, where); p != "" {
			problems = append(problems, p)
		}
		if other, dup := seen[t.Name]; dup && t.Name != "" {
			problems = append(problems, fmt.Sprintf("%s and %s have the same name ('%s')", other, loc, t.Name))
		} else if t.Name != "" {
			seen[t.Name] = loc
		}
		if t.Name == "" {
			problems = append(problems, where+" has no name")
		}
		if t.Type == "" {
			problems = append(problems, where+" has no type")
		} else if !v.knownType(t.Type, t.Name) {
			problems = append(problems, fmt.Sprintf("%s has unknown resource type '%s'", where, t.Type))
		}
		problems = append(problems, checkInterval(where+".check_every", t.CheckEvery)...)
	}
	// A type is fetched by its own type, which cannot be itself or a type
	// it is fetched for: such a chain never reaches a base type. A chain
	// too deep is named once, at its first type past the cap.
	types := newTypeResolver(v.cfg.ResourceTypes, v.base)
	for i, t := range v.cfg.ResourceTypes {
		if t.Name == "" || !v.knownType(t.Type, t.Name) {
			continue
		}
		err := types.chain(t.Name).err
		var deep *TypeChainTooDeepError
		switch {
		case err == nil:
		case errors.As(err, &deep):
			if errors.As(types.chain(t.Type).err, &deep) {
				continue // named at the type it is fetched by
			}
			problems = append(problems, fmt.Sprintf("%s: type chain deeper than %d (the limit)", identifier("resource_types", i, t.Name), MaxTypeChainDepth))
		default:
			problems = append(problems, fmt.Sprintf("%s: %v", identifier("resource_types", i, t.Name), err))
		}
	}
	return problems
}

// knownType says whether typ is a base type or a resource type of the
// pipeline other than self (a type cannot be its own image).
func (v *validator) knownType(typ, self string) bool {
	for _, t := range v.cfg.ResourceTypes {
		if t.Name == typ && t.Name != self {
			return true
		}
	}
	return contains(v.base, typ)
}

// VarSourceTypes are the var_sources types this server looks vars up in.
func VarSourceTypes() []string { return []string{"dummy", "vault"} }

// varSources checks the pipeline's var_sources: each named once, of a type
// this server has, with a config it reads. Anything else is refused now,
// not when a build first needs a var.
func (v *validator) varSources() []string {
	var problems []string
	seen := map[string]bool{}
	for i, raw := range v.cfg.VarSources {
		name, _ := raw["name"].(string)
		at := fmt.Sprintf("var_sources[%d]", i)
		if name != "" {
			at = fmt.Sprintf("var_sources[%d](%s)", i, name)
		}
		switch {
		case name == "":
			problems = append(problems, at+": has no name")
			continue
		case seen[name]:
			problems = append(problems, at+": repeated name")
		case strings.ContainsAny(name, ":.()"):
			problems = append(problems, fmt.Sprintf("%s: name %q cannot hold ':', '.' or parentheses (it is written ((%s:var)))", at, name, name))
		}
		seen[name] = true
		typ, _ := raw["type"].(string)
		if !contains(VarSourceTypes(), typ) {
			problems = append(problems, fmt.Sprintf("%s: type '%s' is not supported by this server (supported: %s)",
				at, typ, strings.Join(VarSourceTypes(), ", ")))
			continue
		}
		for k := range raw {
			if k != "name" && k != "type" && k != "config" {
				problems = append(problems, fmt.Sprintf("%s: unknown key %q", at, k))
			}
		}
		switch typ {
		case "dummy":
			if _, err := DummyVars(raw["config"]); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", at, err))
			}
		case "vault":
			_, bad := vaultconfig.FromVarSource(raw["config"])
			for _, p := range bad {
				problems = append(problems, fmt.Sprintf("%s: %s", at, p))
			}
		}
	}
	return problems
}

// DummyVars reads the config of a var source of type dummy: {vars: {name:
// value}}.
func DummyVars(config any) (map[string]any, error) {
	if config == nil {
		return map[string]any{}, nil
	}
	m, ok := config.(map[string]any)
	if !ok {
		return nil, errors.New("config must be a map with `vars:`")
	}
	for k := range m {
		if k != "vars" {
			return nil, fmt.Errorf("config: unknown key %q (a dummy var source takes `vars:`)", k)
		}
	}
	if m["vars"] == nil {
		return map[string]any{}, nil
	}
	vars, ok := m["vars"].(map[string]any)
	if !ok {
		return nil, errors.New("config.vars must be a map of var names to values")
	}
	return vars, nil
}

func (v *validator) resource(name string) *concourse.ResourceConfig {
	for i := range v.cfg.Resources {
		if v.cfg.Resources[i].Name == name {
			return &v.cfg.Resources[i]
		}
	}
	return nil
}

func (v *validator) jobs() []string {
	var problems []string
	if len(v.cfg.Jobs) == 0 {
		return []string{"jobs: pipeline must contain at least one job"}
	}
	seen := map[string]string{}
	for i := range v.cfg.Jobs {
		j := &v.cfg.Jobs[i]
		loc := fmt.Sprintf("jobs[%d]", i)
		where := identifier("jobs", i, j.Name)
		if p := v.checkIdentifier(j.Name, where); p != "" {
			problems = append(problems, p)
		}
		if other, dup := seen[j.Name]; dup && j.Name != "" {
			problems = append(problems, fmt.Sprintf("%s and %s have the same name ('%s')", other, loc, j.Name))
		} else if j.Name != "" {
			seen[j.Name] = loc
		}
		if j.Name == "" {
			problems = append(problems, where+" has no name")
		}
		if j.MaxInFlight < 0 {
			problems = append(problems, fmt.Sprintf("%s has negative max_in_flight: %d", where, j.MaxInFlight))
		}
		for k, g := range j.SerialGroups {
			if g == "" {
				problems = append(problems, fmt.Sprintf("%s.serial_groups[%d]: identifier cannot be an empty string", where, k))
			}
		}
		if j.BuildLogsToRetain != 0 {
			v.warnings = append(v.warnings, Warning{
				Type:    WarningDeprecatedField,
				Message: where + ".build_logs_to_retain is deprecated. Use build_log_retention instead.",
			})
			if len(j.BuildLogRetention) > 0 {
				problems = append(problems, where+" can't use both build_log_retention and build_logs_to_retain")
			} else if j.BuildLogsToRetain < 0 {
				problems = append(problems, fmt.Sprintf("%s has negative build_logs_to_retain: %d", where, j.BuildLogsToRetain))
			}
		}
		if len(j.BuildLogRetention) > 0 {
			var r struct {
				Builds                 int `json:"builds"`
				Days                   int `json:"days"`
				MinimumSucceededBuilds int `json:"minimum_succeeded_builds"`
			}
			if err := json.Unmarshal(j.BuildLogRetention, &r); err != nil {
				problems = append(problems, fmt.Sprintf("%s.build_log_retention: want builds, days and minimum_succeeded_builds as numbers: %v", where, err))
			}
			for _, f := range []struct {
				key string
				v   int
			}{{"builds", r.Builds}, {"days", r.Days}, {"minimum_succeeded_builds", r.MinimumSucceededBuilds}} {
				if f.v < 0 {
					problems = append(problems, fmt.Sprintf("%s.build_log_retention.%s is negative: %d", where, f.key, f.v))
				}
			}
		}

		sv := &stepValidator{v: v, seenGets: map[string]bool{}}
		ctx := where + ".plan"
		for k := range j.Plan {
			sv.step(&j.Plan[k], fmt.Sprintf("%s[%d]", ctx, k), 1)
		}
		for _, h := range jobHooks(j) {
			sv.step(h.step, where+"."+h.name, 1)
		}
		problems = append(problems, sv.problems...)
		if n := jobPlanSize(j); n > MaxPlanSteps {
			problems = append(problems, fmt.Sprintf("%s: plan has more than %d steps (the limit), counting every attempt, hook and a put's get", where, MaxPlanSteps))
		}
	}
	return problems
}

type stepValidator struct {
	v        *validator
	seenGets map[string]bool
	problems []string
	// tooDeep is set once a step nested past MaxNestingDepth was named.
	tooDeep bool
}

func (sv *stepValidator) errorf(ctx, format string, args ...any) {
	sv.problems = append(sv.problems, ctx+": "+fmt.Sprintf(format, args...))
}

// step checks s, nested depth deep (a job's own steps and hooks are 1).
// It does not go past MaxNestingDepth: the paths it names grow with the
// depth, so an unbounded walk would cost the square of it.
func (sv *stepValidator) step(s *concourse.Step, ctx string, depth int) {
	if s == nil {
		return
	}
	if depth > MaxNestingDepth {
		if !sv.tooDeep {
			sv.tooDeep = true
			sv.errorf(ctx, "steps nested deeper than %d (the limit)", MaxNestingDepth)
		}
		return
	}
	cfg := sv.v.cfg
	switch {
	case s.Get != "":
		ctx += ".get(" + s.Get + ")"
		sv.identifier(s.Get, ctx)
		if sv.seenGets[s.Get] {
			sv.errorf(ctx, "repeated name")
		}
		sv.seenGets[s.Get] = true
		res := resourceName(s)
		if sv.v.resource(res) == nil {
			sv.errorf(ctx, "unknown resource '%s'", res)
		}
		for _, pattern := range s.Passed {
			found := false
			for i := range cfg.Jobs {
				other := &cfg.Jobs[i]
				if ok, _ := path.Match(pattern, other.Name); !ok {
					continue
				}
				found = true
				if !jobUsesResource(other, res) {
					sv.errorf(ctx+".passed", "job '%s' does not interact with resource '%s'", other.Name, res)
				}
			}
			if !found {
				sv.errorf(ctx+".passed", "no matching job(s) for '%s'", pattern)
			}
		}
	case s.Put != "":
		ctx += ".put(" + s.Put + ")"
		sv.identifier(s.Put, ctx)
		if res := resourceName(s); sv.v.resource(res) == nil {
			sv.errorf(ctx, "unknown resource '%s'", res)
		}
	case s.Task != "":
		ctx += ".task(" + s.Task + ")"
		sv.identifier(s.Task, ctx)
		switch {
		case len(s.Config) == 0 && s.File == "":
			sv.errorf(ctx, "must specify either `file:` or `config:`")
		case len(s.Config) > 0 && s.File != "":
			sv.errorf(ctx, "must specify one of `file:` or `config:`, not both")
		}
		if len(s.Config) > 0 && s.File == "" {
			for _, msg := range taskConfigProblems(s.Config) {
				sv.errorf(ctx+".config", "%s", msg)
			}
		}
		if s.Hermetic {
			sv.v.warnings = append(sv.v.warnings, Warning{
				Type:    WarningPipeline,
				Message: ctx + ": specifies `hermetic:` only works against worker containerd runtime",
			})
		}
	case s.SetPipeline != "":
		ctx += ".set_pipeline(" + s.SetPipeline + ")"
		sv.identifier(s.SetPipeline, ctx)
		if s.File == "" {
			sv.errorf(ctx, "no file specified")
		}

	case s.LoadVar != "":
		ctx += ".load_var(" + s.LoadVar + ")"
		sv.identifier(s.LoadVar, ctx)
		if s.File == "" {
			sv.errorf(ctx, "no file specified")
		}
	case s.InParallel != nil:
		ctx += ".in_parallel"
		if s.InParallel.Limit < 0 {
			sv.errorf(ctx+".limit", "must be greater than or equal to 0")
		}
		for i := range s.InParallel.Steps {
			sv.step(&s.InParallel.Steps[i], fmt.Sprintf("%s.steps[%d]", ctx, i), depth+1)
		}
	case s.Do != nil:
		ctx += ".do"
		for i := range s.Do {
			sv.step(&s.Do[i], fmt.Sprintf("%s[%d]", ctx, i), depth+1)
		}
	case s.Try != nil:
		ctx += ".try"
		sv.step(s.Try, ctx, depth+1)
	default:
		sv.errorf(ctx, "no step configured")
	}

	if s.Timeout != "" {
		for _, p := range checkDuration(ctx+".timeout", s.Timeout) {
			sv.problems = append(sv.problems, p)
		}
	}
	if s.Attempts < 0 {
		sv.errorf(ctx+".attempts", "must be greater than 0")
	}
	if len(s.Across) > 0 {
		if _, err := ParseAcross(s.Across); err != nil {
			sv.errorf(ctx, "%v", err)
		}
	}
	for _, h := range stepHooks(s) {
		sv.step(h.step, ctx+"."+h.name, depth+1)
	}
}

func (sv *stepValidator) identifier(name, ctx string) {
	if len(vars.Names(name)) > 0 {
		// Known when the step runs (an across var, say); checked then.
		return
	}
	if p := sv.v.checkIdentifier(name, ctx); p != "" {
		sv.problems = append(sv.problems, p)
	}
}

// cycles finds a job that, through passed constraints, depends on itself.
func (v *validator) cycles() []string {
	const (
		unvisited = iota
		visiting
		done
	)
	state := map[string]int{}
	var stack []string
	var visit func(j *concourse.JobConfig) []string
	visit = func(j *concourse.JobConfig) []string {
		switch state[j.Name] {
		case visiting:
			for i, name := range stack {
				if name == j.Name {
					cycle := append(append([]string{}, stack[i:]...), j.Name)
					return cycle
				}
			}
			return []string{j.Name}
		case done:
			return nil
		}
		state[j.Name] = visiting
		stack = append(stack, j.Name)
		var cycle []string
		for _, upstream := range passedJobs(v.cfg, j) {
			if cycle = visit(upstream); cycle != nil {
				break
			}
		}
		stack = stack[:len(stack)-1]
		state[j.Name] = done
		return cycle
	}
	for i := range v.cfg.Jobs {
		if cycle := visit(&v.cfg.Jobs[i]); cycle != nil {
			// The walk goes from a job to the jobs it takes inputs from;
			// reverse it so the message reads in the order builds flow.
			for a, b := 0, len(cycle)-1; a < b; a, b = a+1, b-1 {
				cycle[a], cycle[b] = cycle[b], cycle[a]
			}
			quoted := make([]string, len(cycle))
			for k, name := range cycle {
				quoted[k] = "'" + name + "'"
			}
			return []string{fmt.Sprintf("pipeline contains a cycle that starts at Job '%s': %s", cycle[0], strings.Join(quoted, " -> "))}
		}
	}
	return nil
}

// passedJobs are the jobs whose builds j's get steps take versions from.
func passedJobs(cfg *concourse.Config, j *concourse.JobConfig) []*concourse.JobConfig {
	var out []*concourse.JobConfig
	seen := map[string]bool{}
	j.EachStep(func(s *concourse.Step) {
		if s.Get == "" {
			return
		}
		for _, pattern := range s.Passed {
			for i := range cfg.Jobs {
				other := &cfg.Jobs[i]
				if ok, _ := path.Match(pattern, other.Name); ok && !seen[other.Name] {
					seen[other.Name] = true
					out = append(out, other)
				}
			}
		}
	})
	return out
}

func jobUsesResource(j *concourse.JobConfig, resource string) bool {
	used := false
	j.EachStep(func(s *concourse.Step) {
		if (s.Get != "" || s.Put != "") && resourceName(s) == resource {
			used = true
		}
	})
	return used
}

// resourceName is the resource a get or put step uses.
func resourceName(s *concourse.Step) string {
	if s.Resource != "" {
		return s.Resource
	}
	if s.Get != "" {
		return s.Get
	}
	return s.Put
}

type namedStep struct {
	name string
	step *concourse.Step
}

func stepHooks(s *concourse.Step) []namedStep {
	return presentHooks(s.OnSuccess, s.OnFailure, s.OnAbort, s.OnError, s.Ensure)
}

func jobHooks(j *concourse.JobConfig) []namedStep {
	return presentHooks(j.OnSuccess, j.OnFailure, j.OnAbort, j.OnError, j.Ensure)
}

func presentHooks(onSuccess, onFailure, onAbort, onError, ensure *concourse.Step) []namedStep {
	var out []namedStep
	for _, h := range []namedStep{
		{concourse.HookOnSuccess, onSuccess},
		{concourse.HookOnFailure, onFailure},
		{concourse.HookOnAbort, onAbort},
		{concourse.HookOnError, onError},
		{concourse.HookEnsure, ensure},
	} {
		if h.step != nil {
			out = append(out, h)
		}
	}
	return out
}

// taskConfigProblems are what an inline task config fails on, one per
// problem.
func taskConfigProblems(raw []byte) []string {
	_, err := taskconfig.Parse(raw)
	if err == nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(err.Error(), "\n") {
		if item, ok := strings.CutPrefix(line, "\t* "); ok {
			out = append(out, item)
		}
	}
	if len(out) == 0 {
		out = []string{err.Error()}
	}
	return out
}

// checkDuration accepts an empty duration (unset) and one that is a var
// to be filled in at run time.
func checkDuration(where, d string) []string {
	if d == "" || strings.Contains(d, "((") {
		return nil
	}
	if _, err := time.ParseDuration(d); err != nil {
		return []string{fmt.Sprintf("%s: invalid duration '%s'", where, d)}
	}
	return nil
}

// checkInterval is checkDuration that also accepts "never".
func checkInterval(where, d string) []string {
	if d == "never" {
		return nil
	}
	return checkDuration(where, d)
}
