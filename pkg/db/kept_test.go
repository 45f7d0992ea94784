package db

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/concourse"
)

func TestFinishedContainersKnowTheLatestCheckAndJobBuild(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	team, err := d.EnsureTeam(ctx, "main", TeamAuth{})
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := d.SavePipeline(ctx, team.ID, "p", testConfig([]string{"j"}, map[string]map[string]any{"r": {"n": 1}}), 0)
	if err != nil {
		t.Fatal(err)
	}
	job, err := d.Job(ctx, p.ID, "j")
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.Resource(ctx, p.ID, "r")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	container := func(buildID int64, typ concourse.StepKind) string {
		t.Helper()
		c, err := d.CreateContainer(ctx, Container{TeamID: team.ID, BuildID: buildID, Type: typ, WorkerName: "w", StepID: string(typ) + "-" + time.Now().String()})
		if err != nil {
			t.Fatal(err)
		}
		return c.Handle
	}
	finish := func(id int64, st concourse.BuildStatus) {
		t.Helper()
		if err := d.FinishBuild(ctx, id, st, now); err != nil {
			t.Fatal(err)
		}
	}
	ref := ResourceRef{ID: res.ID, PipelineID: p.ID, TeamID: team.ID, Name: "r"}
	var checks []string
	for range 3 {
		b, err := d.CreateCheckBuild(ctx, ref, json.RawMessage(`{}`), "s", now)
		if err != nil {
			t.Fatal(err)
		}
		checks = append(checks, container(b.ID, "check"))
		if len(checks) < 3 {
			finish(b.ID, concourse.StatusSucceeded)
		} // the third is still running: the second is the latest finished
	}
	var builds []string
	for _, st := range []concourse.BuildStatus{concourse.StatusFailed, concourse.StatusSucceeded} {
		b, err := d.CreateJobBuild(ctx, job.ID, "", true, nil)
		if err != nil {
			t.Fatal(err)
		}
		builds = append(builds, container(b.ID, "task"))
		finish(b.ID, st)
	}
	oneOff, err := d.CreateOneOffBuild(ctx, team.ID, json.RawMessage(`{"id":"1"}`), "test", "s")
	if err != nil {
		t.Fatal(err)
	}
	execute := container(oneOff.ID, "task")
	finish(oneOff.ID, concourse.StatusSucceeded)
	if err := d.InterceptStarted(ctx, execute); err != nil {
		t.Fatal(err)
	}

	cs, err := d.FinishedContainers(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]FinishedContainer{}
	for _, c := range cs {
		got[c.Handle] = c
	}
	if len(cs) != 5 {
		t.Fatalf("%d finished containers, want 5 (the running check's is not): %+v", len(cs), cs)
	}
	if c := got[checks[0]]; !c.Check || c.LatestCheck {
		t.Errorf("first check: %+v", c)
	}
	if c := got[checks[1]]; !c.Check || !c.LatestCheck {
		t.Errorf("latest finished check: %+v", c)
	}
	if c := got[builds[0]]; !c.JobBuild || c.LatestOfJob || c.BuildStatus != "failed" {
		t.Errorf("first job build: %+v", c)
	}
	if c := got[builds[1]]; !c.JobBuild || !c.LatestOfJob {
		t.Errorf("latest job build: %+v", c)
	}
	if c := got[execute]; c.JobBuild || c.Check || c.InterceptSessions != 1 || c.LastIntercept.IsZero() {
		t.Errorf("one-off: %+v", c)
	}
	if err := d.InterceptEnded(ctx, execute); err != nil {
		t.Fatal(err)
	}
	if err := d.SetKeptReason(ctx, execute, "intercepted"); err != nil {
		t.Fatal(err)
	}
	c, err := d.Container(ctx, execute)
	if err != nil || c.KeptReason != "intercepted" {
		t.Errorf("kept reason: %+v %v", c, err)
	}
}
