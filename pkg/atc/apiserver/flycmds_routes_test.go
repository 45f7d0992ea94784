package apiserver

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/atc/apiserver/adminserver"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
)

// The rest of fly's commands (flycmds.go).

var flyRoutes = []routeCase{
	// A bare 403 for non-admins (fly explains it): TestDestroyTeam.
	{method: "DELETE", path: "/api/v1/teams/other", role: "", ok: 204},
	{method: "PUT", path: "/api/v1/teams/main/rename", role: "admin", ok: 403, body: `{"name":"x"}`},
	{method: "PUT", path: pPath + "/archive", role: "member", ok: 200},
	{method: "GET", path: pPath + "/builds", role: "viewer", ok: 200},
	{method: "PUT", path: jPath + "/schedule", role: "pipeline-operator", ok: 200},
	{method: "GET", path: rPath + "/shared", role: "admin", ok: 200},
	{method: "DELETE", path: rPath + "/versions", role: "admin", ok: 200},
	{method: "GET", path: pPath + "/resource-types/rt/shared", role: "admin", ok: 200},
	{method: "DELETE", path: pPath + "/resource-types/rt/versions", role: "admin", ok: 200},
	{method: "POST", path: pPath + "/resource-types/rt/check", role: "pipeline-operator", ok: 201},
	{method: "GET", path: "/api/v1/wall", public: true, ok: 200, anonDown: 500},
	{method: "PUT", path: "/api/v1/wall", role: "admin", ok: 200, body: `{"message":"hi"}`},
	{method: "DELETE", path: "/api/v1/wall", role: "admin", ok: 200},
	{method: "GET", path: "/api/v1/components", role: "admin", ok: 200},
	{method: "PUT", path: "/api/v1/components/pause", role: "admin", ok: 200},
	{method: "PUT", path: "/api/v1/components/unpause", role: "admin", ok: 200},
	{method: "PUT", path: "/api/v1/components/scheduler/pause", role: "admin", ok: 200},
	{method: "PUT", path: "/api/v1/components/scheduler/unpause", role: "admin", ok: 200},
	{method: "GET", path: "/api/v1/users?since=2020-01-01", role: "admin", ok: 200},
}

func TestFlyRoutesAccess(t *testing.T)    { checkAccess(t, flyRoutes) }
func TestFlyRoutesStoreDown(t *testing.T) { checkStoreDown(t, flyRoutes) }

func TestDestroyTeam(t *testing.T) {
	a := newTestAPI(t)
	admin := a.roleIn(t, "admin")
	a.blobs.put("task-caches/other/p/j/t/c.tar.zst", []byte("x"))
	a.blobs.put("task-caches/others/p/j/t/c.tar.zst", []byte("x"))
	if ans := a.do(t, "DELETE", "/api/v1/teams/other", admin, ""); ans.code != 204 {
		t.Fatalf("destroy: %s", ans)
	}
	// Its running build 4 was aborted first; its task caches went, not
	// those of a team whose name starts the same.
	if !a.store.changed("DeleteTeam 2") || !a.store.changed("AbortBuild 4") {
		t.Errorf("changes %v", a.store.calls)
	}
	if a.blobs.has("task-caches/other/p/j/t/c.tar.zst") || !a.blobs.has("task-caches/others/p/j/t/c.tar.zst") {
		t.Errorf("task caches after destroy: %v", a.blobs.objs)
	}
	// fly says "could not destroy" for a bare 403 (one with a body, it
	// prints as an error).
	if ans := a.do(t, "DELETE", "/api/v1/teams/main", admin, ""); ans.code != 403 || ans.body != "" {
		t.Errorf("destroy main: %s, want a bare 403", ans)
	}
	if ans := a.do(t, "DELETE", "/api/v1/teams/ghost", admin, ""); ans.code != 404 {
		t.Errorf("destroy ghost: %s, want 404", ans)
	}
	// An owner of other is no admin.
	if ans := a.do(t, "DELETE", "/api/v1/teams/other", a.token(t, "o", map[string]string{"other": "owner"}), ""); ans.code != 403 || ans.body != "" {
		t.Errorf("destroy by a non-admin: %s, want a bare 403", ans)
	}
}

func TestRenameTeam(t *testing.T) {
	a := newTestAPI(t)
	admin := a.roleIn(t, "admin")
	a.blobs.put("task-caches/other/p/j/t/c.tar.zst", []byte("x"))
	if ans := a.do(t, "PUT", "/api/v1/teams/other/rename", admin, `{"name":"renamed"}`); ans.code != 200 || !a.store.changed("RenameTeam 2 renamed") {
		t.Fatalf("rename: %s, changes %v", ans, a.store.calls)
	}
	if !a.blobs.has("task-caches/renamed/p/j/t/c.tar.zst") || a.blobs.has("task-caches/other/p/j/t/c.tar.zst") {
		t.Errorf("task caches did not move: %v", a.blobs.objs)
	}
	// The team's owner may too.
	owner := a.token(t, "o", map[string]string{"other": "owner"})
	if ans := a.do(t, "PUT", "/api/v1/teams/other/rename", owner, `{"name":"again"}`); ans.code != 200 {
		t.Errorf("owner's rename: %s", ans)
	}
	wantText(t, a.do(t, "PUT", "/api/v1/teams/other/rename", a.token(t, "m", map[string]string{"other": "member"}), `{"name":"x"}`), 403, "not allowed")
	wantError(t, a.do(t, "PUT", "/api/v1/teams/other/rename", admin, `{"name":"a/b"}`), 400, "team name")
	wantError(t, a.do(t, "PUT", "/api/v1/teams/other/rename", admin, `{`), 400, "decode the new name")
	want404(t, a.do(t, "PUT", "/api/v1/teams/ghost/rename", admin, `{"name":"x"}`), "Team Not Found Error", "team 'ghost' not found")
	if ans := a.do(t, "PUT", "/api/v1/teams/other/rename", admin, `{"name":"other"}`); ans.code != 409 {
		t.Errorf("rename onto an existing team: %s, want 409", ans)
	}
}

func TestArchiveAndScheduleAndPipelineBuilds(t *testing.T) {
	a := newTestAPI(t)
	if ans := a.do(t, "PUT", pPath+"/archive", a.roleIn(t, "member"), ""); ans.code != 200 || !a.store.changed("ArchivePipeline 10") {
		t.Errorf("archive: %s, changes %v", ans, a.store.calls)
	}
	if ans := a.do(t, "PUT", jPath+"/schedule", a.roleIn(t, "pipeline-operator"), ""); ans.code != 200 || !a.store.changed("RequestSchedule 100") {
		t.Errorf("schedule: %s, changes %v", ans, a.store.calls)
	}
	want404(t, a.do(t, "PUT", pPath+"/jobs/ghost/schedule", a.roleIn(t, "admin"), ""), "Job Not Found Error", "Job with name 'ghost' not found.")

	bs := decode[[]concourse.Build](t, a.do(t, "GET", pPath+"/builds?limit=5", a.roleIn(t, "viewer"), ""), 200)
	if a.store.lastFilter.PipelineID != 10 || len(a.store.lastFilter.TeamIDs) != 1 || a.store.lastFilter.TeamIDs[0] != 1 || len(bs) == 0 {
		t.Errorf("pipeline builds %v with filter %+v", bs, a.store.lastFilter)
	}
}

func TestBuildsByStartTime(t *testing.T) {
	a := newTestAPI(t)
	admin := a.roleIn(t, "admin")
	for _, path := range []string{"/api/v1/builds", "/api/v1/teams/main/builds", pPath + "/builds", jPath + "/builds"} {
		a.store.lastFilter = db.BuildFilter{}
		if ans := a.do(t, "GET", path+"?from=1700000000&to=1700000100&timestamps=true", admin, ""); ans.code != 200 {
			t.Fatalf("%s: %s", path, ans)
		}
		f := a.store.lastFilter
		if !f.StartedFrom.Equal(time.Unix(1_700_000_000, 0)) || !f.StartedTo.Equal(time.Unix(1_700_000_100, 0)) || f.Before != 0 || f.After != 0 {
			t.Errorf("%s: filter %+v, want start times and no ids", path, f)
		}
	}
	wantError(t, a.do(t, "GET", "/api/v1/builds?from=yesterday&timestamps=true", admin, ""), 400, "want a Unix time")
}

func TestClearVersions(t *testing.T) {
	a := newTestAPI(t)
	admin := a.roleIn(t, "admin")
	shared := decode[resourceIdentifiers](t, a.do(t, "GET", rPath+"/shared", admin, ""), 200)
	if len(shared.Resources) != 1 || shared.Resources[0] != (resourceIdentifier{Name: "r", PipelineName: "p", TeamName: "main"}) || shared.ResourceTypes == nil {
		t.Errorf("shared %+v", shared)
	}
	got := decode[map[string]int64](t, a.do(t, "DELETE", rPath+"/versions", admin, ""), 200)
	if got["versions_removed"] != 1 || !a.store.changed("ClearResourceVersions 200") {
		t.Errorf("cleared %v, changes %v", got, a.store.calls)
	}
	shared = decode[resourceIdentifiers](t, a.do(t, "GET", pPath+"/resource-types/rt/shared", admin, ""), 200)
	if len(shared.ResourceTypes) != 1 || shared.ResourceTypes[0].Name != "rt" || shared.Resources == nil {
		t.Errorf("shared %+v", shared)
	}
	if got := decode[map[string]int64](t, a.do(t, "DELETE", pPath+"/resource-types/rt/versions", admin, ""), 200); got["versions_removed"] != 0 {
		t.Errorf("cleared type versions %v", got)
	}
	// fly prints "resource type 'x' is not found" for any 404.
	want404(t, a.do(t, "GET", pPath+"/resource-types/ghost/shared", admin, ""), "Resource Type Not Found Error", "resource type 'ghost' not found in pipeline 'p'")
	want404(t, a.do(t, "GET", pPath+"/resources/ghost/shared", admin, ""), "Resource Not Found Error", "Resource with name 'ghost' not found.")
}

func TestWall(t *testing.T) {
	a := newTestAPI(t)
	admin := a.roleIn(t, "admin")
	if w := decode[adminserver.Wall](t, a.do(t, "GET", "/api/v1/wall", "", ""), 200); w != (adminserver.Wall{}) {
		t.Errorf("no wall: %+v", w)
	}
	if ans := a.do(t, "PUT", "/api/v1/wall", admin, `{"message":"maintenance at noon","TTL":3600000000000}`); ans.code != 200 {
		t.Fatalf("set wall: %s", ans)
	}
	w := decode[adminserver.Wall](t, a.do(t, "GET", "/api/v1/wall", "", ""), 200)
	if w.Message != "maintenance at noon" || w.TTL <= 59*time.Minute || w.TTL > time.Hour {
		t.Errorf("wall %+v, want the message and about an hour left", w)
	}
	wantError(t, a.do(t, "PUT", "/api/v1/wall", admin, `{"message":""}`), 400, "wall message cannot be empty")
	wantError(t, a.do(t, "PUT", "/api/v1/wall", admin, `{"message":"x","TTL":-1}`), 400, "want a positive duration")
	if ans := a.do(t, "DELETE", "/api/v1/wall", admin, ""); ans.code != 200 {
		t.Fatalf("clear wall: %s", ans)
	}
	if w := decode[adminserver.Wall](t, a.do(t, "GET", "/api/v1/wall", "", ""), 200); w != (adminserver.Wall{}) {
		t.Errorf("cleared wall: %+v", w)
	}
}

func TestComponents(t *testing.T) {
	a := newTestAPI(t)
	admin := a.roleIn(t, "admin")
	cs := decode[[]adminserver.Component](t, a.do(t, "GET", "/api/v1/components", admin, ""), 200)
	if len(cs) != 2 || cs[0].Name != "collector" || cs[0].Interval != time.Minute {
		t.Errorf("components %+v", cs)
	}
	for _, c := range []struct{ path, change string }{
		{"/api/v1/components/scheduler/pause", "Pause scheduler"}, {"/api/v1/components/scheduler/unpause", "Unpause scheduler"},
		{"/api/v1/components/pause", "Pause "}, {"/api/v1/components/unpause", "Unpause "},
		// Concourse's names, as fly's --runtime-components and --gc-components send them.
		{"/api/v1/components/tracker/pause", "Pause scheduler"}, {"/api/v1/components/collector_builds/unpause", "Unpause collector"},
	} {
		if ans := a.do(t, "PUT", c.path, admin, ""); ans.code != 200 || !a.store.changed(c.change) {
			t.Errorf("%s: %s, changes %q", c.path, ans, a.store.calls)
		}
	}
	want404(t, a.do(t, "PUT", "/api/v1/components/ghost/pause", admin, ""), "Component Not Found Error", "component 'ghost' not found")
	// fly says "must be an owner of the 'main' team" for any 403.
	wantText(t, a.do(t, "GET", "/api/v1/components", a.roleIn(t, "member"), ""), 403, "only an admin")
}

func TestActiveUsers(t *testing.T) {
	a := newTestAPI(t)
	admin := a.roleIn(t, "admin")
	us := decode[[]adminserver.ActiveUser](t, a.do(t, "GET", "/api/v1/users?since=2023-01-01", admin, ""), 200)
	if len(us) != 1 || us[0] != (adminserver.ActiveUser{Username: "admin", Connector: "local", LastLogin: 1_700_000_000, Sub: us[0].Sub}) || us[0].Sub == "" {
		t.Errorf("users %+v", us)
	}
	if us := decode[[]adminserver.ActiveUser](t, a.do(t, "GET", "/api/v1/users?since=2024-01-01", admin, ""), 200); len(us) != 0 {
		t.Errorf("users since 2024 %+v, want none", us)
	}
	wantError(t, a.do(t, "GET", "/api/v1/users?since=01/01/2024", admin, ""), 400, "wrong date format (yyyy-mm-dd)")
}

// TestOpaqueAccessToken: an opaque token (what the login gives fly, so
// that `fly targets` reads its expiry) is taken for the signed token it
// stands for; one the store does not hold is refused.
func TestOpaqueAccessToken(t *testing.T) {
	a := newTestAPI(t)
	opaque := func() string {
		b := make([]byte, 28)
		_, _ = rand.Read(b[:20])
		binary.LittleEndian.PutUint64(b[20:], uint64(time.Now().Add(time.Hour).Unix()))
		return base64.RawStdEncoding.EncodeToString(b)
	}
	tok := opaque()
	sum := sha256.Sum256([]byte(tok))
	a.store.tokens = map[string]string{hex.EncodeToString(sum[:]): a.roleIn(t, "viewer")}
	if ans := a.do(t, "GET", "/api/v1/user", tok, ""); ans.code != 200 || !strings.Contains(ans.body, "u-viewer") {
		t.Errorf("user with the opaque token: %s", ans)
	}
	wantText(t, a.do(t, "GET", "/api/v1/user", opaque(), ""), 401, "the token is not valid")
	// A refused token's answer says nothing of which library refused
	// what (a forger's next hint), only the server's own reasons.
	for _, bad := range []string{"not-a-token", "a.b.c", "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0."} {
		ans := a.do(t, "GET", "/api/v1/user", bad, "")
		wantText(t, ans, 401, "not authorized: the token is not valid; log in again")
		if l := strings.ToLower(ans.body); strings.Contains(l, "malformed") || strings.Contains(l, "segment") || strings.Contains(l, "jws") || strings.Contains(l, "signature") {
			t.Errorf("token %q: the 401 carries a library's reason: %s", bad, ans.body)
		}
	}
	a.store.fail = leakyDown
	if ans := a.do(t, "GET", "/api/v1/user", tok, ""); ans.code != 503 {
		t.Errorf("database down: %s, want 503", ans)
	}
}

func TestCheckResourceType(t *testing.T) {
	a := newTestAPI(t)
	op := a.roleIn(t, "pipeline-operator")
	b := decode[concourse.Build](t, a.do(t, "POST", pPath+"/resource-types/rt/check", op, `{"from":{"digest":"sha256:1"}}`), 201)
	if b.ID == 0 || !a.store.changed("CreateBuild main") {
		t.Errorf("check build %+v, changes %v", b, a.store.calls)
	}
	want404(t, a.do(t, "POST", pPath+"/resource-types/ghost/check", op, ""), "Resource Type Not Found Error", "resource type 'ghost' not found in pipeline 'p'")
	wantError(t, a.do(t, "POST", pPath+"/resource-types/rt/check", op, `{`), 400, "decode the check request")
}

// An archived pipeline refuses what would make it run, as Concourse's does.
func TestArchivedPipelineRefusesRuns(t *testing.T) {
	a := newTestAPI(t)
	a.store.pipelines[0].Archived = true
	admin := a.roleIn(t, "admin")
	for _, c := range []struct{ method, path string }{
		{"PUT", pPath + "/unpause"}, {"PUT", pPath + "/pause"}, {"POST", jPath + "/builds"}, {"PUT", jPath + "/schedule"},
		{"POST", rPath + "/check"}, {"PUT", rPath + "/versions/300/pin"}, {"POST", pPath + "/resource-types/rt/check"},
	} {
		wantError(t, a.do(t, c.method, c.path, admin, "{}"), 409, "action not allowed for an archived pipeline")
	}
	if len(a.store.calls) != 0 {
		t.Errorf("an archived pipeline changed: %v", a.store.calls)
	}
	// Reads and archiving again still work.
	if ans := a.do(t, "GET", pPath+"/jobs", admin, ""); ans.code != 200 {
		t.Errorf("jobs of an archived pipeline: %s", ans)
	}
}
