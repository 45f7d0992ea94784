package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/porter-ci/porter/pkg/httpreply"
)

func TestIdentityFromClaims(t *testing.T) {
	for _, tc := range []struct {
		name      string
		claims    string
		userKey   string
		groupsKey string
		want      Identity
		err       string
	}{
		{name: "the user name key, and only it", claims: `{"sub":"s1","username":"alice","preferred_username":"al","name":"Alice A","email":"a@x","groups":["devs","ops"]}`,
			userKey: "username", want: Identity{UserID: "s1", UserName: "alice", Name: "Alice A", Email: "a@x", Groups: []string{"devs", "ops"}}},
		{name: "no key: username", claims: `{"sub":"s1","username":"alice"}`,
			want: Identity{UserID: "s1", UserName: "alice", Name: "alice"}},
		// Dex sends no "username": no falling back to the editable claims.
		{name: "no username: no preferred_username instead", claims: `{"sub":"s1","preferred_username":"al","name":"Alice A"}`,
			userKey: "username", err: `no "username" claim, which names the user (--oidc-user-name-key)`},
		{name: "no name: no email instead", claims: `{"sub":"s1","email":"a@x","email_verified":true}`,
			userKey: "name", err: `no "name" claim`},
		{name: "dex: preferred_username as the key", claims: `{"sub":"s1","preferred_username":"al","name":"Alice A"}`,
			userKey: "preferred_username", want: Identity{UserID: "s1", UserName: "al", Name: "Alice A"}},
		{name: "another groups key; a single group", claims: `{"sub":"s1","name":"A","roles":"admins","groups":["ignored"]}`,
			userKey: "name", groupsKey: "roles", want: Identity{UserID: "s1", UserName: "A", Name: "A", Groups: []string{"admins"}}},
		{name: "a custom user name key", claims: `{"sub":"s1","login":"alice","name":"A"}`,
			userKey: "login", want: Identity{UserID: "s1", UserName: "alice", Name: "A"}},
		{name: "sub and the user name kept byte for byte", claims: `{"sub":" S1","username":" Alice "}`,
			userKey: "username", want: Identity{UserID: " S1", UserName: " Alice ", Name: " Alice "}},
		{name: "a verified email", claims: `{"sub":"s1","email":"a@x","email_verified":true}`,
			userKey: "email", want: Identity{UserID: "s1", UserName: "a@x", Name: "a@x", Email: "a@x"}},
		{name: "a verified email, as a string", claims: `{"sub":"s1","email":"a@x","email_verified":"true"}`,
			userKey: "email", want: Identity{UserID: "s1", UserName: "a@x", Name: "a@x", Email: "a@x"}},
		{name: "an unverified email", claims: `{"sub":"s1","email":"a@x","email_verified":false}`, userKey: "email", err: "not say it is verified"},
		{name: "an email without email_verified", claims: `{"sub":"s1","email":"a@x"}`, userKey: "email", err: "not say it is verified"},
		{name: "no sub", claims: `{"username":"A"}`, userKey: "username", err: `no "sub" claim`},
		{name: "a blank sub", claims: `{"sub":" ","username":"A"}`, userKey: "username", err: `no "sub" claim`},
		{name: "no name at all", claims: `{"sub":"s1"}`, userKey: "username", err: `no "username" claim`},
		{name: "an empty user name", claims: `{"sub":"s1","username":" "}`, userKey: "username", err: `"username" claim, which names the user (--oidc-user-name-key), is empty`},
		{name: "a user name that is not a string", claims: `{"sub":"s1","uid":42}`, userKey: "uid", err: `"uid" claim, which names the user (--oidc-user-name-key), is a float64`},
		{name: "groups not a list", claims: `{"sub":"s1","username":"A","groups":{"a":1}}`, userKey: "username", err: `"groups" claim is a map`},
		{name: "groups with a number", claims: `{"sub":"s1","username":"A","groups":["a",1]}`, userKey: "username", err: "not only strings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var claims map[string]any
			if err := json.Unmarshal([]byte(tc.claims), &claims); err != nil {
				t.Fatal(err)
			}
			got, err := IdentityFromClaims(claims, tc.userKey, tc.groupsKey)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestOIDCConfigValidate(t *testing.T) {
	err := OIDCConfig{Issuer: "ftp://x"}.Validate()
	for _, want := range []string{`--oidc-issuer "ftp://x" is not an http(s) URL`, "--oidc-client-id is required", "--oidc-client-secret is required"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want it to say %q", err, want)
		}
	}
	if err := (OIDCConfig{Issuer: "https://idp", ClientID: "c", ClientSecret: "s", ExternalURL: "http://p"}).Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := NewOIDC(OIDCConfig{Issuer: "https://idp", ClientID: "c", ClientSecret: "s", ExternalURL: "http://p",
		CACertsPEM: [][]byte{[]byte("not PEM")}}, nil, nil, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "--oidc-ca-cert #1") {
		t.Fatalf("a bad CA: %v", err)
	}
}

// fakeIDP is an OpenID provider as far as the code flow needs one: discovery,
// keys, an authorization endpoint that approves at once, and a token
// endpoint that checks the client, the redirect URI and the PKCE verifier.
type fakeIDP struct {
	*httptest.Server
	key *rsa.PrivateKey

	mu    sync.Mutex
	codes map[string]url.Values // code -> the authorization request
	// claims go into the next ID tokens; tweak adjusts them last.
	claims map[string]any
	tweak  func(map[string]any)
}

func newFakeIDP(t *testing.T) *fakeIDP {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p := &fakeIDP{key: key, codes: map[string]url.Values{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		httpreply.JSON(w, 200, map[string]any{
			"issuer": p.URL, "authorization_endpoint": p.URL + "/auth", "token_endpoint": p.URL + "/token",
			"jwks_uri": p.URL + "/keys", "id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, _ *http.Request) {
		b64 := base64.RawURLEncoding.EncodeToString
		httpreply.JSON(w, 200, map[string]any{"keys": []any{map[string]any{
			"kty": "RSA", "kid": "k1", "alg": "RS256", "use": "sig",
			"n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes()),
		}}})
	})
	mux.HandleFunc("GET /auth", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		code := rand.Text()
		p.mu.Lock()
		p.codes[code] = q
		p.mu.Unlock()
		http.Redirect(w, r, q.Get("redirect_uri")+"?"+url.Values{"code": {code}, "state": {q.Get("state")}}.Encode(), http.StatusFound)
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		if id, secret, _ := r.BasicAuth(); id != "porter" || secret != "s3cret" {
			writeOAuthError(w, 401, "invalid_client", "bad client")
			return
		}
		_ = r.ParseForm()
		p.mu.Lock()
		req, ok := p.codes[r.PostForm.Get("code")]
		delete(p.codes, r.PostForm.Get("code"))
		p.mu.Unlock()
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		switch {
		case !ok:
			writeOAuthError(w, 400, "invalid_grant", "unknown code")
			return
		case req.Get("code_challenge_method") != "S256" || base64.RawURLEncoding.EncodeToString(sum[:]) != req.Get("code_challenge"):
			writeOAuthError(w, 400, "invalid_grant", "PKCE verification failed")
			return
		case r.PostForm.Get("redirect_uri") != req.Get("redirect_uri"):
			writeOAuthError(w, 400, "invalid_grant", "redirect_uri differs")
			return
		}
		now := time.Now()
		c := jwt.MapClaims{"iss": p.URL, "aud": "porter", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(), "nonce": req.Get("nonce")}
		p.mu.Lock()
		for k, v := range p.claims {
			c[k] = v
		}
		if p.tweak != nil {
			p.tweak(c)
		}
		p.mu.Unlock()
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
		tok.Header["kid"] = "k1"
		signed, err := tok.SignedString(key)
		if err != nil {
			writeOAuthError(w, 500, "server_error", err.Error())
			return
		}
		httpreply.JSON(w, 200, map[string]any{"access_token": "at", "token_type": "Bearer", "expires_in": 3600, "id_token": signed})
	})
	p.Server = httptest.NewServer(mux)
	t.Cleanup(p.Close)
	return p
}

// fakeSSOUsers keeps SSO users' groups; roles come from teams (team ->
// role -> "oidc:<user or group>").
type fakeSSOUsers struct {
	mu    sync.Mutex
	users map[string]Identity
	teams map[string]map[string][]string
	fail  error
}

func (f *fakeSSOUsers) SaveSSOUser(_ context.Context, connector string, id Identity) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	f.users[connector+":"+id.UserID] = id
	return nil
}

func (f *fakeSSOUsers) Session(_ context.Context, connector, userID string) (Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.users[connector+":"+userID]
	if !ok {
		return Session{}, ErrUnknownUser
	}
	s := Session{Generation: 7, Teams: map[string][]string{}}
	names := map[string]bool{connector + ":" + id.UserName: true}
	for _, g := range id.Groups {
		names[connector+":"+g] = true
	}
	for team, roles := range f.teams {
		for role, members := range roles {
			for _, m := range members {
				if names[m] {
					s.Teams[team] = append(s.Teams[team], role)
				}
			}
		}
	}
	return s, nil
}

type oidcRig struct {
	idp   *fakeIDP
	conn  *OIDC
	iss   *Issuer
	users *fakeSSOUsers
	mux   *http.ServeMux
}

func newOIDCRig(t *testing.T) *oidcRig {
	t.Helper()
	idp := newFakeIDP(t)
	idp.claims = map[string]any{"sub": "u-1", "preferred_username": "alice", "name": "Alice", "email": "alice@example.com", "groups": []string{"devs"}}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	iss := NewIssuer(key, "http://porter.test/sky/issuer", time.Hour)
	users := &fakeSSOUsers{users: map[string]Identity{}, teams: map[string]map[string][]string{
		"devs-team": {"member": {"oidc:devs"}}, "alice-team": {"viewer": {"oidc:alice"}}, "main": {"owner": {"local:admin"}},
	}}
	conn, err := NewOIDC(OIDCConfig{DisplayName: "Fake", Issuer: idp.URL, ClientID: "porter", ClientSecret: "s3cret",
		Scopes: []string{"groups", "profile"}, UserNameKey: "preferred_username", ExternalURL: "http://porter.test/"}, iss, users, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+OIDCLoginPath, conn.Login)
	mux.HandleFunc("GET "+OIDCCallbackPath, conn.Callback)
	return &oidcRig{idp: idp, conn: conn, iss: iss, users: users, mux: mux}
}

func (rig *oidcRig) serve(r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	rig.mux.ServeHTTP(w, r)
	return w
}

// start runs the login: it returns the callback request the browser makes
// when the provider sends it back (with the login's cookie).
func (rig *oidcRig) start(t *testing.T, query string) (*http.Request, url.Values) {
	t.Helper()
	w := rig.serve(httptest.NewRequest("GET", OIDCLoginPath+query, nil))
	if w.Code != http.StatusFound {
		t.Fatalf("login: %d %s", w.Code, w.Body)
	}
	authURL, err := url.Parse(w.Header().Get("Location"))
	if err != nil || !strings.HasPrefix(authURL.String(), rig.idp.URL+"/auth?") {
		t.Fatalf("login sent the browser to %q (%v)", w.Header().Get("Location"), err)
	}
	cookies := w.Result().Cookies()
	if len(cookies) != 1 || cookies[0].Name != oidcCookie || !cookies[0].HttpOnly || cookies[0].Path != OIDCCallbackPath {
		t.Fatalf("login cookies %+v", cookies)
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := noFollow.Get(authURL.String())
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	back := res.Header.Get("Location")
	if !strings.HasPrefix(back, "http://porter.test"+OIDCCallbackPath+"?") {
		t.Fatalf("the provider sent the browser to %q", back)
	}
	cb := httptest.NewRequest("GET", back, nil)
	cb.AddCookie(cookies[0])
	return cb, authURL.Query()
}

func TestOIDCLoginMintsPorterToken(t *testing.T) {
	rig := newOIDCRig(t)
	cb, authQuery := rig.start(t, "?fly_port=4321&redirect=/teams/x&tab_nonce=nonce-of-the-tab-0123")
	for k, want := range map[string]string{"client_id": "porter", "response_type": "code", "scope": "openid groups profile",
		"redirect_uri": "http://porter.test" + OIDCCallbackPath, "code_challenge_method": "S256"} {
		if got := authQuery.Get(k); got != want {
			t.Errorf("authorization request %s=%q, want %q", k, got, want)
		}
	}
	if authQuery.Get("state") == "" || authQuery.Get("nonce") == "" || authQuery.Get("code_challenge") == "" {
		t.Errorf("authorization request without state, nonce or PKCE: %v", authQuery)
	}

	w := rig.serve(cb)
	if w.Code != http.StatusFound {
		t.Fatalf("callback: %d %s", w.Code, w.Body)
	}
	loc, err := url.Parse(w.Header().Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	if loc.Path != "/login" || loc.Query().Get("fly_port") != "4321" || loc.Query().Get("redirect") != "/teams/x" {
		t.Fatalf("callback sent the browser to %s", loc)
	}
	frag, _ := url.ParseQuery(loc.Fragment)
	if frag.Get("tab_nonce") != "nonce-of-the-tab-0123" {
		t.Fatalf("the login page's nonce did not come back in the fragment: %s", loc)
	}
	claims, err := rig.iss.Verify(frag.Get("token"))
	if err != nil {
		t.Fatalf("the token handed on: %v", err)
	}
	if claims.Connector != OIDCConnector || claims.UserID != "u-1" || claims.UserName != "alice" || claims.Name != "Alice" ||
		claims.Email != "alice@example.com" || claims.Generation != 7 || claims.IsAdmin {
		t.Fatalf("claims %+v", claims)
	}
	if got := fmt.Sprint(claims.Teams); got != "map[alice-team:[viewer] devs-team:[member]]" {
		t.Fatalf("teams %s", got)
	}
	if got := rig.users.users["oidc:u-1"].Groups; !reflect.DeepEqual(got, []string{"devs"}) {
		t.Fatalf("recorded groups %v", got)
	}
	if ui := claims.UserInfo(); ui.UserName != "alice" || ui.DisplayUserID != "alice" || ui.Connector != "oidc" {
		t.Fatalf("userinfo %+v", ui)
	}
	// The login state is spent: the cookie is cleared.
	if c := w.Result().Cookies(); len(c) != 1 || c[0].MaxAge >= 0 {
		t.Fatalf("callback cookies %+v", c)
	}
}

func TestOIDCCallbackRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		adjust func(rig *oidcRig, r *http.Request) *http.Request
		status int
		says   string
	}{
		{name: "no login cookie", status: 400, says: "no login in progress",
			adjust: func(_ *oidcRig, r *http.Request) *http.Request { r.Header.Del("Cookie"); return r }},
		{name: "another login's state", status: 400, says: "state does not match",
			adjust: func(_ *oidcRig, r *http.Request) *http.Request {
				q := r.URL.Query()
				q.Set("state", "forged")
				r.URL.RawQuery = q.Encode()
				return r
			}},
		{name: "a verifier that does not match the challenge", status: 502, says: "redeeming the code",
			adjust: func(_ *oidcRig, r *http.Request) *http.Request {
				c, _ := r.Cookie(oidcCookie)
				raw, _ := base64.RawURLEncoding.DecodeString(c.Value)
				var l oidcLogin
				_ = json.Unmarshal(raw, &l)
				l.Verifier = "x" + l.Verifier[1:]
				raw, _ = json.Marshal(l)
				r.Header.Del("Cookie")
				r.AddCookie(&http.Cookie{Name: oidcCookie, Value: base64.RawURLEncoding.EncodeToString(raw)})
				return r
			}},
		{name: "a malformed cookie", status: 400, says: "malformed",
			adjust: func(_ *oidcRig, r *http.Request) *http.Request {
				r.Header.Del("Cookie")
				r.AddCookie(&http.Cookie{Name: oidcCookie, Value: "!!"})
				return r
			}},
		{name: "another nonce", status: 403, says: "nonce",
			adjust: func(rig *oidcRig, r *http.Request) *http.Request {
				rig.idp.tweak = func(c map[string]any) { c["nonce"] = "other" }
				return r
			}},
		{name: "another audience", status: 403, says: "ID token is not valid",
			adjust: func(rig *oidcRig, r *http.Request) *http.Request {
				rig.idp.tweak = func(c map[string]any) { c["aud"] = "someone-else" }
				return r
			}},
		{name: "an expired ID token", status: 403, says: "ID token is not valid",
			adjust: func(rig *oidcRig, r *http.Request) *http.Request {
				rig.idp.tweak = func(c map[string]any) { c["exp"] = time.Now().Add(-time.Hour).Unix() }
				return r
			}},
		{name: "another issuer", status: 403, says: "ID token is not valid",
			adjust: func(rig *oidcRig, r *http.Request) *http.Request {
				rig.idp.tweak = func(c map[string]any) { c["iss"] = "https://evil.test" }
				return r
			}},
		// The name and email are there, but only the configured claim names
		// the user.
		{name: "no user name", status: 403, says: `no "preferred_username" claim, which names the user`,
			adjust: func(rig *oidcRig, r *http.Request) *http.Request {
				rig.idp.tweak = func(c map[string]any) { delete(c, "preferred_username") }
				return r
			}},
		{name: "the provider refused", status: 403, says: "access_denied: user said no",
			adjust: func(_ *oidcRig, r *http.Request) *http.Request {
				q := r.URL.Query()
				q.Del("code")
				q.Set("error", "access_denied")
				q.Set("error_description", "user said no")
				r.URL.RawQuery = q.Encode()
				return r
			}},
		{name: "the user store is down", status: 503, says: "user store is unavailable",
			adjust: func(rig *oidcRig, r *http.Request) *http.Request { rig.users.fail = errors.New("db down"); return r }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rig := newOIDCRig(t)
			cb, _ := rig.start(t, "")
			w := rig.serve(tc.adjust(rig, cb))
			if w.Code != tc.status || !strings.Contains(w.Body.String(), tc.says) {
				t.Fatalf("callback: %d %q, want %d saying %q", w.Code, w.Body, tc.status, tc.says)
			}
			if loc := w.Header().Get("Location"); loc != "" {
				t.Fatalf("refused, yet sent the browser to %s", loc)
			}
		})
	}
}

func TestOIDCLoginRefuses(t *testing.T) {
	rig := newOIDCRig(t)
	w := rig.serve(httptest.NewRequest("GET", OIDCLoginPath+"?fly_port=http://evil", nil))
	if w.Code != 400 || !strings.Contains(w.Body.String(), "not a port number") {
		t.Fatalf("bad fly_port: %d %s", w.Code, w.Body)
	}
	w = rig.serve(httptest.NewRequest("GET", OIDCLoginPath+"?tab_nonce=%22%3E%3Cscript%3E", nil))
	if w.Code != 400 || !strings.Contains(w.Body.String(), "not a nonce") {
		t.Fatalf("bad tab_nonce: %d %s", w.Code, w.Body)
	}
	// An off-site redirect is dropped, not followed after the login.
	cb, _ := rig.start(t, "?redirect=//evil.test/x")
	w = rig.serve(cb)
	if loc := w.Header().Get("Location"); !strings.HasPrefix(loc, "/login#token=") {
		t.Fatalf("callback sent the browser to %q", loc)
	}
	// A provider that is down is a 502 naming it, and is tried again later.
	down, err := NewOIDC(OIDCConfig{Issuer: "http://127.0.0.1:1", ClientID: "c", ClientSecret: "s", ExternalURL: "http://p"}, rig.iss, rig.users, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	w = httptest.NewRecorder()
	down.Login(w, httptest.NewRequest("GET", OIDCLoginPath, nil))
	if w.Code != http.StatusBadGateway || !strings.Contains(w.Body.String(), "identity provider cannot be reached") {
		t.Fatalf("provider down: %d %s", w.Code, w.Body)
	}
}
