package reuse_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/atc/exec/reuse"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events"
)

func task(id string) concourse.Plan {
	return concourse.Plan{ID: concourse.PlanID(id), Task: &concourse.TaskPlan{Name: id}}
}

func put(id string) concourse.Plan {
	return concourse.Plan{ID: concourse.PlanID(id), Put: &concourse.PutPlan{Name: id}}
}

func do(id string, ps ...concourse.Plan) concourse.Plan {
	d := concourse.DoPlan(ps)
	return concourse.Plan{ID: concourse.PlanID(id), Do: &d}
}

func hook(id, kind string, step, next concourse.Plan) concourse.Plan {
	h := &concourse.HookPlan{Step: step, Next: next, Hook: kind}
	p := concourse.Plan{ID: concourse.PlanID(id)}
	switch kind {
	case concourse.HookOnSuccess:
		p.OnSuccess = h
	case concourse.HookOnFailure:
		p.OnFailure = h
	case concourse.HookEnsure:
		p.Ensure = h
	}
	return p
}

// state is a failed build's state: each id with its status.
func state(statuses map[string]concourse.BuildStatus) buildstate.BuildState {
	st := buildstate.BuildState{Steps: map[concourse.PlanID]*buildstate.StepRecord{}}
	for id, status := range statuses {
		st.Steps[concourse.PlanID(id)] = &buildstate.StepRecord{Name: id, Type: concourse.KindTask, Status: status,
			StepID: "pod-" + id, Worker: "w", Container: "c-" + id,
			Outputs: map[string]api.ArtifactRef{"out-" + id: {Key: "artifacts/" + id, Digest: "sha256:" + id}}}
	}
	return st
}

func reused(st buildstate.BuildState) []string {
	var ids []string
	for _, id := range reuse.Reused(st) {
		ids = append(ids, string(id))
	}
	slices.Sort(ids)
	return ids
}

const (
	ok   = concourse.StatusSucceeded
	fail = concourse.StatusFailed
	errd = concourse.StatusErrored
)

func TestSeed(t *testing.T) {
	attempts := concourse.DoPlan{task("a1"), task("a2"), task("a3")}
	across := func(tmpl string) concourse.Plan {
		return concourse.Plan{ID: "x", Across: &concourse.AcrossPlan{SubStepTemplate: tmpl}}
	}
	for _, tc := range []struct {
		name   string
		plan   concourse.Plan
		failed map[string]concourse.BuildStatus
		want   []string
	}{
		{"serial: the steps before the failure", do("d", task("1"), task("2"), task("3"), task("4")),
			map[string]concourse.BuildStatus{"1": ok, "2": ok, "3": fail}, []string{"1", "2"}},
		{"an errored step runs again", do("d", task("1"), task("2")),
			map[string]concourse.BuildStatus{"1": ok, "2": errd}, []string{"1"}},
		{"in_parallel: the branches that succeeded",
			concourse.Plan{ID: "p", InParallel: &concourse.InParallelPlan{Steps: []concourse.Plan{task("l"), task("m"), task("r")}}},
			map[string]concourse.BuildStatus{"l": ok, "m": fail, "r": ok}, []string{"l", "r"}},
		{"attempts that succeeded: replayed as they went, the failed attempt too",
			do("d", concourse.Plan{ID: "r", Retry: &attempts}, task("after")),
			map[string]concourse.BuildStatus{"a1": fail, "a2": ok, "after": fail}, []string{"a1", "a2"}},
		{"attempts that all failed: run again from the first",
			do("d", concourse.Plan{ID: "r", Retry: &attempts}),
			map[string]concourse.BuildStatus{"a1": fail, "a2": fail, "a3": fail}, nil},
		{"an on_failure hook that ran runs again", hook("h", concourse.HookOnFailure, task("s"), task("mourn")),
			map[string]concourse.BuildStatus{"s": fail, "mourn": ok}, nil},
		{"a succeeded put in an on_failure hook is never repeated",
			hook("h", concourse.HookOnFailure, task("s"), do("n", task("note"), put("tell"))),
			map[string]concourse.BuildStatus{"s": fail, "note": ok, "tell": ok}, []string{"tell"}},
		{"an ensure after a step that failed runs again", hook("h", concourse.HookEnsure, task("s"), task("clean")),
			map[string]concourse.BuildStatus{"s": fail, "clean": ok}, nil},
		{"an ensure after a step that succeeded is reused",
			do("d", hook("h", concourse.HookEnsure, task("s"), task("clean")), task("late")),
			map[string]concourse.BuildStatus{"s": ok, "clean": ok, "late": fail}, []string{"clean", "s"}},
		{"on_success: the step and its hook", do("d", hook("h", concourse.HookOnSuccess, task("s"), task("yay")), task("late")),
			map[string]concourse.BuildStatus{"s": ok, "yay": ok, "late": fail}, []string{"s", "yay"}},
		{"on_success whose hook failed: the step", hook("h", concourse.HookOnSuccess, task("s"), task("yay")),
			map[string]concourse.BuildStatus{"s": ok, "yay": fail}, []string{"s"}},
		{"a put after a failed try is never repeated",
			do("d", hook("h", concourse.HookOnSuccess, concourse.Plan{ID: "t", Try: &concourse.TryPlan{Step: task("maybe")}}, put("tell")), task("late")),
			map[string]concourse.BuildStatus{"maybe": fail, "tell": ok, "late": fail}, []string{"tell"}},
		{"a failed try runs again", do("d", concourse.Plan{ID: "t", Try: &concourse.TryPlan{Step: task("maybe")}}, task("late")),
			map[string]concourse.BuildStatus{"maybe": fail, "late": fail}, nil},
		{"across: the runs that succeeded, by their IDs", do("d", across(`{"id":"t","task":{"name":"each"}}`)),
			map[string]concourse.BuildStatus{"x/0/0": ok, "x/1/0": fail, "x/2/0": ok}, []string{"x/0/0", "x/2/0"}},
		{"across, a template read only once filled in: its succeeded steps",
			do("d", across(`{"id":"t","task":((.:v))}`)),
			map[string]concourse.BuildStatus{"x/0/0": ok, "x/1/0": fail}, []string{"x/0/0"}},
		{"a step that never ran runs", do("d", task("1"), task("2")), map[string]concourse.BuildStatus{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := reuse.Seed(&tc.plan, state(tc.failed), "7")
			if ids := reused(got); !slices.Equal(ids, tc.want) {
				t.Errorf("reused %v, want %v", ids, tc.want)
			}
		})
	}
}

func TestSeedCopiesOutcomeNotPod(t *testing.T) {
	plan := do("d", task("1"), task("2"))
	failed := state(map[string]concourse.BuildStatus{"1": ok, "2": fail})
	failed.Steps["1"].AuditKey = "builds/3-x/steps/1/"
	got := reuse.Seed(&plan, failed, "3").Steps["1"]
	if got == nil {
		t.Fatal("step 1 not reused")
	}
	if got.StepID != "" || got.Worker != "" || got.Container != "" {
		t.Errorf("the failed build's pod is kept: %+v", got)
	}
	if got.Outputs["out-1"].Digest != "sha256:1" || got.AuditKey != "builds/3-x/steps/1/" || got.Status != ok {
		t.Errorf("outcome not kept: %+v", got)
	}
	if got.ReusedFrom != "3" || got.ReuseShown {
		t.Errorf("reused from %q (shown %v), want 3 (not shown)", got.ReusedFrom, got.ReuseShown)
	}
	if failed.Steps["1"].ReusedFrom != "" {
		t.Error("the failed build's own record changed")
	}
	// Resuming the resumed build keeps the name of the build that ran it.
	again := reuse.Seed(&plan, buildstate.BuildState{Steps: map[concourse.PlanID]*buildstate.StepRecord{"1": got}}, "3.1")
	if r := again.Steps["1"]; r == nil || r.ReusedFrom != "3" {
		t.Errorf("resumed again: %+v, want reused from 3", r)
	}
}

func TestEvents(t *testing.T) {
	code := 0
	r := buildstate.StepRecord{Name: "unit", Type: concourse.KindTask, Status: ok, ExitStatus: &code, ReusedFrom: "4",
		EventConfig: events.TaskConfig{Platform: "linux"}}
	evs := reuse.Events("5", r, 100)
	var types []events.EventType
	for _, ev := range evs {
		types = append(types, ev.EventType())
	}
	want := []events.EventType{events.EventTypeInitializeTask, events.EventTypeStartTask, events.EventTypeLog, events.EventTypeFinishTask}
	if !slices.Equal(types, want) {
		t.Fatalf("events %v, want %v", types, want)
	}
	if l := evs[2].(events.Log); l.Payload != "reused from build 4\n" || l.Origin.ID != "5" {
		t.Errorf("log %+v", l)
	}
	get := buildstate.StepRecord{Type: concourse.KindGet, Status: ok, ReusedFrom: "4", Version: map[string]string{"ref": "abc"}}
	evs = reuse.Events("6", get, 100)
	fin, isFinish := evs[len(evs)-1].(events.FinishGet)
	if !isFinish || fin.Version["ref"] != "abc" || fin.ExitStatus != 0 {
		body, _ := json.Marshal(evs)
		t.Errorf("get's events end with %s", body)
	}
}
