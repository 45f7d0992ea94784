package db

import (
	"errors"
	"testing"
	"time"
)

func TestDestroyAndRenameTeam(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	f := newPipelineFixture(t, d, []string{"repo"}, []string{"unit"})
	other, err := d.EnsureTeam(ctx, "other", nil)
	if err != nil {
		t.Fatal(err)
	}
	// other has a pipeline with a job build and its container, a one-off
	// build, an artifact and a resource cache: all go with it.
	var pid, jid, rid int64
	if err := d.pool.QueryRow(ctx, `INSERT INTO pipelines (team_id, name, config) VALUES ($1, 'p', '{}') RETURNING id`, other.ID).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if err := d.pool.QueryRow(ctx, `INSERT INTO jobs (pipeline_id, name, config) VALUES ($1, 'j', '{}') RETURNING id`, pid).Scan(&jid); err != nil {
		t.Fatal(err)
	}
	if err := d.pool.QueryRow(ctx, `INSERT INTO resources (pipeline_id, name, type, config, config_hash) VALUES ($1, 'r', 'mock', '{}', 'h') RETURNING id`, pid).Scan(&rid); err != nil {
		t.Fatal(err)
	}
	jb, err := d.CreateJobBuild(ctx, jid, "", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateContainer(ctx, Container{TeamID: other.ID, BuildID: jb.ID, BuildName: jb.Name, StepName: "t", Type: "task", State: "created"}); err != nil {
		t.Fatal(err)
	}
	oneOff, err := d.CreateOneOffBuild(ctx, other.ID, nil, "", "s")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateArtifact(ctx, Artifact{TeamID: other.ID, BuildID: oneOff.ID, Key: "artifacts/x"}); err != nil {
		t.Fatal(err)
	}
	if err := d.SaveResourceCache(ctx, ResourceCache{Key: "k", TeamID: other.ID, ResourceID: rid, Artifact: "a", Digest: "d", Version: map[string]string{"v": "1"}}); err != nil {
		t.Fatal(err)
	}
	running, err := d.TeamUnfinishedBuilds(ctx, other.ID)
	if err != nil || len(running) != 2 {
		t.Fatalf("unfinished builds of other: %v %v", running, err)
	}

	if err := d.RenameTeam(ctx, other.ID, "main"); !errors.Is(err, ErrConflict) {
		t.Fatalf("rename onto main: %v, want ErrConflict", err)
	}
	if err := d.RenameTeam(ctx, other.ID, "renamed"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Team(ctx, "renamed"); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteTeam(ctx, other.ID); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteTeam(ctx, other.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete again: %v, want ErrNotFound", err)
	}
	for _, table := range []string{"pipelines", "builds", "containers", "artifacts", "resource_caches"} {
		var n int
		if err := d.pool.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE team_id = $1", other.ID).Scan(&n); err != nil || n != 0 {
			t.Errorf("%s of the destroyed team: %d (%v)", table, n, err)
		}
	}
	// main's pipeline stays.
	if _, err := d.PipelineByID(ctx, f.pipelineID); err != nil {
		t.Errorf("main's pipeline: %v", err)
	}
}

func TestArchivePipeline(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	team, _ := d.EnsureTeam(ctx, "main", nil)
	p, _, err := d.SavePipeline(ctx, team.ID, "p", testConfig([]string{"j"}, nil), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.UnpausePipeline(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	if err := d.ArchivePipeline(ctx, p.ID, "admin"); err != nil {
		t.Fatal(err)
	}
	got, _ := d.PipelineByID(ctx, p.ID)
	if !got.Archived || !got.Paused || got.PausedBy != "admin" {
		t.Fatalf("archived pipeline %+v", got)
	}
	// Setting it again unarchives it, still paused (as Concourse).
	if _, _, err := d.SavePipeline(ctx, team.ID, "p", testConfig([]string{"j"}, nil), got.ConfigVersion); err != nil {
		t.Fatal(err)
	}
	got, _ = d.PipelineByID(ctx, p.ID)
	if got.Archived || !got.Paused {
		t.Fatalf("set again: %+v, want unarchived and paused", got)
	}
	if err := d.ArchivePipeline(ctx, 999999, "x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("archive a missing pipeline: %v", err)
	}
}

func TestWallComponentsUsersTokens(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	if w, err := d.Wall(ctx); err != nil || w != (Wall{}) {
		t.Fatalf("no wall: %+v %v", w, err)
	}
	if err := d.SetWall(ctx, Wall{Message: "forever"}); err != nil {
		t.Fatal(err)
	}
	if w, _ := d.Wall(ctx); w.Message != "forever" || !w.Expires.IsZero() {
		t.Fatalf("wall %+v", w)
	}
	if err := d.SetWall(ctx, Wall{Message: "gone", Expires: time.Now().Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	if w, _ := d.Wall(ctx); w != (Wall{}) {
		t.Fatalf("an expired wall is shown: %+v", w)
	}
	_ = d.SetWall(ctx, Wall{Message: "x"})
	if err := d.ClearWall(ctx); err != nil {
		t.Fatal(err)
	}
	if w, _ := d.Wall(ctx); w != (Wall{}) {
		t.Fatalf("cleared wall %+v", w)
	}

	cs, err := d.Components(ctx)
	if err != nil || len(cs) != 3 || cs[0].Name != "collector" || cs[1].Name != "scanner" || cs[2].Name != "scheduler" {
		t.Fatalf("components %+v %v", cs, err)
	}
	if err := d.SetComponentPaused(ctx, "scheduler", true); err != nil {
		t.Fatal(err)
	}
	if p, _ := d.ComponentPaused(ctx, "scheduler"); !p {
		t.Fatal("scheduler not paused")
	}
	if p, _ := d.ComponentPaused(ctx, "scanner"); p {
		t.Fatal("scanner paused too")
	}
	if err := d.SetComponentPaused(ctx, "ghost", true); !errors.Is(err, ErrNotFound) {
		t.Fatalf("pause ghost: %v", err)
	}
	if err := d.SetComponentPaused(ctx, "", false); err != nil {
		t.Fatal(err)
	}
	if p, _ := d.ComponentPaused(ctx, "scheduler"); p {
		t.Fatal("unpause all left the scheduler paused")
	}
	_ = d.SetComponentPaused(ctx, "scanner", true)
	if p, err := d.PausedComponents(ctx); err != nil || len(p) != 1 || !p["scanner"] {
		t.Fatalf("paused components %v %v", p, err)
	}
	_ = d.SetComponentPaused(ctx, "scanner", false)
	if err := d.ComponentsRan(ctx, []string{"scheduler", "collector"}, time.Minute, time.Now()); err != nil {
		t.Fatal(err)
	}
	if cs, _ := d.Components(ctx); cs[0].Interval != time.Minute || cs[2].Interval != time.Minute || cs[2].LastRan.IsZero() {
		t.Fatalf("components after a run of two: %+v", cs)
	}
	at := time.Now().Truncate(time.Second)
	if err := d.ComponentRan(ctx, "scanner", 10*time.Second, at); err != nil {
		t.Fatal(err)
	}
	cs, _ = d.Components(ctx)
	if cs[1].Interval != 10*time.Second || !cs[1].LastRan.Equal(at) {
		t.Fatalf("scanner after a run: %+v", cs[1])
	}

	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	_ = d.RecordLogin(ctx, "local", "alice", old)
	_ = d.RecordLogin(ctx, "local", "bob", at)
	_ = d.RecordLogin(ctx, "local", "alice", old.Add(-time.Hour)) // an older login does not move it back
	us, err := d.ActiveUsers(ctx, old)
	if err != nil || len(us) != 2 || us[0].Name != "bob" || us[1].Name != "alice" || !us[1].LastLogin.Equal(old) {
		t.Fatalf("active users %+v %v", us, err)
	}
	if us, _ := d.ActiveUsers(ctx, old.Add(time.Hour)); len(us) != 1 {
		t.Fatalf("active users since %v: %+v", old.Add(time.Hour), us)
	}

	if err := d.SaveAccessToken(ctx, "h1", "jwt-1", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	_ = d.SaveAccessToken(ctx, "h2", "jwt-2", time.Now().Add(-time.Minute))
	_ = d.SaveAccessToken(ctx, "h3", "jwt-3", time.Now().Add(-48*time.Hour))
	if s, err := d.AccessToken(ctx, "h1"); err != nil || s != "jwt-1" {
		t.Fatalf("token h1: %q %v", s, err)
	}
	// Just expired: still answered (the signed token says it expired).
	if s, err := d.AccessToken(ctx, "h2"); err != nil || s != "jwt-2" {
		t.Fatalf("token h2: %q %v", s, err)
	}
	// The next save forgets the one expired for two days.
	_ = d.SaveAccessToken(ctx, "h4", "jwt-4", time.Now().Add(time.Hour))
	if _, err := d.AccessToken(ctx, "h3"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("long-expired token: %v, want ErrNotFound", err)
	}
	if n, err := d.DeleteExpiredAccessTokens(ctx, time.Now()); err != nil || n != 1 {
		t.Fatalf("expired tokens deleted: %d %v", n, err)
	}
}

func TestClearVersionsBuildsByPipelineAndTimeContainersOfJobs(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	f := newPipelineFixture(t, d, []string{"repo"}, []string{"unit"})
	repo, unit := f.resources["repo"], f.jobs["unit"]
	if _, err := d.SaveVersions(ctx, repo, vs("a", "b")); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"a", "b"} {
		if err := d.SaveResourceCache(ctx, ResourceCache{Key: "k-" + v, TeamID: f.teamID, ResourceID: repo, Artifact: "x", Digest: "d",
			Version: map[string]string{"ref": v}}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := d.DeleteResourceVersionCaches(ctx, repo, map[string]string{"ref": "a"}); err != nil || n != 1 {
		t.Fatalf("caches of version a: %d %v", n, err)
	}
	if n, err := d.ClearResourceVersions(ctx, repo); err != nil || n != 2 {
		t.Fatalf("cleared %d %v", n, err)
	}
	if got, _, _, _ := d.Versions(ctx, repo, VersionPage{Limit: 10}); len(got) != 0 {
		t.Fatalf("versions after clear: %+v", got)
	}

	jb, _ := d.CreateJobBuild(ctx, unit, "", true, nil)
	oneOff, _ := d.CreateOneOffBuild(ctx, f.teamID, nil, "", "s")
	start := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	if err := d.StartBuild(ctx, jb.ID, start); err != nil {
		t.Fatal(err)
	}
	if err := d.StartBuild(ctx, oneOff.ID, start.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	ids := func(f BuildFilter) []int64 {
		t.Helper()
		bs, err := d.Builds(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, b := range bs {
			out = append(out, b.ID)
		}
		return out
	}
	if got := ids(BuildFilter{PipelineID: f.pipelineID}); len(got) != 1 || got[0] != jb.ID {
		t.Errorf("pipeline builds %v, want [%d]", got, jb.ID)
	}
	if got := ids(BuildFilter{StartedFrom: start.Add(time.Minute)}); len(got) != 1 || got[0] != oneOff.ID {
		t.Errorf("started since %v: %v, want [%d]", start.Add(time.Minute), got, oneOff.ID)
	}
	if got := ids(BuildFilter{StartedTo: start}); len(got) != 1 || got[0] != jb.ID {
		t.Errorf("started until %v: %v, want [%d] (inclusive)", start, got, jb.ID)
	}
	if got, _ := d.JobBuilds(ctx, unit, BuildFilter{StartedFrom: start.Add(time.Minute)}); len(got) != 0 {
		t.Errorf("job builds started later: %+v", got)
	}

	c, err := d.CreateContainer(ctx, Container{TeamID: f.teamID, BuildID: jb.ID, BuildName: jb.Name, StepName: "t", Type: "task", State: "created"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateContainer(ctx, Container{TeamID: f.teamID, BuildID: oneOff.ID, BuildName: oneOff.Name, StepName: "t", Type: "task", State: "created"}); err != nil {
		t.Fatal(err)
	}
	cs, err := d.Containers(ctx, ContainerFilter{TeamID: f.teamID, PipelineName: "p", JobName: "unit", StepName: "t"})
	if err != nil || len(cs) != 1 || cs[0].Handle != c.Handle || cs[0].PipelineName != "p" || cs[0].JobName != "unit" || cs[0].JobID != unit {
		t.Fatalf("containers of p/unit: %+v %v", cs, err)
	}
	if cs, _ := d.Containers(ctx, ContainerFilter{TeamID: f.teamID, PipelineName: "p", JobName: "other"}); len(cs) != 0 {
		t.Fatalf("containers of p/other: %+v", cs)
	}
	// p is no instance: an instance of a p is another pipeline.
	if cs, err := d.Containers(ctx, ContainerFilter{TeamID: f.teamID, PipelineName: "p", JobName: "unit", InstanceVars: map[string]any{"branch": "a"}}); err != nil || len(cs) != 0 {
		t.Fatalf("containers of p/branch:a/unit: %+v %v", cs, err)
	}
	if cs, _ := d.Containers(ctx, ContainerFilter{TeamID: f.teamID, StepName: "t"}); len(cs) != 2 {
		t.Fatalf("containers of step t: %+v", cs)
	}
}
