package db

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/concourse"
)

func TestJobBuildNamesAreSequentialUnderConcurrency(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	f := newPipelineFixture(t, d, nil, []string{"unit", "other"})
	const n = 20
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if _, err := d.CreateJobBuild(ctx, f.jobs["unit"], "alice", true, nil); err != nil {
				t.Errorf("create: %v", err)
			}
		})
	}
	wg.Wait()
	bs, err := d.JobBuilds(ctx, f.jobs["unit"], BuildFilter{Limit: 100})
	if err != nil || len(bs) != n {
		t.Fatalf("%d builds, %v", len(bs), err)
	}
	names := map[string]bool{}
	for _, b := range bs {
		names[b.Name] = true
		if b.JobName != "unit" || b.PipelineName != "p" || b.Status != concourse.StatusPending || b.InputsReady || !b.ManuallyTriggered || b.CreatedBy != "alice" {
			t.Fatalf("build %+v", b)
		}
	}
	for i := 1; i <= n; i++ {
		if !names[strconv.Itoa(i)] {
			t.Fatalf("no build %d in %v", i, names)
		}
	}
	// Another job counts from 1.
	o, err := d.CreateJobBuild(ctx, f.jobs["other"], "", false, nil)
	if err != nil || o.Name != "1" {
		t.Fatalf("other job's first build %+v, %v", o, err)
	}
	// Pages: newest first, by id.
	page, _ := d.JobBuilds(ctx, f.jobs["unit"], BuildFilter{Limit: 3})
	if len(page) != 3 || page[0].ID < page[1].ID {
		t.Fatalf("page %+v", page)
	}
	got, err := d.JobBuildByName(ctx, f.jobs["unit"], "7")
	if err != nil || got.Name != "7" {
		t.Fatalf("build 7: %+v, %v", got, err)
	}
	if _, err := d.JobBuildByName(ctx, f.jobs["other"], "7"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("build 7 of other: %v", err)
	}
}

func TestBuildInputsOutputsPassedAndReruns(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	f := newPipelineFixture(t, d, []string{"repo", "image"}, []string{"unit", "deploy"})
	repo, unit := f.resources["repo"], f.jobs["unit"]
	if _, err := d.SaveVersions(ctx, repo, vs("a", "b")); err != nil {
		t.Fatal(err)
	}
	a, _ := d.FindVersion(ctx, repo, map[string]string{"ref": "a"})
	b, _ := d.FindVersion(ctx, repo, map[string]string{"ref": "b"})

	b1, err := d.CreateJobBuild(ctx, unit, "", false, []BuildInput{{Name: "src", ResourceID: repo, VersionID: a.ID}})
	if err != nil || !b1.InputsReady {
		t.Fatalf("build with inputs %+v, %v", b1, err)
	}
	b2, _ := d.CreateJobBuild(ctx, unit, "", false, []BuildInput{{Name: "src", ResourceID: repo, VersionID: a.ID}})
	b3, _ := d.CreateJobBuild(ctx, unit, "", true, nil)
	if err := d.SaveBuildInputs(ctx, b3.ID, unit, []BuildInput{{Name: "src", ResourceID: repo, VersionID: b.ID}}); err != nil {
		t.Fatal(err)
	}
	first := func(id int64) bool {
		vs, err := d.BuildVersions(ctx, id)
		if err != nil || len(vs) != 1 {
			t.Fatalf("versions of %d: %+v, %v", id, vs, err)
		}
		return vs[0].FirstOccurrence
	}
	if !first(b1.ID) || first(b2.ID) || !first(b3.ID) {
		t.Fatal("first occurrence: want build 1 and 3 only")
	}
	hist, _ := d.JobInputHistory(ctx, unit)
	if !hist["src"][a.ID] || !hist["src"][b.ID] || len(hist["src"]) != 2 {
		t.Fatalf("history %+v", hist)
	}
	last, _ := d.LastInputs(ctx, unit)
	if last["src"] != b.ID {
		t.Fatalf("last inputs %+v", last)
	}

	// A put's output is saved as a version and counts for passed once
	// its build succeeds.
	if err := d.SaveBuildVersion(ctx, b1.ID, unit, "image", f.resources["image"], NewVersion{Version: map[string]string{"digest": "sha256:1"}}, false); err != nil {
		t.Fatal(err)
	}
	img, err := d.FindVersion(ctx, f.resources["image"], map[string]string{"digest": "sha256:1"})
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := d.PassedBuilds(ctx, unit, f.resources["image"]); len(p) != 0 {
		t.Fatalf("passed before success: %+v", p)
	}
	if err := d.StartJobBuild(ctx, b1.ID, []byte(`{"id":"x"}`), "s1", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := d.StartJobBuild(ctx, b1.ID, []byte(`{"id":"x"}`), "s1", time.Now()); !errors.Is(err, ErrConflict) {
		t.Fatalf("second start: %v", err)
	}
	if err := d.FinishBuild(ctx, b1.ID, concourse.StatusSucceeded, time.Now()); err != nil {
		t.Fatal(err)
	}
	if p, _ := d.PassedBuilds(ctx, unit, f.resources["image"]); len(p[img.ID]) != 1 || p[img.ID][0] != b1.ID {
		t.Fatalf("image passed: %+v", p)
	}
	if p, _ := d.PassedBuilds(ctx, unit, repo); len(p) != 1 || len(p[a.ID]) != 1 {
		t.Fatalf("repo passed: %+v", p)
	}
	started, _ := d.JobBuildByID(ctx, b1.ID)
	if started.Server != "s1" || string(started.Plan) == "" {
		t.Fatalf("started build %+v", started)
	}

	// Reruns: "1.1", "1.2", and a rerun of a rerun is "1.3"; inputs copied.
	r1, err := d.RerunJobBuild(ctx, started, "bob")
	if err != nil || r1.Name != "1.1" || r1.RerunOf != b1.ID || !r1.InputsReady || r1.Status != concourse.StatusPending {
		t.Fatalf("rerun %+v, %v", r1, err)
	}
	r2, _ := d.RerunJobBuild(ctx, started, "bob")
	r3, err := d.RerunJobBuild(ctx, r2, "bob")
	if r2.Name != "1.2" || err != nil || r3.Name != "1.3" || r3.RerunOf != b1.ID {
		t.Fatalf("reruns %s %s, %v", r2.Name, r3.Name, err)
	}
	rv, _ := d.BuildVersions(ctx, r3.ID)
	if len(rv) != 1 || rv[0].Version.ID != a.ID || rv[0].FirstOccurrence || !rv[0].Input {
		t.Fatalf("rerun inputs %+v", rv)
	}
	un, _ := d.UnfinishedJobBuilds(ctx, []int64{unit})
	if len(un) != 5 || un[0].ID > un[1].ID {
		t.Fatalf("unfinished %d", len(un))
	}

	// A resume is a rerun ("1.4") that names the build it resumes and
	// starts with its plan and the state it was given; a rerun names none.
	state := `{"steps": {"1": {"name": "make", "status": "succeeded", "reused_from": "1"}}}`
	res, err := d.ResumeJobBuild(ctx, started, "carol", Resume{Plan: started.Plan, State: []byte(state)})
	if err != nil || res.Name != "1.4" || res.RerunOf != b1.ID || res.ResumedFrom != b1.ID || res.CreatedBy != "carol" {
		t.Fatalf("resume %+v, %v", res, err)
	}
	if string(res.Plan) != string(started.Plan) || !strings.Contains(string(res.State), `"reused_from": "1"`) {
		t.Fatalf("resume's plan %s, state %s", res.Plan, res.State)
	}
	if rv, _ := d.BuildVersions(ctx, res.ID); len(rv) != 1 || rv[0].Version.ID != a.ID {
		t.Fatalf("resume inputs %+v", rv)
	}
	if r1.ResumedFrom != 0 {
		t.Fatalf("a rerun resumes build %d", r1.ResumedFrom)
	}
}
