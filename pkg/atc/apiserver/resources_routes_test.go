package apiserver

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
)

// Resources, their versions, checks and pins (resources.go, versions.go).

const rPath = pPath + "/resources/r"

var resourceRoutes = []routeCase{
	{method: "GET", path: "/api/v1/resources", public: true, ok: 200, anonDown: 500},
	{method: "GET", path: pPath + "/resources", role: "viewer", ok: 200, anonDown: 500},
	{method: "GET", path: rPath, role: "viewer", ok: 200, anonDown: 500},
	{method: "DELETE", path: rPath + "/cache", role: "pipeline-operator", ok: 200},
	{method: "GET", path: rPath + "/versions", role: "viewer", ok: 200, anonDown: 500},
	{method: "GET", path: rPath + "/versions/300/input_to", role: "viewer", ok: 200, anonDown: 500},
	{method: "GET", path: rPath + "/versions/300/output_of", role: "viewer", ok: 200, anonDown: 500},
	{method: "POST", path: rPath + "/check", role: "pipeline-operator", ok: 201, body: `{"from":{"v":"1"}}`},
	{method: "PUT", path: rPath + "/versions/300/pin", role: "pipeline-operator", ok: 200},
	{method: "PUT", path: rPath + "/versions/300/enable", role: "pipeline-operator", ok: 200},
	{method: "PUT", path: rPath + "/versions/300/disable", role: "pipeline-operator", ok: 200},
	{method: "PUT", path: rPath + "/unpin", role: "pipeline-operator", ok: 200},
	{method: "PUT", path: rPath + "/pin_comment", role: "pipeline-operator", ok: 200, body: `{"pin_comment":"held"}`},
}

func TestResourceRoutesAccess(t *testing.T)    { checkAccess(t, resourceRoutes) }
func TestResourceRoutesStoreDown(t *testing.T) { checkStoreDown(t, resourceRoutes) }

func TestListAndGetResources(t *testing.T) {
	a := newTestAPI(t)
	viewer := a.roleIn(t, "viewer")
	rs := decode[[]concourse.Resource](t, a.do(t, "GET", pPath+"/resources", viewer, ""), 200)
	if len(rs) != 1 || rs[0].ID != 200 || rs[0].Name != "r" || rs[0].Type != "mock" || rs[0].Build == nil || rs[0].Build.ID != 3 ||
		rs[0].Build.ResourceName != "r" || rs[0].Build.Status != "succeeded" {
		t.Errorf("resources %+v", rs)
	}
	if r := decode[concourse.Resource](t, a.do(t, "GET", rPath, viewer, ""), 200); r.ID != 200 || r.PipelineName != "p" || r.TeamName != "main" {
		t.Errorf("resource %+v", r)
	}
	// A check build that is gone: the resource without one.
	a.store.resources[0].LastCheckBuild = 99
	if r := decode[concourse.Resource](t, a.do(t, "GET", rPath, viewer, ""), 200); r.Build != nil {
		t.Errorf("resource with a missing check build: %+v", r)
	}
	if rs := decode[[]concourse.Resource](t, a.do(t, "GET", "/api/v1/teams/main/pipelines/pub/resources", "", ""), 200); rs == nil || len(rs) != 0 {
		t.Errorf("public resources %#v, want []", rs)
	}
	admin := a.roleIn(t, "admin")
	for _, c := range []struct{ method, sub string }{
		{"GET", ""}, {"DELETE", "/cache"}, {"GET", "/versions"}, {"POST", "/check"}, {"PUT", "/versions/300/pin"},
		{"PUT", "/versions/300/enable"}, {"PUT", "/versions/300/disable"}, {"PUT", "/unpin"}, {"PUT", "/pin_comment"},
		{"GET", "/versions/300/input_to"}, {"GET", "/versions/300/output_of"},
	} {
		want404(t, a.do(t, c.method, pPath+"/resources/ghost"+c.sub, admin, `{}`), "Resource Not Found Error", "Resource with name 'ghost' not found.")
		want404(t, a.do(t, c.method, "/api/v1/teams/main/pipelines/ghost/resources/r"+c.sub, admin, `{}`),
			"Pipeline Not Found Error", "pipeline 'ghost' not found in team 'main'")
	}
	want404(t, a.do(t, "GET", "/api/v1/teams/main/pipelines/pub/resources/ghost", "", ""), "Resource Not Found Error", "Resource with name 'ghost' not found.")
}

func TestClearResourceCache(t *testing.T) {
	a := newTestAPI(t)
	op := a.roleIn(t, "pipeline-operator")
	got := decode[map[string]int64](t, a.do(t, "DELETE", rPath+"/cache", op, ""), 200)
	if got["caches_removed"] != 1 || !a.store.changed("DeleteResourceCaches 200") {
		t.Errorf("cleared %v, changes %v", got, a.store.calls)
	}
	a = newTestAPI(t)
	op = a.roleIn(t, "pipeline-operator")
	wantError(t, a.do(t, "DELETE", rPath+"/cache", op, `{"version":`), 400, "decode the version")
	if len(a.store.calls) != 0 {
		t.Errorf("refused clears changed %v", a.store.calls)
	}
	// -v: that version's caches only.
	got = decode[map[string]int64](t, a.do(t, "DELETE", rPath+"/cache", op, `{"version":{"v":"1"}}`), 200)
	if got["caches_removed"] != 1 || !a.store.changed("DeleteResourceVersionCaches 200 1") || a.store.changed("DeleteResourceCaches 200") {
		t.Errorf("cleared %v, changes %v", got, a.store.calls)
	}
}

func TestVersions(t *testing.T) {
	a := newTestAPI(t)
	viewer := a.roleIn(t, "viewer")
	vs := decode[[]concourse.ResourceVersion](t, a.do(t, "GET", rPath+"/versions?limit=5&filter=v:1", viewer, ""), 200)
	if len(vs) != 1 || vs[0].ID != 300 || vs[0].Version["v"] != "1" || !vs[0].Enabled {
		t.Errorf("versions %+v", vs)
	}
	for _, c := range []struct{ query, says string }{
		{"limit=0", `limit="0": want a positive number`},
		{"from=x", `from="x": want a version id`},
		{"to=-3", `to="-3": want a version id`},
		{"filter=novalue", `filter="novalue": want key:value`},
		{"filter=:v", `filter=":v": want key:value`},
	} {
		wantError(t, a.do(t, "GET", rPath+"/versions?"+c.query, viewer, ""), 400, c.says)
	}
}

func TestCheckResource(t *testing.T) {
	a := newTestAPI(t)
	op := a.roleIn(t, "pipeline-operator")
	for _, body := range []string{"", `{"from":{"v":"1"},"shallow":true}`} {
		b := decode[concourse.Build](t, a.do(t, "POST", rPath+"/check", op, body), 201)
		if b.ID != 8 || b.ResourceName != "r" || b.Status != "started" || !a.store.changed("StartCheck 200") {
			t.Errorf("check (%q): %+v, changes %v", body, b, a.store.calls)
		}
	}
	wantError(t, a.do(t, "POST", rPath+"/check", op, `{"from":`), 400, "decode the check request")
	wantError(t, a.do(t, "POST", rPath+"/check", op, `{"from":"v1"}`), 400, "decode the check request")
	a.engine.fail = leakyDown
	ans := a.do(t, "POST", rPath+"/check", op, "")
	checkNoLeak(t, ans)
	if ans.code != 500 {
		t.Errorf("engine failing: %d %s, want 500", ans.code, ans)
	}
}

func TestPinsAndVersionSwitches(t *testing.T) {
	for _, c := range []struct {
		sub, body, change string
	}{
		{"/versions/300/pin", "", "PinVersion 300"},
		{"/versions/300/enable", "", "EnableVersion 300"},
		{"/versions/300/disable", "", "DisableVersion 300"},
		{"/unpin", "", "UnpinResource 200"},
		{"/pin_comment", `{"pin_comment":"held"}`, "SetPinComment 200"},
	} {
		t.Run(c.sub, func(t *testing.T) {
			a := newTestAPI(t)
			if ans := a.do(t, "PUT", rPath+c.sub, a.roleIn(t, "pipeline-operator"), c.body); ans.code != 200 || !a.store.changed(c.change) {
				t.Errorf("%d %s, changes %v, want %q", ans.code, ans, a.store.calls, c.change)
			}
		})
	}
	a := newTestAPI(t)
	op := a.roleIn(t, "pipeline-operator")
	for _, sub := range []string{"pin", "enable", "disable"} {
		for _, bad := range []string{"abc", "0", "-2", "3.0"} {
			wantError(t, a.do(t, "PUT", rPath+"/versions/"+bad+"/"+sub, op, ""), 400, "version id must be a positive number")
		}
		want404(t, a.do(t, "PUT", rPath+"/versions/999/"+sub, op, ""), "Not Found", "version 999 of resource p/r: not found")
	}
	wantError(t, a.do(t, "PUT", rPath+"/pin_comment", op, `"held"`), 400, "decode the pin comment")
	if len(a.store.calls) != 0 {
		t.Errorf("refused changes changed %v", a.store.calls)
	}
}

// TestVersionInputToOutputOf: Concourse's input_to and output_of list a
// version's builds with their job and pipeline; an exposed pipeline's to
// anyone; a version the resource does not have is a 404.
func TestVersionInputToOutputOf(t *testing.T) {
	a := newTestAPI(t)
	viewer := a.roleIn(t, "viewer")
	in := decode[[]concourse.Build](t, a.do(t, "GET", rPath+"/versions/300/input_to", viewer, ""), 200)
	if len(in) != 1 || in[0].ID != 2 || in[0].JobName != "j" || in[0].PipelineName != "p" || in[0].TeamName != "main" {
		t.Errorf("input_to = %+v, want build 2 of p/j", in)
	}
	out := decode[[]concourse.Build](t, a.do(t, "GET", rPath+"/versions/300/output_of", viewer, ""), 200)
	if len(out) != 1 || out[0].ID != 2 {
		t.Errorf("output_of = %+v, want build 2", out)
	}
	ans := a.do(t, "GET", rPath+"/versions/999/input_to", viewer, "")
	if ans.code != 404 || !strings.Contains(ans.body, "version 999 of resource p/r") {
		t.Errorf("unknown version: %d %s, want 404 naming it", ans.code, ans)
	}
	wantError(t, a.do(t, "GET", rPath+"/versions/x/output_of", viewer, ""), 400, "version id must be a positive number")

	// The exposed pipeline "pub": anyone may read it.
	a.store.mu.Lock()
	a.store.resources = append(a.store.resources, db.Resource{ID: 201, PipelineID: 11, PipelineName: "pub", TeamID: 1, TeamName: "main",
		Name: "r", Type: "mock", Active: true, Config: json.RawMessage(`{"name":"r","type":"mock"}`)})
	a.store.versions = append(a.store.versions, db.Version{ID: 301, ResourceID: 201, Version: map[string]string{"v": "1"}, Enabled: true,
		Metadata: []concourse.MetadataField{{Name: "commit", Value: "private"}}})
	a.store.builds = append(a.store.builds, db.JobBuild{Build: db.Build{ID: 30, TeamID: 1, TeamName: "main", Name: "1", Status: "succeeded"},
		PipelineID: 11, PipelineName: "pub", JobID: 101, JobName: "j"})
	a.store.mu.Unlock()
	pub := decode[[]concourse.Build](t, a.do(t, "GET", "/api/v1/teams/main/pipelines/pub/resources/r/versions/301/input_to", "", ""), 200)
	if len(pub) != 1 || pub[0].ID != 30 {
		t.Errorf("anonymous input_to of pub = %+v, want build 30", pub)
	}
	// Its versions too, as in Concourse, but their metadata only to the
	// team, or to anyone for a public resource.
	const pubVersions = "/api/v1/teams/main/pipelines/pub/resources/r/versions"
	if vs := decode[[]concourse.ResourceVersion](t, a.do(t, "GET", pubVersions, "", ""), 200); len(vs) != 1 || vs[0].ID != 301 || len(vs[0].Metadata) != 0 {
		t.Errorf("anonymous versions of pub/r = %+v, want 301 without metadata", vs)
	}
	if vs := decode[[]concourse.ResourceVersion](t, a.do(t, "GET", pubVersions, viewer, ""), 200); len(vs) != 1 || len(vs[0].Metadata) != 1 {
		t.Errorf("viewer's versions of pub/r = %+v, want its metadata", vs)
	}
	a.store.mu.Lock()
	a.store.resources[len(a.store.resources)-1].Config = json.RawMessage(`{"name":"r","type":"mock","public":true}`)
	a.store.mu.Unlock()
	if vs := decode[[]concourse.ResourceVersion](t, a.do(t, "GET", pubVersions, "", ""), 200); len(vs) != 1 || len(vs[0].Metadata) != 1 {
		t.Errorf("anonymous versions of public pub/r = %+v, want its metadata", vs)
	}
	// A hidden pipeline's are not.
	wantText(t, a.do(t, "GET", rPath+"/versions", "", ""), 401, "not authorized")
}

// GET /api/v1/resources: the resources of the pipelines the caller may
// see, as GET /api/v1/pipelines lists them, each with its last check.
func TestListAllResources(t *testing.T) {
	a := newTestAPI(t)
	for _, c := range []struct {
		token string
		want  []int64
	}{
		{"", nil},
		{a.roleIn(t, "viewer"), []int64{200}},
		{a.token(t, "o", map[string]string{"other": "owner"}), nil},
		{a.roleIn(t, "admin"), []int64{200}},
	} {
		var got []int64
		for _, r := range decode[[]concourse.Resource](t, a.do(t, "GET", "/api/v1/resources", c.token, ""), 200) {
			got = append(got, r.ID)
			if r.ID == 200 && (r.Build == nil || r.Build.Status != "succeeded" || r.PipelineName != "p") {
				t.Errorf("GET /api/v1/resources as %q: resource %+v, want its last check and pipeline", c.token, r)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("GET /api/v1/resources as %q: resource ids %v, want %v", c.token, got, c.want)
		}
	}
}
