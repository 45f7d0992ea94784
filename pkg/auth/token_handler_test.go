package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/oauth2"
)

// memUsers is the tiny in-memory Users the token endpoint is tested against.
type memUsers struct {
	mu          sync.Mutex
	hashes      map[string]string              // name -> bcrypt hash
	teams       map[string]map[string][]string // "local:name" -> team -> roles
	generations map[string]int64               // name -> generation (0 if unset)
	down        bool                           // the store fails like a database that is down
}

var errDown = errors.New("dial tcp 127.0.0.1:15432: connect: connection refused")

func (u *memUsers) LocalUserHash(_ context.Context, name string) (string, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.down {
		return "", errDown
	}
	h, ok := u.hashes[name]
	if !ok {
		return "", fmt.Errorf("local user %q: %w", name, ErrUnknownUser)
	}
	return h, nil
}

func (u *memUsers) Session(_ context.Context, connector, userID string) (Session, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.down {
		return Session{}, errDown
	}
	if _, ok := u.hashes[userID]; !ok || connector != LocalConnector {
		return Session{}, fmt.Errorf("local user %q: %w", userID, ErrUnknownUser)
	}
	teams := map[string][]string{}
	for team, roles := range u.teams[connector+":"+userID] {
		teams[team] = roles
	}
	return Session{Generation: u.generations[userID], Teams: teams}, nil
}

func (u *memUsers) EndSessions(_ context.Context, connector, userID string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.down {
		return errDown
	}
	if _, ok := u.hashes[userID]; !ok {
		return fmt.Errorf("local user %q: %w", userID, ErrUnknownUser)
	}
	if u.generations == nil {
		u.generations = map[string]int64{}
	}
	u.generations[userID]++
	return nil
}

func (u *memUsers) set(f func(u *memUsers)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	f(u)
}

// tokenServer serves TokenHandler and, behind Authenticate, a /api/v1/user
// like Porter's and /sky/logout, for users test:test (main owner) and
// dev:devpw (dev member).
func tokenServer(t *testing.T, opts ...IssuerOption) (*httptest.Server, *Issuer) {
	srv, iss, _ := tokenServerWith(t, nil, opts...)
	return srv, iss
}

// tokenServerWith is tokenServer with the users it serves and, if not nil,
// the login throttle.
func tokenServerWith(t *testing.T, throttle *Throttle, opts ...IssuerOption) (*httptest.Server, *Issuer, *memUsers) {
	t.Helper()
	testHash, err := HashPassword("test")
	if err != nil {
		t.Fatal(err)
	}
	_, devHash, err := ParseLocalUser("dev:devpw")
	if err != nil {
		t.Fatal(err)
	}
	users := &memUsers{
		hashes: map[string]string{"test": testHash, "dev": devHash},
		teams: map[string]map[string][]string{
			"local:test": {"main": {"owner"}},
			"local:dev":  {"dev": {"member"}},
		},
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	iss := NewIssuer(newTestKey(t), "http://example.invalid/sky/issuer", 24*time.Hour, opts...)

	var tokenOpts []TokenOption
	if throttle != nil {
		tokenOpts = append(tokenOpts, WithThrottle(throttle))
	}
	mux := http.NewServeMux()
	mux.Handle("/sky/issuer/token", TokenHandler(iss, users, log, tokenOpts...))
	mux.Handle("GET /sky/logout", Logout(users, log, nil))
	mux.Handle("GET /api/v1/user", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := FromContext(r.Context())
		if !ok {
			http.Error(w, fmt.Sprint("not authorized: ", TokenError(r.Context())), http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode(c.UserInfo())
	}))
	srv := httptest.NewServer(Authenticate(iss, users, log, nil)(mux))
	t.Cleanup(srv.Close)
	return srv, iss, users
}

// flyTokenRequest is fly 8.2.5's login request byte for byte (reference
// capture), with the password "test".
func flyTokenRequest(t *testing.T, url, body, basic string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/sky/issuer/token", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if basic != "" {
		req.Header.Set("Authorization", "Basic "+basic)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

const (
	flyBasic     = "Zmx5OlpteDU=" // fly:Zmx5
	flyLoginBody = "grant_type=password&password=test&scope=openid+profile+email+federated%3Aid+groups&username=test"
)

func TestTokenLoginAsFly(t *testing.T) {
	clk := &clock{time.Now().Truncate(time.Second).Add(400 * time.Millisecond)}
	srv, iss := tokenServer(t, WithClock(clk.now))

	resp := flyTokenRequest(t, srv.URL, flyLoginBody, flyBasic)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q", cc)
	}
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if body["token_type"] != "bearer" {
		t.Errorf("token_type %v", body["token_type"])
	}
	// As Concourse: a day's token, a fraction of a second already gone.
	if body["expires_in"] != float64(86399) {
		t.Errorf("expires_in %v, want 86399", body["expires_in"])
	}
	access, _ := body["access_token"].(string)
	claims, err := iss.Verify(access)
	if err != nil {
		t.Fatalf("access token does not verify: %v", err)
	}
	if claims.UserID != "test" || !claims.IsAdmin || claims.Subject != "CgR0ZXN0EgVsb2NhbA" {
		t.Errorf("claims %+v", claims)
	}
	if want := clk.t.Truncate(time.Second).Add(24 * time.Hour); !claims.Expiry.Equal(want) {
		t.Errorf("expiry %v, want %v (what expires_in says)", claims.Expiry, want)
	}
	if _, err := iss.Verify(body["id_token"].(string)); err != nil {
		t.Errorf("id_token does not verify: %v", err)
	}

	// Then, as fly does, GET /api/v1/user with the access token.
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/user", nil)
	req.Header.Set("Authorization", "Bearer "+access)
	userResp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer userResp.Body.Close()
	b, _ := io.ReadAll(userResp.Body)
	want := `{"sub":"CgR0ZXN0EgVsb2NhbA","name":"test","user_id":"test","user_name":"","email":"test","is_admin":true,"is_system":false,"teams":{"main":["owner"]},"connector":"local","display_user_id":"test"}`
	if userResp.StatusCode != http.StatusOK || strings.TrimSpace(string(b)) != want {
		t.Fatalf("GET /api/v1/user: %d %s\nwant %s", userResp.StatusCode, b, want)
	}
}

// TestTokenWithFlysOAuth2Library logs in the way fly's code does, with
// golang.org/x/oauth2, and checks the error fly would print.
func TestTokenWithFlysOAuth2Library(t *testing.T) {
	srv, iss := tokenServer(t)
	conf := oauth2.Config{
		ClientID:     "fly",
		ClientSecret: "Zmx5",
		Endpoint:     oauth2.Endpoint{TokenURL: srv.URL + "/sky/issuer/token"},
		Scopes:       []string{"openid", "profile", "email", "federated:id", "groups"},
	}
	ctx := context.Background()

	tok, err := conf.PasswordCredentialsToken(ctx, "dev", "devpw")
	if err != nil {
		t.Fatal(err)
	}
	c, err := iss.Verify(tok.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	if c.IsAdmin || !c.Can("dev", ActionCreateBuild) || c.CanRead("main") {
		t.Errorf("dev's claims %+v", c)
	}

	_, err = conf.PasswordCredentialsToken(ctx, "dev", "wrong")
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) || re.ErrorCode != "access_denied" || re.Response.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong password: %v", err)
	}
	if !strings.Contains(err.Error(), "Invalid username or password") {
		t.Errorf("fly would print %q", err)
	}
}

func TestTokenRefusals(t *testing.T) {
	srv, _ := tokenServer(t)
	tests := []struct {
		name, body, basic string
		status            int
		code              string
	}{
		{"wrong password", strings.Replace(flyLoginBody, "password=test", "password=nope", 1), flyBasic, 401, "access_denied"},
		{"unknown user", strings.Replace(flyLoginBody, "username=test", "username=nobody", 1), flyBasic, 401, "access_denied"},
		{"empty password", strings.Replace(flyLoginBody, "password=test", "password=", 1), flyBasic, 401, "access_denied"},
		{"no client auth", flyLoginBody, "", 401, "invalid_client"},
		{"wrong client secret", flyLoginBody, "Zmx5Om5vcGU=" /* fly:nope */, 401, "invalid_client"},
		{"other client", flyLoginBody, "d2ViOlpteDU=" /* web:Zmx5 */, 401, "invalid_client"},
		{"wrong grant type", strings.Replace(flyLoginBody, "grant_type=password", "grant_type=client_credentials", 1), flyBasic, 400, "unsupported_grant_type"},
		{"no grant type", strings.Replace(flyLoginBody, "grant_type=password&", "", 1), flyBasic, 400, "unsupported_grant_type"},
		{"no openid scope", strings.Replace(flyLoginBody, "scope=openid+", "scope=", 1), flyBasic, 400, "invalid_request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := flyTokenRequest(t, srv.URL, tt.body, tt.basic)
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			var e struct {
				Error, ErrorDescription string
				AccessToken             string `json:"access_token"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatal(err)
			}
			if e.Error != tt.code {
				t.Errorf("error %q, want %q", e.Error, tt.code)
			}
			if e.AccessToken != "" {
				t.Error("refusal carries a token")
			}
		})
	}

	t.Run("GET", func(t *testing.T) {
		resp, err := http.Get(srv.URL + "/sky/issuer/token")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
}

func TestAuthenticate(t *testing.T) {
	clk := &clock{time.Now()}
	srv, iss := tokenServer(t, WithClock(clk.now))
	token, err := iss.Issue(testClaims())
	if err != nil {
		t.Fatal(err)
	}
	get := func(auth string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/user", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	if code, body := get("Bearer " + token); code != 200 {
		t.Errorf("Bearer: %d %s", code, body)
	}
	// fly's hijack sends the scheme in lower case.
	if code, body := get("bearer " + token); code != 200 {
		t.Errorf("bearer: %d %s", code, body)
	}
	if code, body := get(""); code != 401 || !strings.Contains(body, "<nil>") {
		t.Errorf("no header: %d %s (want 401 and no token error)", code, body)
	}
	if code, body := get("Bearer garbage"); code != 401 || !strings.Contains(body, "invalid token") {
		t.Errorf("garbage: %d %s", code, body)
	}
	if code, body := get("Basic Zmx5OlpteDU="); code != 401 || !strings.Contains(body, "not a bearer token") {
		t.Errorf("basic: %d %s", code, body)
	}
	clk.t = clk.t.Add(25 * time.Hour)
	if code, body := get("Bearer " + token); code != 401 || !strings.Contains(body, "expired") {
		t.Errorf("expired: %d %s", code, body)
	}
}

func TestTokenStoreDownIsAServerError(t *testing.T) {
	users := &memUsers{down: true}
	srv := httptest.NewServer(TokenHandler(NewIssuer(newTestKey(t), testIssuerURL, time.Hour), users, slog.New(slog.DiscardHandler)))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("grant_type=password&username=test&password=test&scope=openid"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth("fly", "Zmx5")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), "server_error") {
		t.Errorf("store down: %d %s, want 500 server_error (not a wrong password)", resp.StatusCode, body)
	}
}
