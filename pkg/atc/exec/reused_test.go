package exec

import (
	"log/slog"
	"slices"
	"testing"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/concourse"
)

// A step reused from the build this one resumes shows its events once, and
// hands on its outputs; a step that finished in this build before a
// restart replays silently, as before.
func TestAReusedStepIsShownOnceAndHandsOnItsOutputs(t *testing.T) {
	rep := &reports{}
	r := &Runner{db: stateStore{}, log: slog.New(slog.DiscardHandler), delegates: rep}
	code := 0
	b := &buildstate.Build{ID: 2, Name: "1.1", Team: "main", TeamID: 1, State: buildstate.BuildState{Steps: map[concourse.PlanID]*buildstate.StepRecord{
		"1": {Name: "make", Type: concourse.KindTask, Status: concourse.StatusSucceeded, ExitStatus: &code, ReusedFrom: "1",
			Outputs: map[string]api.ArtifactRef{"out": {Key: "artifacts/a", Digest: "sha256:a"}}},
		"2": {Name: "use", Type: concourse.KindTask, Status: concourse.StatusSucceeded, ExitStatus: &code},
	}}}
	plan := concourse.Plan{ID: "d", Do: &concourse.DoPlan{
		{ID: "1", Task: &concourse.TaskPlan{Name: "make"}},
		{ID: "2", Task: &concourse.TaskPlan{Name: "use"}},
	}}
	x := newRunState(r, b)
	if ok, err := x.Run(t.Context(), &plan); !ok || err != nil {
		t.Fatalf("run: %v, %v", ok, err)
	}
	want := []string{"1 pod-ended events.InitializeTask", "1 pod-ended events.StartTask", "1 pod-ended events.Log", "1 pod-ended events.FinishTask"}
	if got := rep.all(); !slices.Equal(got, want) {
		t.Errorf("reports %q, want %q", got, want)
	}
	if a, ok := x.artifact("out"); !ok || a.Digest != "sha256:a" {
		t.Errorf("artifact out: %+v, %v", a, ok)
	}
	if !b.State.Steps["1"].ReuseShown {
		t.Error("the reused step is not recorded as shown")
	}
	// The build resumed after a restart shows it no more.
	if ok, err := newRunState(r, b).Run(t.Context(), &plan); !ok || err != nil {
		t.Fatalf("run again: %v, %v", ok, err)
	}
	if got := rep.all(); len(got) != len(want) {
		t.Errorf("shown again after a restart: %q", got[len(want):])
	}
}
