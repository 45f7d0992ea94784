package atc

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/porter-ci/porter/pkg/concourse"
)

// tmpPlanner plans jobs made only of tasks with inline configs (in do,
// in_parallel and try), until pkg/pipeline's planner replaces it; the lead
// deletes this file then. It plans no checks.
type tmpPlanner struct{}

func (tmpPlanner) JobPlan(_ *concourse.Config, job *concourse.JobConfig, _ map[string]map[string]string) (concourse.Plan, error) {
	n := 0
	var plan func(s *concourse.Step) (concourse.Plan, error)
	plan = func(s *concourse.Step) (concourse.Plan, error) {
		n++
		p := concourse.Plan{ID: concourse.PlanID(fmt.Sprintf("%x", n))}
		switch {
		case s.Task != "":
			if len(s.Config) == 0 {
				return p, fmt.Errorf("task %s: only inline task configs are planned here", s.Task)
			}
			p.Task = &concourse.TaskPlan{Name: s.Task, Config: s.Config, Privileged: s.Privileged, Params: s.Params,
				InputMapping: s.InputMapping, OutputMapping: s.OutputMapping, Tags: s.Tags, Timeout: s.Timeout}
		case s.Do != nil:
			do := concourse.DoPlan{}
			for i := range s.Do {
				c, err := plan(&s.Do[i])
				if err != nil {
					return p, err
				}
				do = append(do, c)
			}
			p.Do = &do
		case s.InParallel != nil:
			ip := &concourse.InParallelPlan{Limit: s.InParallel.Limit, FailFast: s.InParallel.FailFast}
			for i := range s.InParallel.Steps {
				c, err := plan(&s.InParallel.Steps[i])
				if err != nil {
					return p, err
				}
				ip.Steps = append(ip.Steps, c)
			}
			p.InParallel = ip
		case s.Try != nil:
			c, err := plan(s.Try)
			if err != nil {
				return p, err
			}
			p.Try = &concourse.TryPlan{Step: c}
		default:
			b, _ := json.Marshal(s)
			return p, fmt.Errorf("step %s: only task, do, in_parallel and try are planned here", b)
		}
		return p, nil
	}
	steps := make([]concourse.Step, len(job.Plan))
	copy(steps, job.Plan)
	return plan(&concourse.Step{Do: steps})
}

func (tmpPlanner) CheckPlan(*concourse.Config, *concourse.ResourceConfig, map[string]string) (concourse.Plan, error) {
	return concourse.Plan{}, errors.New("checks are planned by pkg/pipeline, which this server does not have yet")
}
