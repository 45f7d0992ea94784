package apiserver

import (
	"slices"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/concourse"
)

// Jobs, their builds, and what fly execute --inputs-from asks (jobs.go,
// jobbuilds.go, jobinputs.go).

const jPath = pPath + "/jobs/j"

var jobRoutes = []routeCase{
	{method: "GET", path: "/api/v1/jobs", public: true, ok: 200, anonDown: 500},
	{method: "GET", path: pPath + "/jobs", role: "viewer", ok: 200, anonDown: 500},
	{method: "GET", path: jPath, role: "viewer", ok: 200, anonDown: 500},
	{method: "PUT", path: jPath + "/pause", role: "pipeline-operator", ok: 200},
	{method: "PUT", path: jPath + "/unpause", role: "pipeline-operator", ok: 200},
	{method: "DELETE", path: jPath + "/tasks/t/cache", role: "pipeline-operator", ok: 200},
	{method: "GET", path: jPath + "/inputs", role: "viewer", ok: 200},
	{method: "GET", path: jPath + "/builds", role: "viewer", ok: 200, anonDown: 500},
	{method: "POST", path: jPath + "/builds", role: "pipeline-operator", ok: 200},
	{method: "GET", path: jPath + "/builds/1", role: "viewer", ok: 200, anonDown: 500},
	{method: "POST", path: jPath + "/builds/1", role: "pipeline-operator", ok: 200},
	{method: "GET", path: pPath + "/resource-types", role: "viewer", ok: 200},
	{method: "POST", path: pPath + "/builds", role: "member", ok: 201, body: onePlan},
}

func TestJobRoutesAccess(t *testing.T)    { checkAccess(t, jobRoutes) }
func TestJobRoutesStoreDown(t *testing.T) { checkStoreDown(t, jobRoutes) }

func TestListAndGetJobs(t *testing.T) {
	a := newTestAPI(t)
	viewer := a.roleIn(t, "viewer")
	jobs := decode[[]concourse.Job](t, a.do(t, "GET", pPath+"/jobs", viewer, ""), 200)
	if len(jobs) != 1 || jobs[0].ID != 100 || jobs[0].Name != "j" || jobs[0].PipelineName != "p" || len(jobs[0].Inputs) != 1 ||
		jobs[0].Inputs[0].Resource != "r" || !jobs[0].Inputs[0].Trigger {
		t.Errorf("jobs %+v", jobs)
	}
	j := decode[concourse.Job](t, a.do(t, "GET", jPath, viewer, ""), 200)
	if j.ID != 100 || j.TeamName != "main" || j.PipelineID != 10 {
		t.Errorf("job %+v", j)
	}
	// An exposed pipeline's jobs are anyone's to read.
	if jobs := decode[[]concourse.Job](t, a.do(t, "GET", "/api/v1/teams/main/pipelines/pub/jobs", "", ""), 200); len(jobs) != 1 || jobs[0].ID != 101 {
		t.Errorf("public jobs %+v", jobs)
	}
	if j := decode[concourse.Job](t, a.do(t, "GET", "/api/v1/teams/main/pipelines/pub/jobs/j", "", ""), 200); j.ID != 101 {
		t.Errorf("public job %+v", j)
	}
	admin := a.roleIn(t, "admin")
	for _, c := range []struct{ method, sub string }{
		{"GET", ""}, {"PUT", "/pause"}, {"PUT", "/unpause"}, {"DELETE", "/tasks/t/cache"}, {"GET", "/inputs"},
		{"GET", "/builds"}, {"POST", "/builds"}, {"GET", "/builds/1"}, {"POST", "/builds/1"},
	} {
		want404(t, a.do(t, c.method, pPath+"/jobs/ghost"+c.sub, admin, ""), "Job Not Found Error", "Job with name 'ghost' not found.")
		want404(t, a.do(t, c.method, "/api/v1/teams/main/pipelines/ghost/jobs/j"+c.sub, admin, ""),
			"Pipeline Not Found Error", "pipeline 'ghost' not found in team 'main'")
	}
	want404(t, a.do(t, "GET", "/api/v1/teams/main/pipelines/pub/jobs/ghost", "", ""), "Job Not Found Error", "Job with name 'ghost' not found.")
}

// GET /api/v1/jobs: the jobs of the pipelines the caller may see, as
// GET /api/v1/pipelines lists them.
func TestListAllJobs(t *testing.T) {
	a := newTestAPI(t)
	for _, c := range []struct {
		token string
		want  []int64
	}{
		{"", []int64{101}},
		{a.roleIn(t, "viewer"), []int64{100, 101}},
		{a.token(t, "o", map[string]string{"other": "owner"}), []int64{101}},
		{a.roleIn(t, "admin"), []int64{100, 101}},
	} {
		var got []int64
		for _, j := range decode[[]concourse.Job](t, a.do(t, "GET", "/api/v1/jobs", c.token, ""), 200) {
			got = append(got, j.ID)
		}
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Errorf("GET /api/v1/jobs as %q: job ids %v, want %v", c.token, got, c.want)
		}
	}
}

func TestPauseJob(t *testing.T) {
	for _, c := range []struct{ sub, change string }{{"/pause", "PauseJob 100"}, {"/unpause", "UnpauseJob 100"}} {
		a := newTestAPI(t)
		if ans := a.do(t, "PUT", jPath+c.sub, a.roleIn(t, "pipeline-operator"), ""); ans.code != 200 || !a.store.changed(c.change) {
			t.Errorf("PUT %s: %d %s, changes %v", c.sub, ans.code, ans, a.store.calls)
		}
		wantText(t, a.do(t, "PUT", "/api/v1/teams/main/pipelines/pub/jobs/j"+c.sub, a.roleIn(t, "viewer"), ""), 403, "not allowed to")
	}
}

func TestClearTaskCache(t *testing.T) {
	a := newTestAPI(t)
	op := a.roleIn(t, "pipeline-operator")
	prefix := taskCachePrefix(t, "main", "p", "j", "t")
	a.blobs.put(prefix+"a", []byte("a"))
	a.blobs.put(prefix+"b", []byte("b"))
	other := taskCachePrefix(t, "main", "p", "j", "u") + "a"
	a.blobs.put(other, []byte("a"))
	got := decode[map[string]int64](t, a.do(t, "DELETE", jPath+"/tasks/t/cache", op, ""), 200)
	if got["caches_removed"] != 2 || a.blobs.has(prefix+"a") || !a.blobs.has(other) {
		t.Errorf("cleared %v; the other step's cache kept: %v", got, a.blobs.has(other))
	}
	if got := decode[map[string]int64](t, a.do(t, "DELETE", jPath+"/tasks/t/cache", op, ""), 200); got["caches_removed"] != 0 {
		t.Errorf("cleared again: %v", got)
	}
	wantError(t, a.do(t, "DELETE", jPath+"/tasks/t/cache?cache_path=../../x", op, ""), 400, "")
	wantError(t, a.do(t, "DELETE", jPath+"/tasks/..%2F..%2Fx/cache", op, ""), 400, "task cache")
	a.blobs.fail = leakyDown
	ans := a.do(t, "DELETE", jPath+"/tasks/t/cache", op, "")
	checkNoLeak(t, ans)
	if ans.code < 500 {
		t.Errorf("bucket down: %d %s, want a 5xx", ans.code, ans)
	}
}

func TestJobInputs(t *testing.T) {
	a := newTestAPI(t)
	viewer := a.roleIn(t, "viewer")
	if in := decode[[]buildInput](t, a.do(t, "GET", jPath+"/inputs", viewer, ""), 200); in == nil || len(in) != 0 {
		t.Errorf("inputs %#v, want []", in)
	}
	a.engine.waiting = "no version of r yet"
	want404(t, a.do(t, "GET", jPath+"/inputs", viewer, ""), "Inputs Not Found Error", "job p/j has no inputs to run with: no version of r yet")
}

func TestResourceTypesAndPipelineBuild(t *testing.T) {
	a := newTestAPI(t)
	if types := decode[[]concourse.ResourceType](t, a.do(t, "GET", pPath+"/resource-types", a.roleIn(t, "viewer"), ""), 200); len(types) != 1 || types[0].Name != "rt" {
		t.Errorf("resource types %#v, want rt", types)
	}
	member := a.roleIn(t, "member")
	if b := decode[concourse.Build](t, a.do(t, "POST", pPath+"/builds", member, onePlan), 201); b.ID != 7 || !a.store.changed("CreateBuild main") {
		t.Errorf("pipeline build %+v, changes %v", b, a.store.calls)
	}
	wantError(t, a.do(t, "POST", pPath+"/builds", member, "plan"), 400, "decode the plan")
	a.engine.fail = leakyDown
	ans := a.do(t, "POST", pPath+"/builds", member, onePlan)
	checkNoLeak(t, ans)
	if ans.code != 500 {
		t.Errorf("engine failing: %d %s", ans.code, ans)
	}
}

func TestJobBuilds(t *testing.T) {
	a := newTestAPI(t)
	viewer, op := a.roleIn(t, "viewer"), a.roleIn(t, "pipeline-operator")
	bs := decode[[]concourse.Build](t, a.do(t, "GET", jPath+"/builds", viewer, ""), 200)
	if len(bs) != 1 || bs[0].ID != 2 || bs[0].JobName != "j" || bs[0].PipelineName != "p" {
		t.Errorf("job builds %+v", bs)
	}
	for _, c := range []struct{ query, says string }{
		{"limit=0", `limit="0": want a positive number`},
		{"limit=a", `limit="a": want a positive number`},
		{"to=x", `to="x": want a build id`},
		{"from=0", `from="0": want a build id`},
	} {
		wantError(t, a.do(t, "GET", jPath+"/builds?"+c.query, viewer, ""), 400, c.says)
	}
	b := decode[concourse.Build](t, a.do(t, "GET", jPath+"/builds/1", viewer, ""), 200)
	if b.ID != 2 || b.Name != "1" || b.JobName != "j" {
		t.Errorf("job build %+v", b)
	}
	want404(t, a.do(t, "GET", jPath+"/builds/9", viewer, ""), "Not Found", "build 9 of job p/j: not found")
	want404(t, a.do(t, "POST", jPath+"/builds/9", op, ""), "Not Found", "build 9 of job p/j: not found")

	b = decode[concourse.Build](t, a.do(t, "POST", jPath+"/builds", op, ""), 200)
	if b.ID != 5 || b.Status != "pending" || b.JobName != "j" || !a.store.changed("CreateJobBuild 100") {
		t.Errorf("triggered %+v, changes %v", b, a.store.calls)
	}
	b = decode[concourse.Build](t, a.do(t, "POST", jPath+"/builds/1", op, ""), 200)
	if b.ID != 6 || b.Name != "1.1" || !a.store.changed("RerunJobBuild 2") {
		t.Errorf("rerun %+v, changes %v", b, a.store.calls)
	}
}

func TestTriggerDisabledJob(t *testing.T) {
	a := newTestAPI(t)
	a.store.jobs[0].Config = []byte(`{"name":"j","disable_manual_trigger":true,"plan":[]}`)
	wantError(t, a.do(t, "POST", jPath+"/builds", a.roleIn(t, "pipeline-operator"), ""), 409, "job p/j has manual triggering disabled")
	if strings.Join(a.store.calls, ",") != "" {
		t.Errorf("changes %v", a.store.calls)
	}
}
