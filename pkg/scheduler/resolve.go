package scheduler

import (
	"fmt"
	"slices"
	"strings"
)

// Candidates is what input selection knows of one input: the versions it
// may use, best first, and for each job of its `passed`, which succeeded
// builds of that job had each version (version id -> build ids).
type Candidates struct {
	Input    Input
	Versions []int64
	Passed   map[string]map[int64][]int64
	// Reason, when set, is why the input has no candidates at all (a pin
	// to a version that does not exist); it is reported as it is.
	Reason string
}

// maxSteps bounds the search so a pathological history cannot stall the
// scheduler; past it the job waits and says so.
const maxSteps = 100_000

// Resolve chooses one version per input: each input takes its best
// candidate such that, for every job named in `passed`, the version went
// through a succeeded build of that job, and inputs that name the same job
// took their versions from one and the same build of it (so two resources
// that passed a job together are used together). It returns input name ->
// version id, or a reason why no choice exists.
func Resolve(cands []Candidates) (map[string]int64, string) {
	for _, c := range cands {
		if c.Reason != "" {
			return nil, c.Reason
		}
	}
	// Inputs with fewer candidates first: failures show up sooner.
	order := slices.Clone(cands)
	slices.SortStableFunc(order, func(a, b Candidates) int { return len(a.Versions) - len(b.Versions) })

	chosen := map[string]int64{}
	steps := 0
	// allowed[job] is the set of builds of job still consistent with the
	// choices made so far; absent means unconstrained.
	var search func(i int, allowed map[string]map[int64]bool) (bool, bool)
	search = func(i int, allowed map[string]map[int64]bool) (found, exhausted bool) {
		if i == len(order) {
			return true, false
		}
		c := order[i]
	versions:
		for _, v := range c.Versions {
			steps++
			if steps > maxSteps {
				return false, true
			}
			next, copied := allowed, false
			for _, job := range c.Input.Passed {
				builds := c.Passed[job][v]
				if len(builds) == 0 {
					continue versions
				}
				set := map[int64]bool{}
				prev, constrained := allowed[job]
				for _, b := range builds {
					if !constrained || prev[b] {
						set[b] = true
					}
				}
				if len(set) == 0 {
					continue versions
				}
				if !copied {
					copied = true
					next = make(map[string]map[int64]bool, len(allowed)+1)
					for k, s := range allowed {
						next[k] = s
					}
				}
				next[job] = set
			}
			chosen[c.Input.Name] = v
			found, exhausted := search(i+1, next)
			if found || exhausted {
				return found, exhausted
			}
			delete(chosen, c.Input.Name)
		}
		return false, false
	}
	found, exhausted := search(0, map[string]map[int64]bool{})
	if exhausted {
		return nil, "too many version combinations to choose inputs from"
	}
	if !found {
		return nil, unsatisfiedReason(cands)
	}
	return chosen, ""
}

// unsatisfiedReason names the inputs that cannot be satisfied.
func unsatisfiedReason(cands []Candidates) string {
	var none, passed []string
	for _, c := range cands {
		switch {
		case len(c.Versions) == 0:
			none = append(none, c.Input.Name)
		case len(c.Input.Passed) > 0:
			passed = append(passed, c.Input.Name)
		}
	}
	if len(none) > 0 {
		return fmt.Sprintf("no versions of input %s", strings.Join(none, ", "))
	}
	return fmt.Sprintf("no versions of input %s satisfy passed constraints", strings.Join(passed, ", "))
}
