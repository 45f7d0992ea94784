package apiserver

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/concourse"
)

// Teams, the user, info, fly sync and logout (routes.go).

var teamRoutes = []routeCase{
	{method: "GET", path: "/api/v1/info", public: true, ok: 200, noStore: true},
	{method: "GET", path: "/api/v1/cli", public: true, ok: 404, noStore: true},
	{method: "GET", path: "/sky/logout", public: true, ok: 200, noStore: true},
	{method: "GET", path: "/api/v1/user", ok: 200, noStore: true},
	{method: "GET", path: "/api/v1/teams", public: true, ok: 200},
	{method: "GET", path: "/api/v1/teams/main", role: "viewer", ok: 200},
	{method: "PUT", path: "/api/v1/teams/main", role: "admin", ok: 200, body: `{"auth":{"owner":{"users":["local:admin"]}}}`},
}

func TestTeamRoutesAccess(t *testing.T)    { checkAccess(t, teamRoutes) }
func TestTeamRoutesStoreDown(t *testing.T) { checkStoreDown(t, teamRoutes) }

func TestInfoAndCLI(t *testing.T) {
	a := newTestAPI(t)
	info := decode[concourse.Info](t, a.do(t, "GET", "/api/v1/info", "", ""), 200)
	if info.Version != concourse.Version || info.ExternalURL != "http://porter.test" {
		t.Errorf("info %+v", info)
	}
	ans := a.do(t, "GET", "/api/v1/cli", "", "")
	want404(t, ans, "fly is not served here",
		"Porter does not distribute fly: use Concourse's fly "+concourse.Version+", the version this server speaks")
	if ans.header.Get("X-Concourse-Version") != concourse.Version || ans.header.Get("X-Request-Id") == "" {
		t.Errorf("headers %v lack X-Concourse-Version or X-Request-Id", ans.header)
	}
}

func TestUser(t *testing.T) {
	a := newTestAPI(t)
	u := decode[concourse.UserInfo](t, a.do(t, "GET", "/api/v1/user", a.token(t, "alice", map[string]string{"main": "viewer"}), ""), 200)
	if u.UserID != "alice" || u.IsAdmin || !slices.Equal(u.Teams["main"], []string{"viewer"}) {
		t.Errorf("user %+v", u)
	}
	if u := decode[concourse.UserInfo](t, a.do(t, "GET", "/api/v1/user", a.roleIn(t, "admin"), ""), 200); !u.IsAdmin {
		t.Errorf("an owner of main is not an admin: %+v", u)
	}
	wantText(t, a.do(t, "GET", "/api/v1/user", "not-a-token", ""), 401, "log in again")
}

func TestListTeams(t *testing.T) {
	a := newTestAPI(t)
	for _, c := range []struct {
		name  string
		token string
		want  []string
	}{
		{"anonymous", "", nil},
		{"viewer of main", a.token(t, "v", map[string]string{"main": "viewer"}), []string{"main"}},
		{"owner of other", a.token(t, "o", map[string]string{"other": "owner"}), []string{"other"}},
		{"admin", a.roleIn(t, "admin"), []string{"main", "other"}},
	} {
		teams := decode[[]concourse.Team](t, a.do(t, "GET", "/api/v1/teams", c.token, ""), 200)
		var got []string
		for _, tm := range teams {
			got = append(got, tm.Name)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: teams %v, want %v", c.name, got, c.want)
		}
	}
}

func TestGetTeam(t *testing.T) {
	a := newTestAPI(t)
	tm := decode[concourse.Team](t, a.do(t, "GET", "/api/v1/teams/main", a.token(t, "v", map[string]string{"main": "viewer"}), ""), 200)
	if tm.Name != "main" || tm.ID != 1 || !slices.Equal(tm.Auth["owner"]["users"], []string{"local:admin"}) || tm.Auth["owner"]["groups"] == nil {
		t.Errorf("team %+v", tm)
	}
	want404(t, a.do(t, "GET", "/api/v1/teams/nope", a.roleIn(t, "admin"), ""), "Not Found", `team "nope": not found`)
	wantText(t, a.do(t, "GET", "/api/v1/teams/other", a.roleIn(t, "viewer"), ""), 403, `you do not have a role on team "other"`)
}

func TestSetTeam(t *testing.T) {
	const owner = `{"auth":{"owner":{"users":["local:bob"]}}}`
	for _, c := range []struct {
		name, team, body string
		code             int
		says             string
	}{
		{"new team", "blue", owner, http.StatusCreated, ""},
		{"existing team", "main", `{"auth":{"owner":{"users":["local:admin"]},"viewer":{"groups":["g"]}}}`, http.StatusOK, ""},
		{"not JSON", "blue", `{"auth":`, 400, "decode team"},
		{"unknown role", "blue", `{"auth":{"boss":{"users":["local:bob"]}}}`, 400, `unknown role "boss"`},
		{"no auth", "blue", `{"auth":{}}`, 400, "auth config for the team must not be empty"},
		{"bad name", "Blue", owner, 400, `team name: "Blue": use lowercase letters`},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newTestAPI(t)
			ans := a.do(t, "PUT", "/api/v1/teams/"+c.team, a.roleIn(t, "admin"), c.body)
			if c.says != "" {
				wantError(t, ans, c.code, c.says)
				if len(a.store.calls) != 0 {
					t.Errorf("a refused set-team changed %v", a.store.calls)
				}
				return
			}
			got := decode[struct {
				Team concourse.Team `json:"team"`
			}](t, ans, c.code)
			if got.Team.Name != c.team || len(got.Team.Auth["owner"]["users"]) != 1 {
				t.Errorf("set team answered %+v", got)
			}
			if !a.store.changed("EnsureTeam " + c.team) {
				t.Errorf("the team was not saved: %v", a.store.calls)
			}
		})
	}
	// Owning a team is not enough: only admins set teams.
	a := newTestAPI(t)
	wantText(t, a.do(t, "PUT", "/api/v1/teams/other", a.token(t, "o", map[string]string{"other": "owner"}), owner), 403, "only an admin")
	if strings.Join(a.store.calls, ",") != "" {
		t.Errorf("refused set-team changed %v", a.store.calls)
	}
}
