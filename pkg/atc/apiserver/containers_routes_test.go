package apiserver

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
)

// Containers, volumes and intercept (containers.go). Containers c1 and c2
// are team main's, c4 team other's.

var containerRoutes = []routeCase{
	{method: "GET", path: "/api/v1/teams/main/containers", role: "viewer", ok: 200},
	{method: "GET", path: "/api/v1/teams/main/containers/c1", role: "viewer", ok: 200},
	// Not connected here: the intercept is refused after the role check.
	{method: "GET", path: "/api/v1/teams/main/containers/c1/hijack", role: "member", ok: 404},
	{method: "GET", path: "/api/v1/teams/main/volumes", role: "viewer", ok: 200},
}

func TestContainerRoutesAccess(t *testing.T)    { checkAccess(t, containerRoutes) }
func TestContainerRoutesStoreDown(t *testing.T) { checkStoreDown(t, containerRoutes) }

func TestContainers(t *testing.T) {
	a := newTestAPI(t)
	viewer := a.roleIn(t, "viewer")
	cs := decode[[]concourse.Container](t, a.do(t, "GET", "/api/v1/teams/main/containers?build_id=1&type=task", viewer, ""), 200)
	if len(cs) != 2 || cs[0].ID != "c1" || cs[0].BuildID != 1 || cs[0].StepName != "t" || cs[0].Type != "task" || cs[0].WorkerName != "w1" || cs[0].PlanID != "p1" || cs[0].State != concourse.ContainerWaiting {
		t.Errorf("containers %+v", cs)
	}
	wantError(t, a.do(t, "GET", "/api/v1/teams/main/containers?build_id=one", viewer, ""), 400, `build_id="one": want a number`)
	// fly intercept -j P/I/J sends the instance's vars as vars=<JSON>.
	wantError(t, a.do(t, "GET", "/api/v1/teams/main/containers?pipeline_name=p&job_name=j&vars=nope", viewer, ""), 400, `instance vars: vars="nope" is not JSON`)
	if c := decode[concourse.Container](t, a.do(t, "GET", "/api/v1/teams/main/containers/c2", viewer, ""), 200); c.ID != "c2" || c.BuildID != 2 {
		t.Errorf("container %+v", c)
	}
	want404(t, a.do(t, "GET", "/api/v1/teams/main/containers/c9", viewer, ""), "Not Found", "container c9: not found")
	// Another team's container is not there for this team, even for an admin.
	want404(t, a.do(t, "GET", "/api/v1/teams/main/containers/c4", a.roleIn(t, "admin"), ""), "Not Found", "container c4: not found")
	want404(t, a.do(t, "GET", "/api/v1/teams/nope/containers", a.roleIn(t, "admin"), ""), "Not Found", `team "nope": not found`)
}

// A check's container names its resource once, as step_name: fly prints
// step_name+resource_name as the name, and Concourse sends no
// resource_name (a check's name once showed twice, "rr").
func TestCheckContainerNamesItsResourceOnce(t *testing.T) {
	a := newTestAPI(t)
	a.store.conts = append(a.store.conts, db.Container{Handle: "c3", TeamID: 1, BuildID: 3, BuildName: "check", StepName: "r", Type: "check",
		StepID: "s3", WorkerName: "w1", PipelineID: 10, PipelineName: "p", Resource: "r"})
	ans := a.do(t, "GET", "/api/v1/teams/main/containers/c3", a.roleIn(t, "viewer"), "")
	c := decode[concourse.Container](t, ans, 200)
	if c.StepName != "r" || c.ResourceName != "" || c.Type != "check" || c.PipelineName != "p" || c.BuildName != "check" || c.JobName != "" {
		t.Errorf("check container %+v", c)
	}
	if strings.Contains(ans.body, "resource_name") {
		t.Errorf("check container %s: has a resource_name, which fly would print after its step name", ans.body)
	}
}

func TestHijackNotConnected(t *testing.T) {
	a := newTestAPI(t)
	member := a.roleIn(t, "member")
	want404(t, a.do(t, "GET", "/api/v1/teams/main/containers/c1/hijack", member, ""), "Container Not Interceptible",
		`step "t" of build 1 is no longer interceptible: its pod is not running or not connected (a finished step stays interceptible only for the server's --keep-alive)`)
	want404(t, a.do(t, "GET", "/api/v1/teams/main/containers/c2/hijack", member, ""), "Container Not Interceptible",
		`step "t" of build 1 runs through server "atc-1", which its sidecar is connected to: intercept it through that server`)
	want404(t, a.do(t, "GET", "/api/v1/teams/main/containers/c4/hijack", a.roleIn(t, "admin"), ""), "Not Found", "container c4: not found")
}

func TestVolumes(t *testing.T) {
	a := newTestAPI(t)
	vs := decode[[]concourse.Volume](t, a.do(t, "GET", "/api/v1/teams/main/volumes", a.roleIn(t, "viewer"), ""), 200)
	if len(vs) != 1 || vs[0].ID != "1" || vs[0].Type != "artifact" || vs[0].Path != "artifacts/main/x.tar.zst" || vs[0].WorkerName != "w1" || vs[0].StepName != "out" {
		t.Errorf("volumes %+v", vs)
	}
	if vs := decode[[]concourse.Volume](t, a.do(t, "GET", "/api/v1/teams/other/volumes", a.roleIn(t, "admin"), ""), 200); len(vs) != 1 || vs[0].ID != "3" {
		t.Errorf("volumes of other %+v", vs)
	}
}

// Task caches and resource caches are volumes too, with Concourse's types
// and what fly shows of them; each team sees its own.
func TestVolumesOfCaches(t *testing.T) {
	a := newTestAPI(t)
	a.store.caches = []db.TeamResourceCache{
		{ResourceCache: db.ResourceCache{Key: "k1", TeamID: 1, ResourceID: 200, Artifact: "artifacts/main/r.json", Version: map[string]string{"v": "1"}},
			ResourceName: "r", ResourceType: "mock", PipelineID: 10, PipelineName: "p"},
		// A one-off build's get: no resource, no type.
		{ResourceCache: db.ResourceCache{Key: "k2", TeamID: 1, Artifact: "artifacts/main/s.json", Version: map[string]string{"digest": "sha256:aa"}}},
		{ResourceCache: db.ResourceCache{Key: "k3", TeamID: 2, Artifact: "artifacts/other/t.json", Version: map[string]string{"v": "2"}}},
	}
	keys := []string{
		blobstore.TaskCacheKey("main", "p", "j", "t", "cache/go"),
		blobstore.TaskCacheKey("main", blobstore.TaskCachePipeline("p", map[string]any{"branch": "x"}), "j", "t", "c"),
		blobstore.TaskCacheKey("main", "", "", "one-off", "c"),
		blobstore.TaskCacheKey("other", "q", "j", "t", "c"),
		"task-caches/main/stray.txt",
	}
	for _, k := range keys {
		a.blobs.put(k, []byte("x"))
	}
	vs := decode[[]concourse.Volume](t, a.do(t, "GET", "/api/v1/teams/main/volumes", a.roleIn(t, "viewer"), ""), 200)
	byPath := map[string]concourse.Volume{}
	for _, v := range vs {
		byPath[v.Path] = v
	}
	if len(vs) != 6 || len(byPath) != 6 {
		t.Fatalf("volumes of main %+v, want an artifact, 2 resource caches and 3 task caches", vs)
	}
	r := byPath["artifacts/main/r.json"]
	if r.ID != "k1" || r.Type != "resource" || r.WorkerName != "w1" || r.StepName != "r" || r.PipelineName != "p" || r.PipelineID != 10 ||
		r.ResourceType == nil || r.ResourceType.Version["v"] != "1" || r.ResourceType.BaseResourceType == nil || r.ResourceType.BaseResourceType.Name != "mock" {
		t.Errorf("resource cache %+v", r)
	}
	// fly reads resource_type.version of every resource volume.
	if r := byPath["artifacts/main/s.json"]; r.Type != "resource" || r.ResourceType == nil || r.ResourceType.Version["digest"] != "sha256:aa" || r.ResourceType.BaseResourceType != nil {
		t.Errorf("a one-off get's resource cache %+v", r)
	}
	tc := byPath[keys[0]]
	if tc.Type != "task-cache" || tc.WorkerName != "w1" || tc.PipelineName != "p" || tc.PipelineID != 10 || tc.JobName != "j" || tc.StepName != "t" || len(tc.ID) != 64 {
		t.Errorf("task cache %+v", tc)
	}
	if tc := byPath[keys[1]]; tc.PipelineName != "p" || tc.PipelineID != 13 || tc.PipelineInstanceVars["branch"] != "x" || tc.JobName != "j" {
		t.Errorf("an instance's task cache %+v", tc)
	}
	if tc := byPath[keys[2]]; tc.PipelineName != "" || tc.JobName != "" || tc.StepName != "one-off" {
		t.Errorf("a one-off build's task cache %+v", tc)
	}

	vs = decode[[]concourse.Volume](t, a.do(t, "GET", "/api/v1/teams/other/volumes", a.roleIn(t, "admin"), ""), 200)
	var ids []string
	for _, v := range vs {
		ids = append(ids, v.Type+":"+v.PipelineName)
	}
	if len(vs) != 3 || !slices.Equal(ids, []string{"artifact:", "resource:", "task-cache:q"}) {
		t.Errorf("volumes of other %+v", vs)
	}

	// The blobstore down: the caches cannot be listed.
	a.blobs.fail = errors.New("bucket down")
	wantError(t, a.do(t, "GET", "/api/v1/teams/main/volumes", a.roleIn(t, "viewer"), ""), 500, "")
}
