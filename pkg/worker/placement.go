package worker

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/porter-ci/porter/pkg/concourse"
)

// Strategy is how a step's worker is chosen among those that can run it.
type Strategy string

// Strategies, named as Concourse's --container-placement-strategy.
const (
	FewestBuildContainers Strategy = "fewest-build-containers"
	Random                Strategy = "random"
	LimitActiveTasks      Strategy = "limit-active-tasks"
)

// ParseStrategy validates a strategy's name. Concourse's volume-locality
// is accepted and means fewest-build-containers: artifacts live in the
// blobstore, so no worker is nearer to a step's inputs than another.
func ParseStrategy(s string) (Strategy, error) {
	switch Strategy(s) {
	case FewestBuildContainers, Random, LimitActiveTasks:
		return Strategy(s), nil
	case "volume-locality", "":
		return FewestBuildContainers, nil
	}
	return "", fmt.Errorf("container placement strategy %q: want fewest-build-containers, random or limit-active-tasks", s)
}

// Candidate is a registered worker as placement sees it.
type Candidate struct {
	Name     string
	Platform string
	Team     string
	State    concourse.WorkerState
	Tags     []string
	// Privileged: the worker allows privileged steps (Config.AllowsPrivileged).
	Privileged bool
	// ActiveContainers and ActiveTasks count the worker's step pods (and
	// those that are tasks) of builds that have not finished.
	ActiveContainers int
	ActiveTasks      int
	// Waiting counts the worker's pods declared ahead of their turn.
	Waiting int
}

// Requirements are what a step asks of its worker.
type Requirements struct {
	Tags     []string
	Team     string
	Platform string // "" means linux
	// Task is true for task steps (limit-active-tasks counts only those).
	Task bool
	// Privileged steps run only on workers that allow them.
	Privileged bool
	// OwnNamespace: the team has a namespace of its own on some worker
	// (team_namespaces), and its steps run only on its own workers.
	OwnNamespace bool
	// Ahead: the step's pod is declared ahead of its turn, and goes only
	// where the worker's share of such pods (Placer.MaxWaiting) has room.
	Ahead bool
	// Started are the workers the step's build already ran steps on: a
	// landing or retiring one still takes the build's steps, so that the
	// builds running on it finish.
	Started []string
}

// StepRequirements are what a step of team asks of its worker: its tags
// (empty ones dropped, as Concourse ignores them), its platform, and
// whether it is a task.
func StepRequirements(team string, tags []string, platform string, task bool) Requirements {
	return Requirements{Tags: slices.DeleteFunc(slices.Clone(tags), func(t string) bool { return t == "" }),
		Team: team, Platform: platform, Task: task}
}

func (r Requirements) String() string {
	platform := r.Platform
	if platform == "" {
		platform = PlatformLinux
	}
	s := "platform " + platform
	if len(r.Tags) > 0 {
		s += ", tags [" + strings.Join(r.Tags, ", ") + "]"
	}
	if r.Team != "" {
		s += ", team " + r.Team
	}
	if r.Privileged {
		s += ", privileged"
	}
	if r.OwnNamespace {
		s += " (its own workers only: the team has a namespace of its own)"
	}
	return s
}

// NoWorkerError says that no registered worker could ever run the step.
type NoWorkerError struct {
	Req     Requirements
	Workers []Candidate
}

func (e *NoWorkerError) Error() string {
	if len(e.Workers) == 0 {
		return "no workers: none is registered"
	}
	var ws []string
	for _, w := range e.Workers {
		d := fmt.Sprintf("%s (platform %s", w.Name, w.Platform)
		if len(w.Tags) > 0 {
			d += ", tags [" + strings.Join(w.Tags, ", ") + "]"
		}
		if w.Team != "" {
			d += ", team " + w.Team
		}
		if e.Req.Privileged && !w.Privileged {
			d += ", privileged steps not allowed"
		}
		ws = append(ws, d+")")
	}
	msg := fmt.Sprintf("no worker satisfies the step's %s; the workers are %s", e.Req, strings.Join(ws, ", "))
	if e.Req.Privileged {
		msg += "; a worker runs privileged steps only when its workers config says `privileged: allow` (docs/step-pod-security.md)"
	}
	return msg
}

// BusyError says that workers that can run the step exist, but none can
// take it now (stalled, landing, or at its active task limit): the step
// waits.
type BusyError struct {
	Req     Requirements
	Reasons []string
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("waiting for a worker (%s): %s", e.Req, strings.Join(e.Reasons, "; "))
}

// Placer chooses a step's worker.
type Placer struct {
	Strategy Strategy
	// MaxActiveTasks is limit-active-tasks' limit per worker (0: none).
	MaxActiveTasks int
	// MaxWaiting is the most pods declared ahead of their turn a worker
	// holds at once (0: none).
	MaxWaiting int
	// Intn picks among equals (nil: math/rand/v2).
	Intn func(n int) int
}

// Choose returns the worker to run a step on. It returns a *NoWorkerError
// when no worker is compatible with req, and a *BusyError when compatible
// workers exist but none can take a step now.
//
// As in Concourse: a step runs on a worker with all its tags, and a tagged
// worker runs only steps that ask for its tags; a team's worker runs only
// that team's steps, and a team's steps go to its own workers when any can
// take them.
func (p Placer) Choose(cs []Candidate, req Requirements) (Candidate, error) {
	var compatible []Candidate
	for _, c := range cs {
		if c.compatible(req) {
			compatible = append(compatible, c)
		}
	}
	if len(compatible) == 0 {
		return Candidate{}, &NoWorkerError{Req: req, Workers: cs}
	}
	var ready []Candidate
	var reasons []string
	for _, c := range compatible {
		switch {
		case (c.State == concourse.WorkerLanding || c.State == concourse.WorkerRetiring) && slices.Contains(req.Started, c.Name):
			ready = append(ready, c)
		case c.State != concourse.WorkerRunning:
			reasons = append(reasons, fmt.Sprintf("worker %s is %s", c.Name, c.State))
		case p.Strategy == LimitActiveTasks && req.Task && p.MaxActiveTasks > 0 && c.ActiveTasks >= p.MaxActiveTasks:
			reasons = append(reasons, fmt.Sprintf("worker %s runs %d active tasks, its limit", c.Name, c.ActiveTasks))
		case req.Ahead && c.Waiting >= p.MaxWaiting:
			reasons = append(reasons, fmt.Sprintf("worker %s holds %d pods declared ahead, its limit", c.Name, c.Waiting))
		default:
			ready = append(ready, c)
		}
	}
	if len(ready) == 0 {
		return Candidate{}, &BusyError{Req: req, Reasons: reasons}
	}
	if req.Team != "" {
		var own []Candidate
		for _, c := range ready {
			if c.Team == req.Team {
				own = append(own, c)
			}
		}
		if len(own) > 0 {
			ready = own
		}
	}
	intn := p.Intn
	if intn == nil {
		intn = rand.IntN
	}
	switch p.Strategy {
	case Random:
	case LimitActiveTasks:
		ready = fewest(ready, func(c Candidate) int { return c.ActiveTasks })
	default:
		ready = fewest(ready, func(c Candidate) int { return c.ActiveContainers })
	}
	return ready[intn(len(ready))], nil
}

// fewest keeps the candidates with the smallest count.
func fewest(cs []Candidate, count func(Candidate) int) []Candidate {
	least := slices.MinFunc(cs, func(a, b Candidate) int { return count(a) - count(b) })
	var out []Candidate
	for _, c := range cs {
		if count(c) == count(least) {
			out = append(out, c)
		}
	}
	return out
}

func (c Candidate) compatible(req Requirements) bool {
	platform := req.Platform
	if platform == "" {
		platform = PlatformLinux
	}
	if c.Platform != platform {
		return false
	}
	if c.Team != "" && c.Team != req.Team {
		return false
	}
	if req.OwnNamespace && c.Team != req.Team {
		return false
	}
	if req.Privileged && !c.Privileged {
		return false
	}
	if len(c.Tags) > 0 && len(req.Tags) == 0 {
		return false
	}
	for _, t := range req.Tags {
		if !slices.Contains(c.Tags, t) {
			return false
		}
	}
	return true
}
