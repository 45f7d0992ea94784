package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/porter-ci/porter/pkg/concourse"
)

// DefaultCheckTimeout bounds a resource check whose resource sets no
// check_timeout, as Concourse's default does.
const DefaultCheckTimeout = "1h"

// InputVersion is the version the scheduler chose for one get step of a
// job.
type InputVersion struct {
	Version map[string]string `json:"version"`
}

// PlanOptions say what a plan may refer to besides the pipeline's config.
type PlanOptions struct {
	// BaseTypes are the resource types workers provide; nil means
	// DefaultBaseTypes.
	BaseTypes []string
}

func (o PlanOptions) baseTypes() []string {
	if o.BaseTypes == nil {
		return DefaultBaseTypes()
	}
	return o.BaseTypes
}

// JobPlan compiles a job of cfg into the plan of a build, every get step
// fetching the version inputs holds under the step's name. Plan ids are
// hex counters from 1, given as Concourse does: a node after its children.
func JobPlan(cfg *concourse.Config, job *concourse.JobConfig, inputs map[string]InputVersion, opts PlanOptions) (concourse.Plan, error) {
	p := &planner{cfg: cfg, types: newTypeResolver(cfg.ResourceTypes, opts.baseTypes()), inputs: inputs}
	steps := make(concourse.DoPlan, 0, len(job.Plan))
	for i := range job.Plan {
		plan, err := p.step(&job.Plan[i])
		if err != nil {
			return concourse.Plan{}, fmt.Errorf("plan job %s: %w", job.Name, err)
		}
		steps = append(steps, plan)
	}
	plan := p.node(concourse.Plan{Do: &steps})
	plan, err := p.hooks(plan, jobHooks(job))
	if err != nil {
		return concourse.Plan{}, fmt.Errorf("plan job %s: %w", job.Name, err)
	}
	return plan, nil
}

// CheckPlan compiles the check build of a resource, starting from the
// version from (nil for the first check).
func CheckPlan(cfg *concourse.Config, resource *concourse.ResourceConfig, from map[string]string, opts PlanOptions) (concourse.Plan, error) {
	p := &planner{cfg: cfg, types: newTypeResolver(cfg.ResourceTypes, opts.baseTypes())}
	timeout := resource.CheckTimeout
	if timeout == "" {
		timeout = DefaultCheckTimeout
	}
	plan := p.node(concourse.Plan{Check: &concourse.CheckPlan{
		Name:        resource.Name,
		Type:        resource.Type,
		Source:      p.source(resource),
		FromVersion: from,
		Resource:    resource.Name,
		Timeout:     timeout,
		Tags:        resource.Tags,
	}})
	image, err := p.types.image(plan.ID, resource.Type, resource.Tags)
	if err != nil {
		return concourse.Plan{}, fmt.Errorf("plan check of %s: %w", resource.Name, err)
	}
	plan.Check.TypeImage = image
	return plan, nil
}

type planner struct {
	cfg    *concourse.Config
	types  *typeResolver
	inputs map[string]InputVersion
	lastID int64
}

// node gives a plan the next id.
func (p *planner) node(plan concourse.Plan) concourse.Plan {
	p.lastID++
	plan.ID = concourse.PlanID(fmt.Sprintf("%x", p.lastID))
	return plan
}

// step compiles a step with its modifiers, nested as Concourse nests
// them: the hooks outermost (ensure outside on_error outside on_abort
// outside on_failure outside on_success), then attempts, then the step.
func (p *planner) step(s *concourse.Step) (concourse.Plan, error) {
	plan, err := p.attempts(s)
	if err != nil {
		return concourse.Plan{}, err
	}
	if len(s.Across) > 0 {
		// across sits inside the hooks and outside attempts and timeout,
		// as in Concourse: the hooks run once, after every substep.
		vars, err := ParseAcross(s.Across)
		if err != nil {
			return concourse.Plan{}, err
		}
		template, err := json.Marshal(plan)
		if err != nil {
			return concourse.Plan{}, fmt.Errorf("across: %w", err)
		}
		plan = p.node(concourse.Plan{Across: &concourse.AcrossPlan{
			Vars:            vars,
			SubStepTemplate: string(template),
			FailFast:        s.FailFast,
		}})
	}
	return p.hooks(plan, stepHooks(s))
}

// attempts compiles the step with its attempts and timeout.
func (p *planner) attempts(s *concourse.Step) (concourse.Plan, error) {
	var plan concourse.Plan
	var err error
	if s.Attempts > 0 {
		// Every attempt is its own subtree so that each has its own ids.
		attempts := make(concourse.DoPlan, s.Attempts)
		for i := range attempts {
			if attempts[i], err = p.timed(s); err != nil {
				return concourse.Plan{}, err
			}
		}
		plan = p.node(concourse.Plan{Retry: &attempts})
	} else if plan, err = p.timed(s); err != nil {
		return concourse.Plan{}, err
	}
	return plan, nil
}

func (p *planner) hooks(plan concourse.Plan, hooks []namedStep) (concourse.Plan, error) {
	for _, h := range hooks {
		next, err := p.step(h.step)
		if err != nil {
			return concourse.Plan{}, err
		}
		hook := &concourse.HookPlan{Step: plan, Next: next, Hook: h.name}
		var wrapped concourse.Plan
		switch h.name {
		case concourse.HookOnSuccess:
			wrapped.OnSuccess = hook
		case concourse.HookOnFailure:
			wrapped.OnFailure = hook
		case concourse.HookOnAbort:
			wrapped.OnAbort = hook
		case concourse.HookOnError:
			wrapped.OnError = hook
		case concourse.HookEnsure:
			wrapped.Ensure = hook
		}
		plan = p.node(wrapped)
	}
	return plan, nil
}

// timed compiles the step itself with its timeout: get, put and task
// carry it in their own plan, other steps are wrapped in a timeout plan.
func (p *planner) timed(s *concourse.Step) (concourse.Plan, error) {
	switch {
	case s.Get != "":
		return p.get(s)
	case s.Put != "":
		return p.put(s)
	case s.Task != "":
		return p.task(s)
	}
	plan, err := p.composite(s)
	if err != nil || s.Timeout == "" {
		return plan, err
	}
	return p.node(concourse.Plan{Timeout: &concourse.TimeoutPlan{Step: plan, Duration: s.Timeout}}), nil
}

func (p *planner) composite(s *concourse.Step) (concourse.Plan, error) {
	switch {
	case s.InParallel != nil:
		steps := make([]concourse.Plan, 0, len(s.InParallel.Steps))
		for i := range s.InParallel.Steps {
			plan, err := p.step(&s.InParallel.Steps[i])
			if err != nil {
				return concourse.Plan{}, err
			}
			steps = append(steps, plan)
		}
		return p.node(concourse.Plan{InParallel: &concourse.InParallelPlan{
			Steps:    steps,
			Limit:    s.InParallel.Limit,
			FailFast: s.InParallel.FailFast,
		}}), nil
	case s.Do != nil:
		steps := make(concourse.DoPlan, 0, len(s.Do))
		for i := range s.Do {
			plan, err := p.step(&s.Do[i])
			if err != nil {
				return concourse.Plan{}, err
			}
			steps = append(steps, plan)
		}
		return p.node(concourse.Plan{Do: &steps}), nil
	case s.Try != nil:
		plan, err := p.step(s.Try)
		if err != nil {
			return concourse.Plan{}, err
		}
		return p.node(concourse.Plan{Try: &concourse.TryPlan{Step: plan}}), nil
	case s.SetPipeline != "":
		return p.node(concourse.Plan{SetPipeline: &concourse.SetPipelinePlan{
			Name:         s.SetPipeline,
			File:         s.File,
			Team:         s.Team,
			Vars:         s.Vars,
			VarFiles:     s.VarFiles,
			InstanceVars: s.InstanceVars,
		}}), nil
	case s.LoadVar != "":
		return p.node(concourse.Plan{LoadVar: &concourse.LoadVarPlan{
			Name:   s.LoadVar,
			File:   s.File,
			Format: s.Format,
			Reveal: s.Reveal,
		}}), nil
	}
	return concourse.Plan{}, errors.New("step has no kind (get, put, task, set_pipeline, load_var, in_parallel, do or try)")
}

func (p *planner) resource(name string) (*concourse.ResourceConfig, error) {
	for i := range p.cfg.Resources {
		if p.cfg.Resources[i].Name == name {
			return &p.cfg.Resources[i], nil
		}
	}
	return nil, fmt.Errorf("unknown resource '%s'", name)
}

// source is a resource's source over the defaults of its type: a copy,
// so that callers may interpolate a plan without touching the config.
func (p *planner) source(r *concourse.ResourceConfig) map[string]any {
	merged := map[string]any{}
	for _, t := range p.cfg.ResourceTypes {
		if t.Name == r.Type {
			maps.Copy(merged, t.Defaults)
			break
		}
	}
	maps.Copy(merged, r.Source)
	return merged
}

func (p *planner) get(s *concourse.Step) (concourse.Plan, error) {
	r, err := p.resource(resourceName(s))
	if err != nil {
		return concourse.Plan{}, fmt.Errorf("get %s: %w", s.Get, err)
	}
	input, ok := p.inputs[s.Get]
	if !ok || input.Version == nil {
		return concourse.Plan{}, fmt.Errorf("get %s: version for input '%s' not provided", s.Get, s.Get)
	}
	plan := p.node(concourse.Plan{Get: &concourse.GetPlan{
		Name:     s.Get,
		Type:     r.Type,
		Source:   p.source(r),
		Version:  input.Version,
		Params:   s.Params,
		Resource: r.Name,
		Tags:     s.Tags,
		Timeout:  s.Timeout,
	}})
	if plan.Get.TypeImage, err = p.types.image(plan.ID, r.Type, s.Tags); err != nil {
		return concourse.Plan{}, fmt.Errorf("get %s: %w", s.Get, err)
	}
	return plan, nil
}

// put compiles a put and, unless no_get, the get of the version it
// created, run on the put's success as Concourse does.
func (p *planner) put(s *concourse.Step) (concourse.Plan, error) {
	r, err := p.resource(resourceName(s))
	if err != nil {
		return concourse.Plan{}, fmt.Errorf("put %s: %w", s.Put, err)
	}
	source := p.source(r)
	put := p.node(concourse.Plan{Put: &concourse.PutPlan{
		Name:     s.Put,
		Type:     r.Type,
		Source:   source,
		Params:   s.Params,
		Inputs:   s.Inputs,
		Resource: r.Name,
		Tags:     s.Tags,
		Timeout:  s.Timeout,
		// Porter's: see concourse.Step.RestartOnPodLoss.
		RestartOnPodLoss: s.RestartOnPodLoss,
	}})
	if put.Put.TypeImage, err = p.types.image(put.ID, r.Type, s.Tags); err != nil {
		return concourse.Plan{}, fmt.Errorf("put %s: %w", s.Put, err)
	}
	if s.NoGet {
		return put, nil
	}
	from := put.ID
	get := p.node(concourse.Plan{Get: &concourse.GetPlan{
		Name:        s.Put,
		Type:        r.Type,
		Source:      source,
		Params:      s.GetParams,
		VersionFrom: &from,
		Resource:    r.Name,
		Tags:        s.Tags,
		Timeout:     s.Timeout,
	}})
	if get.Get.TypeImage, err = p.types.image(get.ID, r.Type, s.Tags); err != nil {
		return concourse.Plan{}, fmt.Errorf("put %s: %w", s.Put, err)
	}
	return p.node(concourse.Plan{OnSuccess: &concourse.HookPlan{Step: put, Next: get, Hook: concourse.HookOnSuccess}}), nil
}

func (p *planner) task(s *concourse.Step) (concourse.Plan, error) {
	t := &concourse.TaskPlan{
		Name:              s.Task,
		Privileged:        s.Privileged,
		Hermetic:          s.Hermetic,
		Tags:              s.Tags,
		ConfigPath:        s.File,
		Config:            s.Config,
		Limits:            s.Limits,
		ImageArtifactName: s.Image,
		Vars:              s.Vars,
		Params:            s.Params,
		InputMapping:      s.InputMapping,
		OutputMapping:     s.OutputMapping,
		Timeout:           s.Timeout,
	}
	if len(p.cfg.ResourceTypes) > 0 {
		// A task's image_resource may be of a custom type.
		raw, err := json.Marshal(p.cfg.ResourceTypes)
		if err != nil {
			return concourse.Plan{}, fmt.Errorf("task %s: resource types: %w", s.Task, err)
		}
		t.ResourceTypes = raw
	}
	return p.node(concourse.Plan{Task: t}), nil
}

// TypeImage is the image of a step planned while a build runs: a task's
// image_resource, whose type may be one of the pipeline's resource types.
func TypeImage(id concourse.PlanID, typ string, tags []string, types []concourse.ResourceType, opts PlanOptions) (concourse.TypeImage, error) {
	return newTypeResolver(types, opts.baseTypes()).image(id, typ, tags)
}
