package apiserver

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
)

// Builds, their plans, events, artifacts and audit trails, abort, and
// fly execute's uploads (routes.go, events.go, audit.go, artifacts.go).

const onePlan = `{"id":"1","task":{"name":"t","config":{"platform":"linux","run":{"path":"true"}}}}`

func buildRoutes(t testing.TB) []routeCase {
	return []routeCase{
		{method: "GET", path: "/api/v1/builds", public: true, ok: 200},
		{method: "GET", path: "/api/v1/teams/main/builds", role: "viewer", ok: 200},
		{method: "POST", path: "/api/v1/teams/main/builds", role: "member", ok: 201, body: onePlan},
		{method: "GET", path: "/api/v1/builds/1", role: "viewer", ok: 200, anonDown: 500},
		{method: "GET", path: "/api/v1/builds/1/plan", role: "viewer", ok: 200, anonDown: 500},
		{method: "GET", path: "/api/v1/builds/1/events", role: "viewer", ok: 200, anonDown: 500},
		{method: "GET", path: "/api/v1/builds/1/artifacts", role: "viewer", ok: 200, anonDown: 500},
		{method: "GET", path: "/api/v1/builds/1/log?step=1", role: "viewer", ok: 200, anonDown: 500},
		{method: "GET", path: "/api/v1/builds/1/log/outline", role: "viewer", ok: 200, anonDown: 500},
		{method: "GET", path: "/api/v1/builds/1/log/search?q=x", role: "viewer", ok: 200, anonDown: 500},
		{method: "GET", path: "/api/v1/builds/1/audit", role: "viewer", ok: 200},
		{method: "GET", path: "/api/v1/builds/1/audit/steps/s1/pod.yaml", role: "viewer", ok: 200},
		{method: "GET", path: "/api/v1/builds/1/outputs/s2/out", role: "viewer", ok: 200, anonDown: 500},
		{method: "PUT", path: "/api/v1/builds/2/abort", role: "pipeline-operator", ok: 204},
		{method: "PUT", path: "/api/v1/builds/2/comment", role: "pipeline-operator", ok: 200, body: `{"comment":"flaky"}`},
		{method: "POST", path: "/api/v1/builds/2/resume", role: "pipeline-operator", ok: 200},
		{method: "POST", path: "/api/v1/teams/main/artifacts", role: "member", ok: 201, body: tgz(t, "a.txt", "a")},
		{method: "GET", path: "/api/v1/teams/main/artifacts/1", role: "member", ok: 200},
	}
}

func TestBuildRoutesAccess(t *testing.T)    { checkAccess(t, buildRoutes(t)) }
func TestBuildRoutesStoreDown(t *testing.T) { checkStoreDown(t, buildRoutes(t)) }

func buildIDs(bs []concourse.Build) []int64 {
	var ids []int64
	for _, b := range bs {
		ids = append(ids, b.ID)
	}
	return ids
}

func TestListBuilds(t *testing.T) {
	a := newTestAPI(t)
	viewer := a.roleIn(t, "viewer")
	for _, c := range []struct {
		path, token string
		want        []int64
	}{
		{"/api/v1/builds", "", nil},
		{"/api/v1/builds", viewer, []int64{1, 2, 3}},
		{"/api/v1/builds", a.token(t, "o", map[string]string{"other": "viewer"}), []int64{4}},
		{"/api/v1/builds", a.token(t, "n", map[string]string{"blue": "owner"}), nil},
		{"/api/v1/builds?limit=2&since=9", a.roleIn(t, "admin"), []int64{1, 2, 3, 4}},
		{"/api/v1/teams/main/builds?limit=1&until=1", viewer, []int64{1, 2, 3}},
		// The largest id is every build, not an overflow (it answered 500).
		{"/api/v1/builds?to=9223372036854775807", viewer, []int64{1, 2, 3}},
		{"/api/v1/teams/main/builds?to=9223372036854775807&limit=5", viewer, []int64{1, 2, 3}},
	} {
		bs := decode[[]concourse.Build](t, a.do(t, "GET", c.path, c.token, ""), 200)
		if got := buildIDs(bs); !slices.Equal(got, c.want) {
			t.Errorf("GET %s: builds %v, want %v", c.path, got, c.want)
		}
	}
	bs := decode[[]concourse.Build](t, a.do(t, "GET", "/api/v1/teams/main/builds", viewer, ""), 200)
	if b := bs[1]; b.JobName != "j" || b.PipelineName != "p" || b.PipelineID != 10 || b.Status != "started" || b.APIURL != "/api/v1/builds/2" {
		t.Errorf("job build %+v", b)
	}
	for _, c := range []struct{ query, says string }{
		{"limit=0", `limit="0": want a positive number`},
		{"limit=x", `limit="x": want a positive number`},
		{"since=-1", `since="-1": want a build id`},
		{"to=abc", `to="abc": want a build id`},
	} {
		wantError(t, a.do(t, "GET", "/api/v1/builds?"+c.query, viewer, ""), 400, c.says)
		wantError(t, a.do(t, "GET", "/api/v1/teams/main/builds?"+c.query, viewer, ""), 400, c.says)
	}
	want404(t, a.do(t, "GET", "/api/v1/teams/nope/builds", a.roleIn(t, "admin"), ""), "Not Found", `team "nope": not found`)
}

// Every paged list takes the largest numbers a client can send without
// overflowing into a wrong page or a 500 (limit+1 wrapped negative: a
// resource's versions answered 500, a job's builds their default 50; a
// start time past year 9999 wrapped to 1969: no builds), and refuses a
// number it cannot parse with 400 naming the parameter.
func TestPagingBounds(t *testing.T) {
	a := newTestAPI(t)
	viewer := a.roleIn(t, "viewer")
	const maxInt64 = "9223372036854775807"
	lists := []string{"/api/v1/builds", "/api/v1/teams/main/builds", pPath + "/builds", jPath + "/builds", rPath + "/versions"}
	for _, list := range lists {
		for _, q := range []string{"limit", "to", "from", "since", "until"} {
			if strings.HasSuffix(list, "/versions") && (q == "since" || q == "until") {
				continue // versions page by from and to only
			}
			a.store.lastFilter, a.store.lastPage = db.BuildFilter{}, db.VersionPage{}
			path := list + "?" + q + "=" + maxInt64
			if ans := a.do(t, "GET", path, viewer, ""); ans.code != 200 {
				t.Errorf("GET %s: %s, want 200", path, ans)
				continue
			}
			f, p := a.store.lastFilter, a.store.lastPage
			if f.Limit < 0 || f.Limit > maxPageLimit+1 || p.Limit < 0 || p.Limit > maxPageLimit {
				t.Errorf("GET %s: the store was asked for limit %d / %d", path, f.Limit, p.Limit)
			}
			if q == "to" && !strings.HasSuffix(list, "/versions") && f.Before != math.MaxInt64 {
				t.Errorf("GET %s: before %d, want every build", path, f.Before)
			}
		}
		// The parameter that cannot be read is named.
		for _, q := range []string{"limit", "to", "from"} {
			wantError(t, a.do(t, "GET", list+"?"+q+"=99999999999999999999", viewer, ""), 400, q+`="99999999999999999999"`)
		}
	}
	// fly builds --since/--until: the latest start time PostgreSQL keeps.
	for _, list := range lists[:4] {
		a.store.lastFilter = db.BuildFilter{}
		if ans := a.do(t, "GET", list+"?timestamps=true&from=1&to="+maxInt64, viewer, ""); ans.code != 200 {
			t.Errorf("GET %s with to=MaxInt64: %s", list, ans)
		}
		if got := a.store.lastFilter.StartedTo; got.Year() != 9999 {
			t.Errorf("GET %s with to=MaxInt64: started before %v, want the end of year 9999", list, got)
		}
	}
	// A job's builds ask one more than the page to know of an older page.
	a.do(t, "GET", jPath+"/builds?limit="+maxInt64, viewer, "")
	if got := a.store.lastFilter.Limit; got != maxPageLimit+1 {
		t.Errorf("job builds with limit=MaxInt64: the store was asked for %d", got)
	}
}

func TestCreateBuild(t *testing.T) {
	a := newTestAPI(t)
	member := a.roleIn(t, "member")
	b := decode[concourse.Build](t, a.do(t, "POST", "/api/v1/teams/main/builds", member, onePlan), 201)
	if b.ID != 7 || b.TeamName != "main" || b.Status != "started" || b.APIURL != "/api/v1/builds/7" {
		t.Errorf("build %+v", b)
	}
	if !a.store.changed("CreateBuild main") {
		t.Errorf("no build created: %v", a.store.calls)
	}
	a = newTestAPI(t)
	member = a.roleIn(t, "member")
	wantError(t, a.do(t, "POST", "/api/v1/teams/main/builds", member, `{"id":`), 400, "decode the plan")
	wantError(t, a.do(t, "POST", "/api/v1/teams/main/builds", member, `[1]`), 400, "decode the plan")
	if len(a.store.calls) != 0 {
		t.Errorf("a refused plan changed %v", a.store.calls)
	}
	want404(t, a.do(t, "POST", "/api/v1/teams/nope/builds", a.roleIn(t, "admin"), onePlan), "Not Found", `team "nope": not found`)
}

func TestBuildLookups(t *testing.T) {
	a := newTestAPI(t)
	viewer := a.roleIn(t, "viewer")
	for _, sub := range []string{"", "/plan", "/events", "/artifacts", "/audit", "/log/outline"} {
		want404(t, a.do(t, "GET", "/api/v1/builds/99"+sub, viewer, ""), "Not Found", "build 99: not found")
		for _, bad := range []string{"abc", "0", "-1", "1.5", "99999999999999999999"} {
			wantError(t, a.do(t, "GET", "/api/v1/builds/"+bad+sub, viewer, ""), 400, "build id must be a positive number")
		}
		// A build of another team: not to be read, whatever the route, and
		// the answer does not say whose it is (ids would map to teams).
		ans := a.do(t, "GET", "/api/v1/builds/4"+sub, viewer, "")
		wantText(t, ans, 403, `build 4 belongs to a team you are not allowed to`)
		if strings.Contains(ans.body, "other") {
			t.Errorf("GET /api/v1/builds/4%s: the 403 names the build's team: %s", sub, ans.body)
		}
	}
	want404(t, a.do(t, "PUT", "/api/v1/builds/99/abort", a.roleIn(t, "admin"), ""), "Not Found", "build 99: not found")
	wantError(t, a.do(t, "PUT", "/api/v1/builds/x/abort", viewer, ""), 400, "build id must be a positive number")
}

func TestGetBuild(t *testing.T) {
	a := newTestAPI(t)
	viewer := a.roleIn(t, "viewer")
	b := decode[concourse.Build](t, a.do(t, "GET", "/api/v1/builds/3", viewer, ""), 200)
	if b.ID != 3 || b.ResourceName != "r" || b.PipelineName != "p" || b.Status != "succeeded" || b.TeamName != "main" {
		t.Errorf("check build %+v", b)
	}
	b = decode[concourse.Build](t, a.do(t, "GET", "/api/v1/builds/1", viewer, ""), 200)
	if b.ID != 1 || b.JobName != "" || b.StartTime != 1_700_000_000 || b.EndTime != 1_700_000_000 {
		t.Errorf("one-off build %+v", b)
	}
}

func TestBuildPlan(t *testing.T) {
	a := newTestAPI(t)
	ans := a.do(t, "GET", "/api/v1/builds/1/plan", a.roleIn(t, "viewer"), "")
	got := decode[map[string]any](t, ans, 200)
	if got["schema"] != "exec.v2" || strings.Contains(ans.body, "SECRET") || !strings.Contains(ans.body, `"name":"t"`) {
		t.Errorf("plan %s", ans.body)
	}
}

// A build not started yet has no plan: 404 as in Concourse, not an error
// (the UI asks again until it has one).
func TestBuildPlanNotYet(t *testing.T) {
	a := newTestAPI(t)
	for _, plan := range []string{"", "null", "{}"} {
		a.store.builds[1].Plan = json.RawMessage(plan) // build 2
		ans := a.do(t, "GET", "/api/v1/builds/2/plan", a.roleIn(t, "viewer"), "")
		if ans.code != 404 {
			t.Errorf("plan %q: %d %s", plan, ans.code, ans.body)
		}
	}
}

func TestBuildEvents(t *testing.T) {
	a := newTestAPI(t)
	viewer := a.roleIn(t, "viewer")
	ans := a.do(t, "GET", "/api/v1/builds/2/events", viewer, "", "Last-Event-ID", "4")
	if ans.code != 200 || ans.header.Get("Content-Type") != "text/event-stream; charset=utf-8" || ans.header.Get("X-ATC-Stream-Version") != "2.0" {
		t.Fatalf("events %d %s, headers %v", ans.code, ans, ans.header)
	}
	// The fake wrote one gap (5) after Last-Event-ID: the end is 6.
	if !strings.Contains(ans.body, "id: 6\nevent: end\n") {
		t.Errorf("events stream %q does not end after the last event", ans.body)
	}
	wantError(t, a.do(t, "GET", "/api/v1/builds/2/events", viewer, "", "Last-Event-ID", "x"), 400, "Last-Event-ID must be a number")

	// Once streaming, a failed read can only end the stream: nothing leaks.
	a.engine.fail = leakyDown
	ans = a.do(t, "GET", "/api/v1/builds/2/events", viewer, "")
	checkNoLeak(t, ans)
	if ans.code != 200 {
		t.Errorf("a failed stream: %d %q, want 200", ans.code, ans.body)
	}
}

func TestBuildArtifacts(t *testing.T) {
	a := newTestAPI(t)
	arts := decode[[]concourse.WorkerArtifact](t, a.do(t, "GET", "/api/v1/builds/1/artifacts", a.roleIn(t, "viewer"), ""), 200)
	if len(arts) != 1 || arts[0].ID != 1 || arts[0].Name != "out" || arts[0].BuildID != 1 || arts[0].CreatedAt != 1_700_000_000 {
		t.Errorf("artifacts %+v", arts)
	}
	if arts := decode[[]concourse.WorkerArtifact](t, a.do(t, "GET", "/api/v1/builds/2/artifacts", a.roleIn(t, "viewer"), ""), 200); arts == nil || len(arts) != 0 {
		t.Errorf("a build without artifacts: %#v, want []", arts)
	}
}

func TestBuildAudit(t *testing.T) {
	a := newTestAPI(t)
	viewer := a.roleIn(t, "viewer")
	au := decode[api.Audit](t, a.do(t, "GET", "/api/v1/builds/1/audit", viewer, ""), 200)
	if len(au.Objects) != 5 || string(au.Build) != `{"id":1}` || string(au.Steps["s1"]) != `{"exit_status":0}` {
		t.Errorf("audit %+v", au)
	}
	a.blobs.put("builds/2/build.json", []byte("not JSON"))
	ans := a.do(t, "GET", "/api/v1/builds/2/audit", viewer, "")
	if ans.code != 502 {
		t.Errorf("an audit record that is not JSON: %d %s, want 502", ans.code, ans)
	}
	a.blobs.fail = leakyDown
	ans = a.do(t, "GET", "/api/v1/builds/1/audit", viewer, "")
	checkNoLeak(t, ans)
	if ans.code != 502 || !strings.Contains(ans.body, ans.header.Get("X-Request-Id")) {
		t.Errorf("blobstore down: %d %s, want 502 naming the request", ans.code, ans)
	}
}

func TestAbortBuild(t *testing.T) {
	a := newTestAPI(t)
	if ans := a.do(t, "PUT", "/api/v1/builds/2/abort", a.roleIn(t, "pipeline-operator"), ""); ans.code != 204 || ans.body != "" {
		t.Errorf("abort: %d %s, want 204", ans.code, ans)
	}
	if !a.store.changed("AbortBuild 2") {
		t.Errorf("not aborted: %v", a.store.calls)
	}
	// A build of another team: its operators only (or an admin).
	wantText(t, a.do(t, "PUT", "/api/v1/builds/4/abort", a.roleIn(t, "member"), ""), 403, `build 4 belongs to a team you are not allowed to`)
	if ans := a.do(t, "PUT", "/api/v1/builds/4/abort", a.token(t, "o", map[string]string{"other": "pipeline-operator"}), ""); ans.code != 204 {
		t.Errorf("abort by an operator of other: %d %s", ans.code, ans)
	}
}

func TestResumeBuild(t *testing.T) {
	a := newTestAPI(t)
	b := decode[concourse.Build](t, a.do(t, "POST", "/api/v1/builds/2/resume", a.roleIn(t, "pipeline-operator"), ""), 200)
	if b.ID != 3 || b.Status != "pending" {
		t.Errorf("resumed as %+v, want the engine's new build", b)
	}
	if !a.store.changed("ResumeBuild 2") {
		t.Errorf("not resumed: %v", a.store.calls)
	}
	// Whoever may rerun the build, as rerun-build: not a viewer, not
	// another team's member.
	wantText(t, a.do(t, "POST", "/api/v1/builds/2/resume", a.roleIn(t, "viewer"), ""), 403, `build 2 belongs to a team you are not allowed to`)
	wantText(t, a.do(t, "POST", "/api/v1/builds/4/resume", a.roleIn(t, "member"), ""), 403, `build 4 belongs to a team you are not allowed to`)
	// What cannot be resumed is a conflict, its reason said.
	a.engine.fail = fmt.Errorf("resume build 2: it is succeeded; only a failed or errored build can be resumed: %w", db.ErrConflict)
	wantError(t, a.do(t, "POST", "/api/v1/builds/2/resume", a.roleIn(t, "pipeline-operator"), ""), 409, "only a failed or errored build can be resumed")
}

func TestUploadArtifact(t *testing.T) {
	a := newTestAPI(t)
	member := a.roleIn(t, "member")
	art := decode[concourse.WorkerArtifact](t, a.do(t, "POST", "/api/v1/teams/main/artifacts", member, tgz(t, "a.txt", "a")), 201)
	if art.ID != 2 || art.CreatedAt == 0 {
		t.Errorf("artifact %+v", art)
	}
	if len(a.store.calls) != 1 || !strings.HasPrefix(a.store.calls[0], "CreateArtifact blobs/main/") {
		t.Errorf("artifact not recorded: %v", a.store.calls)
	}
	a = newTestAPI(t)
	member = a.roleIn(t, "member")
	wantError(t, a.do(t, "POST", "/api/v1/teams/main/artifacts", member, "not gzip"), 400, "not a gzip stream")
	wantError(t, a.do(t, "POST", "/api/v1/teams/main/artifacts?platform=windows", member, tgz(t, "a", "a")), 400, `platform "windows": this server runs linux steps only`)
	if len(a.store.calls) != 0 {
		t.Errorf("refused uploads changed %v", a.store.calls)
	}
	want404(t, a.do(t, "POST", "/api/v1/teams/nope/artifacts", a.roleIn(t, "admin"), tgz(t, "a", "a")), "Not Found", `team "nope": not found`)
}

func TestDownloadArtifact(t *testing.T) {
	a := newTestAPI(t)
	member := a.roleIn(t, "member")
	ans := a.do(t, "GET", "/api/v1/teams/main/artifacts/1", member, "")
	if ans.code != 200 || ans.header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("artifact: %d %s", ans.code, ans)
	}
	zr, err := gzip.NewReader(strings.NewReader(ans.body))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	h, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	if body, _ := io.ReadAll(tr); h.Name != "hello.txt" || string(body) != "hello" {
		t.Errorf("artifact holds %s %q", h.Name, body)
	}
	// An artifact whose content did not compress is stored as a plain tar.
	a.blobs.put("artifacts/main/x.tar.zst", tarOf(t, "plain.bin", "stored without zstd"))
	ans = a.do(t, "GET", "/api/v1/teams/main/artifacts/1", member, "")
	if ans.code != 200 {
		t.Fatalf("plain artifact: %d %s", ans.code, ans)
	}
	if zr, err = gzip.NewReader(strings.NewReader(ans.body)); err != nil {
		t.Fatal(err)
	}
	tr = tar.NewReader(zr)
	if h, err = tr.Next(); err != nil {
		t.Fatal(err)
	}
	if body, _ := io.ReadAll(tr); h.Name != "plain.bin" || string(body) != "stored without zstd" {
		t.Errorf("plain artifact holds %s %q", h.Name, body)
	}
	wantError(t, a.do(t, "GET", "/api/v1/teams/main/artifacts/abc", member, ""), 400, "artifact id must be a number")
	want404(t, a.do(t, "GET", "/api/v1/teams/main/artifacts/99", member, ""), "Not Found", "artifact 99: not found")
	// Another team's artifact is not there for this team.
	want404(t, a.do(t, "GET", "/api/v1/teams/main/artifacts/3", a.roleIn(t, "admin"), ""), "Not Found", "artifact 3: not found")
	a.blobs.fail = leakyDown
	ans = a.do(t, "GET", "/api/v1/teams/main/artifacts/1", member, "")
	checkNoLeak(t, ans)
	if ans.code != 502 {
		t.Errorf("blobstore down: %d %s, want 502", ans.code, ans)
	}
}

// A build's audit records are under builds/<id>-<creation time>/. A
// build's records from before that (builds/<id>/) are read when their
// build.json ended when the build did; an earlier build's of the same ID
// (the database reset) are not.
func TestBuildAuditKeyedByCreation(t *testing.T) {
	a := newTestAPI(t)
	viewer := a.roleIn(t, "viewer")
	b := &a.store.builds[0].Build
	b.CreateTime = b.EndTime.Add(-time.Minute)
	// Only the legacy records: an earlier build 1's (no end time of ours).
	if au := decode[api.Audit](t, a.do(t, "GET", "/api/v1/builds/1/audit", viewer, ""), 200); len(au.Objects) != 0 || au.Build != nil {
		t.Errorf("an earlier build's records shown: %+v", au)
	}
	stepObject := func() int { return a.do(t, "GET", "/api/v1/builds/1/audit/steps/s1/pod.yaml", viewer, "").code }
	if code := stepObject(); code != 404 {
		t.Errorf("an earlier build's step record: %d, want 404", code)
	}
	// This build's own, from before the key had its creation time.
	legacy := fmt.Sprintf(`{"id":1,"end_time":%d}`, b.EndTime.Unix())
	a.blobs.put("builds/1/build.json", []byte(legacy))
	if au := decode[api.Audit](t, a.do(t, "GET", "/api/v1/builds/1/audit", viewer, ""), 200); len(au.Objects) != 5 || string(au.Build) != legacy {
		t.Errorf("the build's legacy records: %+v", au)
	}
	if code := stepObject(); code != 200 {
		t.Errorf("the build's legacy step record: %d, want 200", code)
	}
	// Its records under its own key win.
	own := "builds/" + blobstore.AuditID(1, b.CreateTime) + "/"
	a.blobs.put(own+"build.json", []byte(`{"id":1,"own":true}`))
	au := decode[api.Audit](t, a.do(t, "GET", "/api/v1/builds/1/audit", viewer, ""), 200)
	if len(au.Objects) != 1 || au.Objects[0].Key != own+"build.json" || string(au.Build) != `{"id":1,"own":true}` {
		t.Errorf("the build's records: %+v", au)
	}
	if code := stepObject(); code != 404 {
		t.Errorf("a step record under the legacy key when the build has its own: %d, want 404", code)
	}
}
