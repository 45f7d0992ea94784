package apiserver

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// What the handler tests share: one request through the real Handler(),
// the checks every route gets (who may call it, what a database that is
// down answers), and the error shapes fly reads.

// answer is what the API answered.
type answer struct {
	code   int
	header http.Header
	body   string
}

// do sends one request through the whole handler (router and middleware);
// token "" is an anonymous caller. hdr are header name, value pairs.
func (a *testAPI) do(t testing.TB, method, path, token, body string, hdr ...string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, "http://porter.test"+path, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, req)
	return answer{code: rec.Code, header: rec.Header(), body: rec.Body.String()}
}

func (ans answer) String() string {
	return http.StatusText(ans.code) + " (" + ans.header.Get("Content-Type") + "): " + strings.TrimSpace(ans.body)
}

// decode decodes a JSON answer of code into v.
func decode[T any](t testing.TB, ans answer, code int) T {
	t.Helper()
	var v T
	if ans.code != code {
		t.Fatalf("answer %d %s, want %d", ans.code, ans, code)
	}
	if ct := ans.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json: %s", ct, ans)
	}
	if err := json.Unmarshal([]byte(ans.body), &v); err != nil {
		t.Fatalf("decode %T from %s: %v", v, ans, err)
	}
	return v
}

// wantText checks a plain-text refusal (401 and 403, as fly prints them).
func wantText(t testing.TB, ans answer, code int, says string) {
	t.Helper()
	if ans.code != code || !strings.HasPrefix(ans.header.Get("Content-Type"), "text/plain") || !strings.Contains(ans.body, says) {
		t.Errorf("answer %d %s, want %d text/plain saying %q", ans.code, ans, code, says)
	}
}

// wantError checks Concourse's {"errors": ["..."]} with one error saying says.
func wantError(t testing.TB, ans answer, code int, says string) {
	t.Helper()
	if ans.code != code {
		t.Errorf("answer %d %s, want %d saying %q", ans.code, ans, code, says)
		return
	}
	var v struct {
		Errors []string `json:"errors"`
	}
	if err := json.Unmarshal([]byte(ans.body), &v); err != nil || len(v.Errors) == 0 || !strings.Contains(strings.Join(v.Errors, "\n"), says) ||
		ans.header.Get("Content-Type") != "application/json" {
		t.Errorf("answer %s, want {\"errors\": [...%q...]} (%v)", ans, says, err)
	}
}

// want404 checks Concourse's JSON-API 404, whose detail fly prints.
func want404(t testing.TB, ans answer, title, detail string) {
	t.Helper()
	if ans.code != http.StatusNotFound {
		t.Errorf("answer %d %s, want 404 %q", ans.code, ans, detail)
		return
	}
	var v struct {
		Errors []struct{ Title, Detail, Status string } `json:"errors"`
	}
	if err := json.Unmarshal([]byte(ans.body), &v); err != nil || len(v.Errors) != 1 {
		t.Errorf("404 %s is not {\"errors\":[{title, detail, status}]}: %v", ans, err)
		return
	}
	if e := v.Errors[0]; e.Title != title || e.Detail != detail || e.Status != "404" {
		t.Errorf("404 error %+v, want title %q detail %q status \"404\"", e, title, detail)
	}
}

// routeCase is one route as the generic checks see it: a request that
// succeeds for the role given, in team main, with the seed data.
type routeCase struct {
	method, path, body string
	hdr                []string // header name, value pairs
	// role is the weakest role in team main that may call it: viewer,
	// pipeline-operator, member, owner; "admin" (an owner of main); ""
	// for any caller with a token, or anyone with public set.
	role string
	// public: anonymous callers get ok too.
	public bool
	// ok is the status of the call with role.
	ok int
	// noStore: answered without the database.
	noStore bool
	// down is what the route answers with the database down when that
	// is not a 5xx (a documented fallback); 0: a 5xx.
	down int
	// anonDown is what an anonymous caller gets with the database down,
	// for a public read of no team in particular; 0: what a team that
	// does not exist gets.
	anonDown int
	// pending names the change, not made yet, that the anonymous check
	// with the database down waits for; it is skipped until then.
	pending string
}

func (rc routeCase) String() string { return rc.method + " " + rc.path }

// below is the role just weaker than role (team -> role); nil for none.
func below(role string) map[string]string {
	switch role {
	case "admin":
		return map[string]string{"main": "member", "other": "owner"}
	case "owner":
		// Owners of main are admins: below them, members.
		return map[string]string{"main": "member"}
	case "member":
		return map[string]string{"main": "pipeline-operator"}
	case "pipeline-operator":
		return map[string]string{"main": "viewer"}
	case "viewer":
		return map[string]string{"other": "owner"}
	}
	return nil
}

// roleIn is a token holding role in team main (admin: owner of main).
func (a *testAPI) roleIn(t testing.TB, role string) string {
	t.Helper()
	switch role {
	case "", "admin":
		role = "owner"
	}
	return a.token(t, "u-"+role, map[string]string{"main": role})
}

// checkAccess checks who may call each route: anonymous callers get 401
// (unless public), a token with the role just below the route's gets 403,
// one with the route's role gets its success.
func checkAccess(t *testing.T, routes []routeCase) {
	t.Helper()
	for _, rc := range routes {
		t.Run(rc.String(), func(t *testing.T) {
			a := newTestAPI(t)
			anon := a.do(t, rc.method, rc.path, "", rc.body, rc.hdr...)
			switch {
			case rc.public && anon.code != rc.ok:
				t.Errorf("anonymous: %d %s, want %d", anon.code, anon, rc.ok)
			case !rc.public:
				wantText(t, anon, http.StatusUnauthorized, "not authorized")
			}
			if weaker := below(rc.role); weaker != nil {
				ans := a.do(t, rc.method, rc.path, a.token(t, "weaker", weaker), rc.body, rc.hdr...)
				wantText(t, ans, http.StatusForbidden, "")
			}
			if ans := a.do(t, rc.method, rc.path, a.roleIn(t, rc.role), rc.body, rc.hdr...); ans.code != rc.ok {
				t.Errorf("with role %q: %d %s, want %d", rc.role, ans.code, ans, rc.ok)
			}
		})
	}
}

// leakyDown is a database error naming internals no caller may see.
var leakyDown = errors.New("dial tcp 10.1.2.3:5432: password for user porter_secret failed")

// checkStoreDown checks each route with the database down: a 5xx (or the
// route's documented fallback) that names the request's ID and nothing of
// the error; and for anonymous callers of a team's route, the answer a
// team that does not exist gets, so that nothing tells teams apart.
func checkStoreDown(t *testing.T, routes []routeCase) {
	t.Helper()
	for _, rc := range routes {
		if rc.noStore {
			continue
		}
		t.Run(rc.String(), func(t *testing.T) {
			a := newTestAPI(t)
			a.store.fail = leakyDown
			a.engine.fail = leakyDown
			ans := a.do(t, rc.method, rc.path, a.roleIn(t, "admin"), rc.body, rc.hdr...)
			switch {
			case rc.down != 0 && ans.code != rc.down:
				t.Errorf("database down: %d %s, want %d", ans.code, ans, rc.down)
			case rc.down == 0 && ans.code < 500:
				t.Errorf("database down: %d %s, want a 5xx", ans.code, ans)
			}
			checkNoLeak(t, ans)
			if ans.code >= 500 && !strings.Contains(ans.body, "request "+ans.header.Get("X-Request-Id")) {
				t.Errorf("5xx %s does not name its request ID %q", ans, ans.header.Get("X-Request-Id"))
			}

			down := a.do(t, rc.method, rc.path, "", rc.body, rc.hdr...)
			checkNoLeak(t, down)
			if rc.pending != "" {
				t.Skipf("anonymous caller, database down: waits for %s: %s", rc.pending, normalized(down))
			}
			if rc.anonDown != 0 {
				if down.code != rc.anonDown {
					t.Errorf("anonymous, database down: %d %s, want %d", down.code, down, rc.anonDown)
				}
				return
			}
			up := newTestAPI(t)
			missing := up.do(t, rc.method, otherTeam(rc.path, "nope"), "", rc.body, rc.hdr...)
			if normalized(down) != normalized(missing) {
				t.Errorf("anonymous, database down: %s\nanonymous, no such team: %s\nwant the same answer", down, missing)
			}
		})
	}
}

func checkNoLeak(t testing.TB, ans answer) {
	t.Helper()
	for _, secret := range []string{"10.1.2.3", "porter_secret", "dial tcp"} {
		if strings.Contains(ans.body, secret) {
			t.Errorf("answer %s names %q", ans, secret)
		}
	}
}

// normalized is an answer without its request ID.
func normalized(ans answer) string {
	body := ans.body
	if id := ans.header.Get("X-Request-Id"); id != "" {
		body = strings.ReplaceAll(body, id, "<id>")
	}
	return http.StatusText(ans.code) + " " + ans.header.Get("Content-Type") + " " + body
}

// otherTeam is path with team main replaced by team.
func otherTeam(path, team string) string {
	if strings.HasSuffix(path, "/teams/main") {
		return strings.TrimSuffix(path, "main") + team
	}
	return strings.Replace(path, "/teams/main/", "/teams/"+team+"/", 1)
}
