// Package reuse decides which steps of a failed build a build resuming it
// does not run again, and what the resuming build's log shows for them.
//
// A resuming build runs the failed build's own plan (same plan IDs). It
// starts with the records of the steps that succeeded before the failure,
// copied as finished: the executor replays a finished record (its outputs,
// by blobstore key and digest, and its version) instead of running the
// step, as it does after a server restart.
//
// What is reused:
//   - every step of a part of the plan that succeeded, records of its
//     failed attempts and tried steps included, so that the replay follows
//     the same path;
//   - in a part that did not succeed: its succeeded steps (in_parallel
//     branches, across runs, the steps before the failure of a do);
//   - of attempts that all failed, each attempt's succeeded steps: the
//     attempts run again from the first;
//   - a put that succeeded, wherever it is: a put is never repeated.
//
// What runs again: the step that failed and everything after it, and the
// hooks that react to an outcome that was not success (on_failure,
// on_error, on_abort, and ensure after a part that did not succeed), since
// the resumed build's outcome is its own — except their succeeded puts.
// An across step's own record is not copied, so that its runs are
// announced in the new build's log.
package reuse

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events"
)

// Seed is the state a build resuming the failed build named from starts
// with: the records of failed's steps it reuses (see the package's doc),
// marked ReusedFrom from (or the build that ran the step, when failed
// reused it too).
func Seed(plan *concourse.Plan, failed buildstate.BuildState, from string) buildstate.BuildState {
	s := seeder{failed: failed.Steps, out: map[concourse.PlanID]*buildstate.StepRecord{}, from: from}
	s.walk(plan)
	return buildstate.BuildState{Steps: s.out}
}

// Reused lists the plan IDs of the steps a state seeded by Seed reuses.
func Reused(st buildstate.BuildState) []concourse.PlanID {
	var ids []concourse.PlanID
	for id, r := range st.Steps {
		if r.ReusedFrom != "" {
			ids = append(ids, id)
		}
	}
	return ids
}

type seeder struct {
	failed map[concourse.PlanID]*buildstate.StepRecord
	out    map[concourse.PlanID]*buildstate.StepRecord
	from   string
}

// leaf reports whether p is a step with a record of its own.
func leaf(p *concourse.Plan) bool {
	switch p.Kind() {
	case concourse.KindTask, concourse.KindGet, concourse.KindPut, concourse.KindCheck,
		concourse.KindLoadVar, concourse.KindSetPipeline, concourse.KindArtifactOutput:
		return true
	}
	return false
}

func (s *seeder) status(id concourse.PlanID) concourse.BuildStatus {
	if r, ok := s.failed[id]; ok {
		return r.Status
	}
	return ""
}

// succeeded reports whether the part p of the failed build succeeded, as
// the executor decided it.
func (s *seeder) succeeded(p *concourse.Plan) bool {
	switch {
	case leaf(p), p.Across != nil:
		return s.status(p.ID) == concourse.StatusSucceeded
	case p.ArtifactInput != nil:
		return true
	case p.Do != nil:
		return s.all(*p.Do)
	case p.InParallel != nil:
		return s.all(p.InParallel.Steps)
	case p.Retry != nil:
		for i := range *p.Retry {
			if s.succeeded(&(*p.Retry)[i]) {
				return true
			}
		}
		return false
	case p.OnSuccess != nil:
		return s.succeeded(&p.OnSuccess.Step) && s.succeeded(&p.OnSuccess.Next)
	case p.Ensure != nil:
		return s.succeeded(&p.Ensure.Step) && s.succeeded(&p.Ensure.Next)
	case p.OnFailure != nil:
		return s.succeeded(&p.OnFailure.Step)
	case p.OnError != nil:
		return s.succeeded(&p.OnError.Step)
	case p.OnAbort != nil:
		return s.succeeded(&p.OnAbort.Step)
	case p.Try != nil:
		// A failed try does not fail the build, but what it tried runs
		// again: only what succeeded is reused.
		return s.succeeded(&p.Try.Step)
	case p.Timeout != nil:
		return s.succeeded(&p.Timeout.Step)
	}
	return false
}

func (s *seeder) all(ps []concourse.Plan) bool {
	for i := range ps {
		if !s.succeeded(&ps[i]) {
			return false
		}
	}
	return true
}

// walk seeds what p reuses.
func (s *seeder) walk(p *concourse.Plan) {
	if p.Across != nil {
		s.across(p)
		return
	}
	if s.succeeded(p) {
		s.copyAll(p)
		return
	}
	if leaf(p) {
		return // it did not succeed: it runs again
	}
	switch {
	case p.Retry != nil:
		// No attempt succeeded: they all run again, each reusing what
		// succeeded of it.
		for i := range *p.Retry {
			s.walk(&(*p.Retry)[i])
		}
	case p.OnSuccess != nil:
		s.walk(&p.OnSuccess.Step)
		if s.succeeded(&p.OnSuccess.Step) {
			s.walk(&p.OnSuccess.Next)
		} else {
			s.puts(&p.OnSuccess.Next) // ran after a failed try
		}
	default:
		for _, c := range p.Children() {
			if hook(p, c) {
				s.puts(c)
				continue
			}
			s.walk(c)
		}
	}
}

// hook reports whether c is a hook of p that reacts to p's step not
// succeeding, or runs whatever it did (ensure).
func hook(p, c *concourse.Plan) bool {
	for _, h := range []*concourse.HookPlan{p.OnFailure, p.OnError, p.OnAbort, p.Ensure} {
		if h != nil && c == &h.Next {
			return true
		}
	}
	return false
}

// copyAll copies every finished record of p's steps: p succeeded, and its
// replay follows the path it took.
func (s *seeder) copyAll(p *concourse.Plan) {
	if p.Across != nil {
		s.across(p)
		return
	}
	if leaf(p) {
		if r, ok := s.failed[p.ID]; ok && r.Finished() {
			s.copy(p.ID, r)
		}
		return
	}
	for _, c := range p.Children() {
		s.copyAll(c)
	}
}

// puts copies the succeeded puts of p, which are never repeated.
func (s *seeder) puts(p *concourse.Plan) {
	if p.Put != nil {
		if s.status(p.ID) == concourse.StatusSucceeded {
			s.copy(p.ID, s.failed[p.ID])
		}
		return
	}
	if p.Across != nil {
		for _, run := range s.acrossRuns(p) {
			s.puts(&run)
		}
		return
	}
	for _, c := range p.Children() {
		s.puts(c)
	}
}

// across seeds an across step's runs, each as its own part of the plan;
// the step's own record stays out, so that the runs are announced again.
func (s *seeder) across(p *concourse.Plan) {
	runs := s.acrossRuns(p)
	if runs == nil {
		// The runs' shape is unknown (see acrossRuns): only their
		// succeeded steps are reused.
		prefix := string(p.ID) + "/"
		for id, r := range s.failed {
			if strings.HasPrefix(string(id), prefix) && r.Status == concourse.StatusSucceeded {
				s.copy(id, r)
			}
		}
		return
	}
	for i := range runs {
		s.walk(&runs[i])
	}
}

// acrossRuns are the plans of an across step's runs in the failed build,
// with their IDs ("<id>/<run>/<n>", numbered as pipeline.AcrossSubstep
// numbers them); nil when the template cannot be read before its
// ((.:vars)) are filled in.
func (s *seeder) acrossRuns(p *concourse.Plan) []concourse.Plan {
	n := -1
	prefix := string(p.ID) + "/"
	for id := range s.failed {
		rest, ok := strings.CutPrefix(string(id), prefix)
		if !ok {
			continue
		}
		run, _, _ := strings.Cut(rest, "/")
		if i, err := strconv.Atoi(run); err == nil && i > n {
			n = i
		}
	}
	runs := []concourse.Plan{}
	for i := 0; i <= n; i++ {
		var sub concourse.Plan
		if err := json.Unmarshal([]byte(p.Across.SubStepTemplate), &sub); err != nil {
			return nil
		}
		k := 0
		sub.Each(func(q *concourse.Plan) {
			q.ID = concourse.PlanID(fmt.Sprintf("%s/%d/%d", p.ID, i, k))
			k++
		})
		runs = append(runs, sub)
	}
	return runs
}

// copy records r as reused: the pod and worker were the failed build's.
// A step the failed build reused itself keeps the name of the build that
// ran it.
func (s *seeder) copy(id concourse.PlanID, r *buildstate.StepRecord) {
	c := *r
	c.StepID, c.Worker, c.Container, c.Attempt, c.Gated = "", "", "", 0, false
	if c.ReusedFrom == "" {
		c.ReusedFrom = s.from
	}
	c.ReuseShown = false
	s.out[id] = &c
}

// Events are what a reused step shows in the resuming build's log, in
// Concourse's shapes for its kind, with a line saying whose outcome it is.
func Events(id concourse.PlanID, r buildstate.StepRecord, now int64) []events.Event {
	o := events.Origin{ID: string(id)}
	line := events.Log{Time: now, Origin: o, Payload: fmt.Sprintf("reused from build %s\n", r.ReusedFrom)}
	exit := 0
	if r.ExitStatus != nil {
		exit = *r.ExitStatus
	}
	var evs []events.Event
	switch r.Type {
	case concourse.KindTask:
		evs = []events.Event{events.InitializeTask{Time: now, Origin: o, Config: r.EventConfig},
			events.StartTask{Time: now, Origin: o, Config: r.EventConfig}, line}
		if r.ExitStatus != nil {
			evs = append(evs, events.FinishTask{Time: now, Origin: o, ExitStatus: exit})
		}
	case concourse.KindGet:
		evs = []events.Event{events.InitializeGet{Time: now, Origin: o}, events.StartGet{Time: now, Origin: o}, line}
		if r.Status == concourse.StatusSucceeded || r.ExitStatus != nil {
			evs = append(evs, events.FinishGet{Time: now, Origin: o, ExitStatus: exit, Version: r.Version, Metadata: metadata(r)})
		}
	case concourse.KindPut:
		evs = []events.Event{events.InitializePut{Time: now, Origin: o}, events.StartPut{Time: now, Origin: o}, line}
		if r.Status == concourse.StatusSucceeded || r.ExitStatus != nil {
			evs = append(evs, events.FinishPut{Time: now, Origin: o, ExitStatus: exit, Version: r.Version, Metadata: metadata(r)})
		}
	case concourse.KindCheck:
		evs = []events.Event{events.InitializeCheck{Time: now, Origin: o, Name: r.Name}, line}
	default:
		evs = []events.Event{events.Initialize{Time: now, Origin: o}, events.Start{Time: now, Origin: o}, line,
			events.Finish{Time: now, Origin: o, Succeeded: r.Status == concourse.StatusSucceeded}}
	}
	if r.Status == concourse.StatusErrored && r.Error != "" {
		evs = append(evs, events.Error{Time: now, Origin: o, Message: r.Error})
	}
	return evs
}

func metadata(r buildstate.StepRecord) []events.MetadataField {
	var out []events.MetadataField
	for _, m := range r.Metadata {
		out = append(out, events.MetadataField{Name: m.Name, Value: m.Value})
	}
	return out
}
