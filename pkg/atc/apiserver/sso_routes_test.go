package apiserver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/httpreply"
)

// Single sign-on (sso.go): on a server without OIDC.

var ssoRoutes = []routeCase{
	{method: "GET", path: "/sky/connectors", public: true, ok: 200, noStore: true},
	{method: "GET", path: auth.OIDCLoginPath, public: true, ok: 404, noStore: true},
	{method: "GET", path: auth.OIDCCallbackPath + "?code=c&state=s", public: true, ok: 404, noStore: true},
}

func TestSSORoutesAccess(t *testing.T)    { checkAccess(t, ssoRoutes) }
func TestSSORoutesStoreDown(t *testing.T) { checkStoreDown(t, ssoRoutes) }

func TestSSOOff(t *testing.T) {
	a := newTestAPI(t)
	if got := decode[[]connector](t, a.do(t, "GET", "/sky/connectors", "", ""), 200); len(got) != 0 {
		t.Fatalf("connectors without OIDC: %+v", got)
	}
	want404(t, a.do(t, "GET", auth.OIDCLoginPath+"?fly_port=1", "", ""), "Connector Not Found Error", noOIDC)
}

// fakeDiscovery answers an OIDC provider's discovery document only: enough
// for the login to send the browser on.
func fakeDiscovery(t *testing.T) string {
	t.Helper()
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/openid-configuration" {
			http.NotFound(w, r)
			return
		}
		httpreply.JSON(w, 200, map[string]any{"issuer": srv.URL, "authorization_endpoint": srv.URL + "/auth",
			"token_endpoint": srv.URL + "/token", "jwks_uri": srv.URL + "/keys"})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestSSOOn(t *testing.T) {
	idp := fakeDiscovery(t)
	a := newTestAPIWithOIDC(t, &auth.OIDCConfig{DisplayName: "Corp SSO", Issuer: idp, ClientID: "porter", ClientSecret: "s"})
	got := decode[[]connector](t, a.do(t, "GET", "/sky/connectors", "", ""), 200)
	if len(got) != 1 || got[0] != (connector{ID: "oidc", DisplayName: "Corp SSO", LoginURL: auth.OIDCLoginPath}) {
		t.Fatalf("connectors: %+v", got)
	}

	ans := a.do(t, "GET", auth.OIDCLoginPath+"?fly_port=5555", "", "")
	if ans.code != http.StatusFound {
		t.Fatalf("login: %s", ans)
	}
	loc, err := url.Parse(ans.header.Get("Location"))
	if err != nil || !strings.HasPrefix(loc.String(), idp+"/auth?") {
		t.Fatalf("login sent the browser to %q", ans.header.Get("Location"))
	}
	// The redirect URI is the server's external URL's.
	if q := loc.Query(); q.Get("redirect_uri") != "http://porter.test"+auth.OIDCCallbackPath || q.Get("code_challenge") == "" {
		t.Fatalf("authorization request %v", q)
	}
	wantText(t, a.do(t, "GET", auth.OIDCLoginPath+"?fly_port=x", "", ""), 400, "not a port number")
	// Back without this browser's login cookie: refused.
	wantText(t, a.do(t, "GET", auth.OIDCCallbackPath+"?code=c&state=s", "", ""), 400, "no login in progress")
}

// An OIDC user's token is checked against its session as a local user's
// is: roles from its groups now, and a logout ends it.
func TestSSOUserSession(t *testing.T) {
	a := newTestAPI(t)
	a.store.teams[1].Auth = db.TeamAuth{"member": {Groups: []string{"oidc:devs"}}}
	if err := a.store.SaveSSOUser(context.Background(), "oidc", "sub-1", "alice", []string{"devs"}); err != nil {
		t.Fatal(err)
	}
	sess, _ := a.store.SSOUserSession(context.Background(), "oidc", "sub-1")
	tok, err := a.issuer.Issue(auth.Claims{UserID: "sub-1", Name: "Alice", UserName: "alice", Connector: auth.OIDCConnector,
		Generation: sess.Generation})
	if err != nil {
		t.Fatal(err)
	}
	u := decode[concourse.UserInfo](t, a.do(t, "GET", "/api/v1/user", tok, ""), 200)
	if u.UserName != "alice" || u.Connector != "oidc" || !slices.Equal(u.Teams["other"], []string{"member"}) || len(u.Teams) != 1 {
		t.Fatalf("user %+v", u)
	}
	if ans := a.do(t, "GET", "/sky/logout", tok, ""); ans.code != 200 {
		t.Fatalf("logout: %s", ans)
	}
	wantText(t, a.do(t, "GET", "/api/v1/user", tok, ""), 401, "log in again")
	// A token of an OIDC user never seen is refused.
	stranger, _ := a.issuer.Issue(auth.Claims{UserID: "nobody", Connector: auth.OIDCConnector})
	wantText(t, a.do(t, "GET", "/api/v1/user", stranger, ""), 401, "log in again")
}
