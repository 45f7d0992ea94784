package db

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/concourse"
)

func testConfig(jobs []string, resources map[string]map[string]any) concourse.Config {
	var cfg concourse.Config
	names := make([]string, 0, len(resources))
	for name := range resources {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		cfg.Resources = append(cfg.Resources, concourse.ResourceConfig{Name: name, Type: "mock", Source: resources[name]})
	}
	for _, j := range jobs {
		cfg.Jobs = append(cfg.Jobs, concourse.JobConfig{Name: j, Plan: []concourse.Step{{Task: "t", File: "x.yml"}}})
	}
	return cfg
}

func jobNames(js []Job) []string {
	var out []string
	for _, j := range js {
		out = append(out, j.Name)
	}
	return out
}

func TestSavePipeline(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	team, err := d.EnsureTeam(ctx, "main", nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig([]string{"b-job", "a-job"}, map[string]map[string]any{
		"repo": {"uri": "one"}, "other": {"x": 1},
	})
	p, created, err := d.SavePipeline(ctx, team.ID, "p", cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !created || !p.Paused || p.ConfigVersion != 1 || p.TeamName != "main" || p.Ordering != 1 || p.Public {
		t.Fatalf("new pipeline %+v created=%v: want paused, version 1, first", p, created)
	}
	var back concourse.Config
	if err := json.Unmarshal(p.Config, &back); err != nil || len(back.Jobs) != 2 {
		t.Fatalf("stored config %s: %v", p.Config, err)
	}
	jobs, err := d.Jobs(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The config's order, not the names'.
	if got := jobNames(jobs); !slices.Equal(got, []string{"b-job", "a-job"}) {
		t.Fatalf("jobs %v", got)
	}
	res, err := d.Resources(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Name != "other" || res[1].Name != "repo" || res[1].Type != "mock" || res[1].PipelineName != "p" {
		t.Fatalf("resources %+v", res)
	}
	repo := res[1]

	// A stale version saves nothing.
	cfg2 := testConfig([]string{"a-job"}, map[string]map[string]any{"repo": {"uri": "two"}, "other": {"x": 1}})
	if _, _, err := d.SavePipeline(ctx, team.ID, "p", cfg2, 0); !errors.Is(err, ErrConfigVersion) {
		t.Fatalf("save from version 0: %v, want ErrConfigVersion", err)
	}
	if _, _, err := d.SavePipeline(ctx, team.ID, "p", cfg2, 2); !errors.Is(err, ErrConfigVersion) {
		t.Fatalf("save from version 2: %v, want ErrConfigVersion", err)
	}
	if jobs, _ := d.Jobs(ctx, p.ID); len(jobs) != 2 {
		t.Fatalf("a refused save changed the jobs: %v", jobNames(jobs))
	}

	// Push other's next check into the future: an unchanged source keeps it.
	if _, err := d.pool.Exec(ctx, "UPDATE resources SET next_check = now() + interval '1 hour'"); err != nil {
		t.Fatal(err)
	}
	p2, created, err := d.SavePipeline(ctx, team.ID, "p", cfg2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if created || p2.ConfigVersion != 2 || p2.ID != p.ID || !p2.LastUpdated.After(p.LastUpdated) {
		t.Fatalf("updated pipeline %+v created=%v", p2, created)
	}
	if jobs, _ := d.Jobs(ctx, p.ID); !slices.Equal(jobNames(jobs), []string{"a-job"}) {
		t.Fatalf("jobs after removing b-job: %v", jobNames(jobs))
	}
	if _, err := d.Job(ctx, p.ID, "b-job"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("removed job: %v, want ErrNotFound", err)
	}
	var active bool
	if err := d.pool.QueryRow(ctx, "SELECT active FROM jobs WHERE name = 'b-job'").Scan(&active); err != nil || active {
		t.Fatalf("removed job's row: active=%v err=%v, want kept inactive", active, err)
	}
	repo2, err := d.Resource(ctx, p.ID, "repo")
	if err != nil {
		t.Fatal(err)
	}
	other, err := d.Resource(ctx, p.ID, "other")
	if err != nil {
		t.Fatal(err)
	}
	if repo2.ID != repo.ID || repo2.ConfigHash == repo.ConfigHash {
		t.Fatalf("repo's new source kept hash %s", repo.ConfigHash)
	}
	if time.Until(repo2.NextCheck) > time.Minute {
		t.Fatalf("repo's new source is not due for a check: next %v", repo2.NextCheck)
	}
	if time.Until(other.NextCheck) < 50*time.Minute || other.ConfigHash != res[0].ConfigHash {
		t.Fatalf("unchanged resource other was reset: %+v", other)
	}

	// old_name renames, keeping the job's id (and so its builds).
	a, _ := d.Job(ctx, p.ID, "a-job")
	cfg3 := cfg2
	cfg3.Jobs = []concourse.JobConfig{{Name: "renamed", OldName: "a-job", Plan: cfg2.Jobs[0].Plan}}
	if _, _, err := d.SavePipeline(ctx, team.ID, "p", cfg3, 2); err != nil {
		t.Fatal(err)
	}
	if r, err := d.Job(ctx, p.ID, "renamed"); err != nil || r.ID != a.ID {
		t.Fatalf("renamed job %+v (%v), want id %d", r, err, a.ID)
	}

	// A second pipeline comes after the first.
	q, created, err := d.SavePipeline(ctx, team.ID, "q", cfg, 0)
	if err != nil || !created || q.Ordering != 2 {
		t.Fatalf("second pipeline %+v created=%v: %v", q, created, err)
	}
}

func TestSavePipelineConcurrentCreateConflicts(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	team, _ := d.EnsureTeam(ctx, "main", nil)
	cfg := testConfig([]string{"j"}, nil)
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			_, _, err := d.SavePipeline(ctx, team.ID, "p", cfg, 0)
			errs <- err
		}()
	}
	var ok int
	for range 8 {
		switch err := <-errs; {
		case err == nil:
			ok++
		case errors.Is(err, ErrConflict), errors.Is(err, ErrConfigVersion):
		default:
			t.Fatalf("concurrent create: %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d saves from version 0 succeeded, want 1", ok)
	}
}

func TestPipelineStateChanges(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	main, _ := d.EnsureTeam(ctx, "main", nil)
	other, _ := d.EnsureTeam(ctx, "other", nil)
	cfg := testConfig([]string{"j"}, map[string]map[string]any{"r": {}})
	var ps []Pipeline
	for _, name := range []string{"a", "b", "c"} {
		p, _, err := d.SavePipeline(ctx, main.ID, name, cfg, 0)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	theirs, _, err := d.SavePipeline(ctx, other.ID, "a", cfg, 0)
	if err != nil {
		t.Fatal(err)
	}

	if err := d.PausePipeline(ctx, ps[0].ID, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := d.UnpausePipeline(ctx, ps[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := d.PausePipeline(ctx, ps[0].ID, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := d.PausePipeline(ctx, ps[0].ID, "bob"); err != nil {
		t.Fatal(err)
	}
	p, _ := d.Pipeline(ctx, main.ID, "a")
	if !p.Paused || p.PausedBy != "alice" || p.PausedAt.IsZero() {
		t.Fatalf("paused twice: %+v, want paused by the first", p)
	}
	if err := d.UnpausePipeline(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	if p, _ = d.Pipeline(ctx, main.ID, "a"); p.Paused || p.PausedBy != "" || !p.PausedAt.IsZero() {
		t.Fatalf("unpaused: %+v", p)
	}
	if err := d.SetPipelinePublic(ctx, ps[1].ID, true); err != nil {
		t.Fatal(err)
	}
	if err := d.UnpausePipeline(ctx, 999999); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unpause a missing pipeline: %v", err)
	}

	// Listing: one's own teams, plus others' public ones.
	names := func(f PipelineFilter) []string {
		t.Helper()
		ps, err := d.Pipelines(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range ps {
			out = append(out, p.TeamName+"/"+p.Name)
		}
		return out
	}
	if got := names(PipelineFilter{TeamIDs: []int{other.ID}, Public: true}); !slices.Equal(got, []string{"main/b", "other/a"}) {
		t.Fatalf("other's view: %v", got)
	}
	if got := names(PipelineFilter{AllTeams: true}); len(got) != 4 {
		t.Fatalf("every pipeline: %v", got)
	}
	if got := names(PipelineFilter{}); len(got) != 0 {
		t.Fatalf("no filter: %v", got)
	}

	// Ordering: the named ones first, the rest after in their order.
	if err := d.OrderPipelines(ctx, main.ID, []string{"c", "a"}); err != nil {
		t.Fatal(err)
	}
	if got := names(PipelineFilter{TeamIDs: []int{main.ID}}); !slices.Equal(got, []string{"main/c", "main/a", "main/b"}) {
		t.Fatalf("ordered: %v", got)
	}
	if err := d.OrderPipelines(ctx, main.ID, []string{"b", "nope"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("order with an unknown name: %v", err)
	}
	if got := names(PipelineFilter{TeamIDs: []int{main.ID}}); !slices.Equal(got, []string{"main/c", "main/a", "main/b"}) {
		t.Fatalf("a refused order changed the order: %v", got)
	}

	// Rename: a taken name is a conflict.
	if err := d.RenamePipeline(ctx, ps[0].ID, "b"); !errors.Is(err, ErrConflict) {
		t.Fatalf("rename onto b: %v, want ErrConflict", err)
	}
	if err := d.RenamePipeline(ctx, ps[0].ID, "z"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pipeline(ctx, main.ID, "z"); err != nil {
		t.Fatal(err)
	}

	// Jobs: pause, and the finished and next builds.
	j, err := d.Job(ctx, theirs.ID, "j")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.PauseJob(ctx, j.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	if j, _ = d.Job(ctx, theirs.ID, "j"); !j.Paused || j.PausedBy != "alice" || j.FinishedBuild != nil || j.NextBuild != nil {
		t.Fatalf("paused job %+v", j)
	}
	if err := d.UnpauseJob(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for i, status := range []concourse.BuildStatus{concourse.StatusSucceeded, concourse.StatusFailed, concourse.StatusStarted, concourse.StatusPending} {
		var id int64
		err := d.pool.QueryRow(ctx, `
			INSERT INTO builds (team_id, name, status, plan, pipeline_id, job_id)
			VALUES ($1, $2, $3, '{}', $4, $5) RETURNING id`, other.ID, string(rune('1'+i)), status, theirs.ID, j.ID).Scan(&id)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	jobs, err := d.Jobs(ctx, theirs.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].Paused || jobs[0].FinishedBuild == nil || jobs[0].NextBuild == nil ||
		jobs[0].FinishedBuild.ID != ids[1] || jobs[0].NextBuild.ID != ids[2] || jobs[0].TeamName != "other" {
		t.Fatalf("jobs %+v, want finished %d and next %d", jobs, ids[1], ids[2])
	}

	// Resource caches go with clear-resource-cache.
	r, err := d.Resource(ctx, theirs.ID, "r")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"k1", "k2"} {
		_, err := d.pool.Exec(ctx, `INSERT INTO resource_caches (key, team_id, resource_id, artifact, digest, version)
			VALUES ($1, $2, $3, 'a', 'sha256:x', '{}')`, key, other.ID, r.ID)
		if err != nil {
			t.Fatal(err)
		}
	}
	if n, err := d.DeleteResourceCaches(ctx, r.ID); err != nil || n != 2 {
		t.Fatalf("delete caches: %d, %v", n, err)
	}
	if n, err := d.DeleteResourceCaches(ctx, r.ID); err != nil || n != 0 {
		t.Fatalf("delete caches again: %d, %v", n, err)
	}

	if running, err := d.PipelineUnfinishedBuilds(ctx, theirs.ID); err != nil || !slices.Equal(running, ids[2:]) {
		t.Fatalf("unfinished builds %v (%v), want %v", running, err, ids[2:])
	}

	// Delete takes everything of the pipeline with it.
	if err := d.DeletePipeline(ctx, theirs.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Build(ctx, ids[0]); !errors.Is(err, ErrNotFound) {
		t.Fatalf("build of a deleted pipeline: %v", err)
	}
	var left int
	if err := d.pool.QueryRow(ctx, "SELECT count(*) FROM resources WHERE pipeline_id = $1", theirs.ID).Scan(&left); err != nil || left != 0 {
		t.Fatalf("resources of a deleted pipeline: %d (%v)", left, err)
	}
	if err := d.DeletePipeline(ctx, theirs.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
}

func TestResourceConfigHash(t *testing.T) {
	hash := func(r concourse.ResourceConfig, types ...concourse.ResourceType) string {
		t.Helper()
		h, err := ResourceConfigHash(r, types)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	var a, b map[string]any
	_ = json.Unmarshal([]byte(`{"uri": "x", "branch": "main", "n": {"z": 1, "a": 2}}`), &a)
	_ = json.Unmarshal([]byte(`{"n": {"a": 2, "z": 1}, "branch": "main", "uri": "x"}`), &b)
	base := hash(concourse.ResourceConfig{Name: "r", Type: "git", Source: a})
	if got := hash(concourse.ResourceConfig{Name: "other", Type: "git", Source: b, CheckEvery: "1s", Icon: "x"}); got != base {
		t.Fatal("key order, name, check_every or icon changed the hash")
	}
	if hash(concourse.ResourceConfig{Type: "hg", Source: a}) == base {
		t.Fatal("the type is not in the hash")
	}
	if hash(concourse.ResourceConfig{Type: "git", Source: map[string]any{"uri": "y"}}) == base {
		t.Fatal("the source is not in the hash")
	}

	typ := concourse.ResourceType{Name: "git", Type: "registry-image", Source: map[string]any{"repository": "my/git"}}
	custom := hash(concourse.ResourceConfig{Type: "git", Source: a}, typ)
	if custom == base {
		t.Fatal("a custom type's config is not in the hash")
	}
	typ.CheckEvery, typ.Tags = "1h", []string{"t"}
	if hash(concourse.ResourceConfig{Type: "git", Source: a}, typ) != custom {
		t.Fatal("the type's check_every or tags changed the hash")
	}
	typ.Source = map[string]any{"repository": "my/git2"}
	if hash(concourse.ResourceConfig{Type: "git", Source: a}, typ) == custom {
		t.Fatal("the type's source is not in the hash")
	}
	// A type over a type: the lower one counts too; a cycle ends.
	lower := concourse.ResourceType{Name: "registry-image", Type: "registry-image", Source: map[string]any{"repository": "base"}}
	h1 := hash(concourse.ResourceConfig{Type: "git", Source: a}, typ, lower)
	lower.Source = map[string]any{"repository": "base2"}
	if hash(concourse.ResourceConfig{Type: "git", Source: a}, typ, lower) == h1 {
		t.Fatal("the type's type's config is not in the hash")
	}
}

// A pipeline set by a build remembers its job and build, starts unpaused,
// and is not overwritten by an older build; a save through the API
// clears the parent.
func TestSavePipelineFromBuild(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	team, err := d.EnsureTeam(ctx, "main", nil)
	if err != nil {
		t.Fatal(err)
	}
	parentPipeline, _, err := d.SavePipeline(ctx, team.ID, "parent", testConfig([]string{"set"}, nil), 0)
	if err != nil {
		t.Fatal(err)
	}
	job, err := d.Job(ctx, parentPipeline.ID, "set")
	if err != nil {
		t.Fatal(err)
	}
	older, err := d.CreateJobBuild(ctx, job.ID, "test", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	newer, err := d.CreateJobBuild(ctx, job.ID, "test", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	child, created, err := d.SavePipelineFromBuild(ctx, team.ID, PipelineRef{Name: "child"}, testConfig([]string{"a"}, nil), 0,
		PipelineParent{JobID: job.ID, BuildID: newer.ID})
	if err != nil {
		t.Fatal(err)
	}
	if !created || child.Paused || child.ParentJobID != job.ID || child.ParentBuildID != newer.ID {
		t.Fatalf("child %+v created=%v: want unpaused, parent job %d build %d", child, created, job.ID, newer.ID)
	}
	_, _, err = d.SavePipelineFromBuild(ctx, team.ID, PipelineRef{Name: "child"}, testConfig([]string{"b"}, nil), child.ConfigVersion,
		PipelineParent{JobID: job.ID, BuildID: older.ID})
	if !errors.Is(err, ErrSetByNewerBuild) {
		t.Fatalf("older build's save: %v, want ErrSetByNewerBuild", err)
	}
	if err := d.SetPipelineParent(ctx, child.ID, PipelineParent{JobID: job.ID, BuildID: newer.ID}); err != nil {
		t.Fatal(err)
	}
	byAPI, _, err := d.SavePipeline(ctx, team.ID, "child", testConfig([]string{"c"}, nil), child.ConfigVersion)
	if err != nil {
		t.Fatal(err)
	}
	if byAPI.ParentJobID != 0 || byAPI.ParentBuildID != 0 {
		t.Errorf("saved through the API: parent job %d build %d, want none", byAPI.ParentJobID, byAPI.ParentBuildID)
	}
}

// Instances of an instanced pipeline share a name and differ by their
// instance vars; they sit together in the team's order, and can be
// ordered among themselves.
func TestPipelineInstances(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	team, err := d.EnsureTeam(ctx, "main", nil)
	if err != nil {
		t.Fatal(err)
	}
	save := func(ref PipelineRef) Pipeline {
		t.Helper()
		p, created, err := d.SavePipelineInstance(ctx, team.ID, ref, testConfig([]string{"j"}, nil), 0)
		if err != nil || !created {
			t.Fatalf("save %s: created %v, %v", ref, created, err)
		}
		return p
	}
	plain := save(PipelineRef{Name: "p"})
	other := save(PipelineRef{Name: "q"})
	main := save(PipelineRef{Name: "p", InstanceVars: map[string]any{"branch": "main"}})
	dev := save(PipelineRef{Name: "p", InstanceVars: map[string]any{"branch": "dev", "n": 1}})
	if main.InstanceVars["branch"] != "main" || plain.InstanceVars != nil || main.Ordering != plain.Ordering {
		t.Fatalf("instance %+v, plain %+v", main, plain)
	}
	got, err := d.PipelineInstance(ctx, team.ID, PipelineRef{Name: "p", InstanceVars: map[string]any{"n": 1, "branch": "dev"}})
	if err != nil || got.ID != dev.ID {
		t.Fatalf("look up dev: %+v, %v", got, err)
	}
	if got, err := d.Pipeline(ctx, team.ID, "p"); err != nil || got.ID != plain.ID {
		t.Fatalf("look up the plain pipeline: %+v, %v", got, err)
	}
	if _, err := d.PipelineInstance(ctx, team.ID, PipelineRef{Name: "p", InstanceVars: map[string]any{"branch": "nope"}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown instance: %v", err)
	}
	order := func() []int64 {
		ps, err := d.Pipelines(ctx, PipelineFilter{TeamIDs: []int{team.ID}})
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, p := range ps {
			ids = append(ids, p.ID)
		}
		return ids
	}
	if got, want := order(), []int64{plain.ID, main.ID, dev.ID, other.ID}; !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
	if err := d.OrderPipelineInstances(ctx, team.ID, "p", []map[string]any{{"branch": "dev", "n": 1}, {}}); err != nil {
		t.Fatal(err)
	}
	if got, want := order(), []int64{dev.ID, plain.ID, main.ID, other.ID}; !slices.Equal(got, want) {
		t.Errorf("order after ordering the instances %v, want %v", got, want)
	}
	if err := d.OrderPipelineInstances(ctx, team.ID, "p", []map[string]any{{"branch": "gone"}}); !errors.Is(err, ErrNotFound) {
		t.Errorf("order an unknown instance: %v", err)
	}
	if _, err := d.LookupPipelineResource(ctx, dev.ID, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("resource of an instance: %v", err)
	}
	if j, err := d.LookupPipelineJob(ctx, dev.ID, "j"); err != nil || j.PipelineID != dev.ID {
		t.Errorf("job of an instance: %+v, %v", j, err)
	}
}

// The dashboard's GET /api/v1/resources reads every visible pipeline's
// resources in one query and their last checks in another.
func TestResourcesOfPipelinesAndBuildsByID(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	team, err := d.EnsureTeam(ctx, "main", nil)
	if err != nil {
		t.Fatal(err)
	}
	p1, _, err := d.SavePipeline(ctx, team.ID, "p1", testConfig(nil, map[string]map[string]any{"b": {}, "a": {}}), 0)
	if err != nil {
		t.Fatal(err)
	}
	p2, _, err := d.SavePipeline(ctx, team.ID, "p2", testConfig(nil, map[string]map[string]any{"z": {}}), 0)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := d.ResourcesOfPipelines(ctx, []int64{p2.ID, p1.ID})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rs {
		got = append(got, r.PipelineName+"/"+r.Name)
	}
	// The pipelines in the order asked, each one's resources in its config's.
	if want := []string{"p2/z", "p1/a", "p1/b"}; !slices.Equal(got, want) {
		t.Fatalf("resources %v, want %v", got, want)
	}
	if rs, err := d.ResourcesOfPipelines(ctx, nil); err != nil || len(rs) != 0 {
		t.Fatalf("resources of no pipeline: %v, %v", rs, err)
	}

	b1, err := d.CreateOneOffBuild(ctx, team.ID, json.RawMessage(`{}`), "admin", "s")
	if err != nil {
		t.Fatal(err)
	}
	b2, err := d.CreateOneOffBuild(ctx, team.ID, json.RawMessage(`{}`), "admin", "s")
	if err != nil {
		t.Fatal(err)
	}
	bs, err := d.BuildsByID(ctx, []int64{b2.ID, b1.ID, b2.ID + 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 2 || bs[b1.ID].Name != b1.Name || bs[b2.ID].TeamName != "main" {
		t.Fatalf("builds %+v, want %d and %d only", bs, b1.ID, b2.ID)
	}
}
