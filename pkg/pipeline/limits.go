package pipeline

import (
	"fmt"

	"github.com/porter-ci/porter/pkg/concourse"
)

// Caps on what one config or plan may make the server do. Each is far
// above what real pipelines use (Concourse's examples nest a few levels,
// chain a type or two and plan tens of steps per job) and far below what
// costs a server noticeable memory or time.
const (
	// MaxTypeChainDepth is how many custom resource types may fetch one
	// another's images below a step: every step of such a type carries
	// the chain in its plan and checks it when it runs.
	MaxTypeChainDepth = 30
	// MaxNestingDepth is how deep steps may nest (in do, in_parallel,
	// try and hooks; in a one-off plan, any sub-plan).
	MaxNestingDepth = 50
	// MaxPlanSteps is how many steps one build's plan may have, counted
	// as the planner makes them: every do, in_parallel, try, timeout,
	// hook and attempt, and a put's implicit get.
	MaxPlanSteps = 2000
)

// jobPlanSize is how many nodes JobPlan makes for j, or MaxPlanSteps+1 if
// it is more.
func jobPlanSize(j *concourse.JobConfig) int {
	n := 1 // the do of the job's plan
	for i := range j.Plan {
		n = capped(n + stepPlanSize(&j.Plan[i]))
	}
	for _, h := range jobHooks(j) {
		n = capped(n + 1 + stepPlanSize(h.step))
	}
	return n
}

// stepPlanSize is how many nodes the planner makes for s (planner.step),
// capped at MaxPlanSteps+1.
func stepPlanSize(s *concourse.Step) int {
	if s == nil {
		return 0
	}
	n := timedPlanSize(s)
	if s.Attempts > 0 {
		// Every attempt is its own subtree, under one retry.
		if n > 0 && s.Attempts > MaxPlanSteps/n {
			return MaxPlanSteps + 1
		}
		n = capped(n*s.Attempts + 1)
	}
	for _, h := range stepHooks(s) {
		n = capped(n + 1 + stepPlanSize(h.step))
	}
	return n
}

func timedPlanSize(s *concourse.Step) int {
	switch {
	case s.Get != "", s.Task != "":
		return 1
	case s.Put != "":
		if s.NoGet {
			return 1
		}
		return 3 // the put, its get and the on_success joining them
	}
	n := 1
	switch {
	case s.InParallel != nil:
		for i := range s.InParallel.Steps {
			n = capped(n + stepPlanSize(&s.InParallel.Steps[i]))
		}
	case s.Do != nil:
		for i := range s.Do {
			n = capped(n + stepPlanSize(&s.Do[i]))
		}
	case s.Try != nil:
		n = capped(n + stepPlanSize(s.Try))
	}
	if s.Timeout != "" {
		n++
	}
	return n
}

func capped(n int) int {
	return min(n, MaxPlanSteps+1)
}

// CheckPlanLimits checks a plan posted for a one-off build (fly execute's)
// against the caps: its nesting, its size and how deep its steps' images
// nest. It walks no deeper than the caps.
func CheckPlanLimits(p *concourse.Plan) error {
	w := planWalk{}
	w.walk(p, 1, 0)
	return w.err
}

type planWalk struct {
	steps int
	err   error
}

func (w *planWalk) walk(p *concourse.Plan, depth, chain int) {
	if w.err != nil {
		return
	}
	w.steps++
	switch {
	case depth > MaxNestingDepth:
		w.err = fmt.Errorf("plan: steps nested deeper than %d (the limit)", MaxNestingDepth)
		return
	case chain > MaxTypeChainDepth:
		w.err = fmt.Errorf("plan: step %s: type chain deeper than %d (the limit)", p.ID, MaxTypeChainDepth)
		return
	case w.steps > MaxPlanSteps:
		w.err = fmt.Errorf("plan: more than %d steps (the limit)", MaxPlanSteps)
		return
	}
	for _, c := range p.Children() {
		w.walk(c, depth+1, chain)
	}
	var images []concourse.TypeImage
	if p.Get != nil {
		images = append(images, p.Get.TypeImage)
	}
	if p.Put != nil {
		images = append(images, p.Put.TypeImage)
	}
	if p.Check != nil {
		images = append(images, p.Check.TypeImage)
	}
	for _, ti := range images {
		for _, sub := range []*concourse.Plan{ti.CheckPlan, ti.GetPlan} {
			if sub != nil {
				w.walk(sub, depth, chain+1)
			}
		}
	}
}
