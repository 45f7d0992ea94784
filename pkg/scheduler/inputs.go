// Package scheduler decides when a job gets a build and with which
// resource versions, when pending builds start, and when resources are
// checked. It reads and writes PostgreSQL through pkg/db; building plans and
// running builds are injected (Planner, Starter, CheckRunner).
//
// Where it is simpler than Concourse's scheduler:
//   - A trigger input's version is new when no build of the job ever had
//     it under that input's name (pending and failed builds count).
//   - `version: every` with no earlier build starts at the latest version,
//     then takes each newer one in check order.
//   - Input selection searches all versions (bounded by maxSteps), newest
//     first, with no cache between passes; every pass looks at every
//     schedulable job.
//   - A serial group starts its builds in creation order across its jobs;
//     running builds of a paused job do not count against its groups.
package scheduler

import "github.com/porter-ci/porter/pkg/concourse"

// Input is one get step of a job: what the scheduler chooses a version for.
type Input struct {
	Name     string // the step's name: the artifact's name in the build
	Resource string
	Passed   []string
	Trigger  bool
	Every    bool
	// Pinned is the get step's own `version:` pin; a pin on the resource
	// (in its config or through the API) overrides it.
	Pinned map[string]string
}

// JobInputs lists the get steps of a job's plan and hooks, in plan order.
// A name got twice is one input (the first one's settings), as a build has
// one artifact per name.
func JobInputs(job *concourse.JobConfig) []Input {
	var out []Input
	seen := map[string]bool{}
	job.EachStep(func(s *concourse.Step) {
		if s.Get == "" || seen[s.Get] {
			return
		}
		seen[s.Get] = true
		in := Input{Name: s.Get, Resource: s.Get, Passed: s.Passed, Trigger: s.Trigger}
		if s.Resource != "" {
			in.Resource = s.Resource
		}
		if s.Version != nil {
			in.Every = s.Version.Every
			in.Pinned = s.Version.Pinned
		}
		out = append(out, in)
	})
	return out
}
