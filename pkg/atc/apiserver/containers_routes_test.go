package apiserver

import (
	"strings"
	"testing"

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
	if len(cs) != 2 || cs[0].ID != "c1" || cs[0].BuildID != 1 || cs[0].StepName != "t" || cs[0].Type != "task" || cs[0].WorkerName != "w1" {
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
