package auth

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// loginAs logs in through the token endpoint and returns the access token.
func loginAs(t *testing.T, url, name, password string) string {
	t.Helper()
	body := strings.NewReplacer("username=test", "username="+name, "password=test", "password="+password).Replace(flyLoginBody)
	resp := flyTokenRequest(t, url, body, flyBasic)
	var tr tokenResponse
	if err := json.NewDecoder(resp.Body).Decode(&tr); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("login as %s: %d %v", name, resp.StatusCode, err)
	}
	return tr.AccessToken
}

func getWith(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestLogoutEndsEveryTokenOfTheUser(t *testing.T) {
	srv, _, _ := tokenServerWith(t, nil)
	first := loginAs(t, srv.URL, "test", "test")
	second := loginAs(t, srv.URL, "test", "test")
	dev := loginAs(t, srv.URL, "dev", "devpw")
	if code, body := getWith(t, srv.URL+"/api/v1/user", first); code != 200 {
		t.Fatalf("before logout: %d %s", code, body)
	}
	if code, body := getWith(t, srv.URL+"/sky/logout", first); code != 200 {
		t.Fatalf("logout: %d %s", code, body)
	}
	for _, tok := range []string{first, second} {
		if code, body := getWith(t, srv.URL+"/api/v1/user", tok); code != 401 || !strings.Contains(body, "revoked") {
			t.Fatalf("token after logout: %d %s, want 401 revoked", code, body)
		}
	}
	// Another user's session is not touched; a new login works.
	if code, body := getWith(t, srv.URL+"/api/v1/user", dev); code != 200 {
		t.Fatalf("dev after test's logout: %d %s", code, body)
	}
	if code, body := getWith(t, srv.URL+"/api/v1/user", loginAs(t, srv.URL, "test", "test")); code != 200 {
		t.Fatalf("new login after logout: %d %s", code, body)
	}
	// Logging out without a token ends nothing and is not an error.
	if code, body := getWith(t, srv.URL+"/sky/logout", ""); code != 200 {
		t.Fatalf("anonymous logout: %d %s", code, body)
	}
}

func TestRolesAreReadPerRequest(t *testing.T) {
	srv, _, users := tokenServerWith(t, nil)
	token := loginAs(t, srv.URL, "dev", "devpw")
	if _, body := getWith(t, srv.URL+"/api/v1/user", token); !strings.Contains(body, `"teams":{"dev":["member"]}`) {
		t.Fatalf("dev's teams at login: %s", body)
	}
	// Removed from team dev, made owner of main: the same token says so at once.
	users.set(func(u *memUsers) { u.teams["local:dev"] = map[string][]string{"main": {"owner"}} })
	_, body := getWith(t, srv.URL+"/api/v1/user", token)
	if !strings.Contains(body, `"is_admin":true`) || !strings.Contains(body, `"teams":{"main":["owner"]}`) {
		t.Fatalf("dev's teams after set-team: %s", body)
	}
	users.set(func(u *memUsers) { delete(u.teams, "local:dev") })
	if _, body := getWith(t, srv.URL+"/api/v1/user", token); !strings.Contains(body, `"is_admin":false`) || !strings.Contains(body, `"teams":{}`) {
		t.Fatalf("dev's teams after removal: %s", body)
	}
}

func TestRemovedUsersTokenIsRefused(t *testing.T) {
	srv, _, users := tokenServerWith(t, nil)
	token := loginAs(t, srv.URL, "dev", "devpw")
	users.set(func(u *memUsers) { delete(u.hashes, "dev") })
	if code, body := getWith(t, srv.URL+"/api/v1/user", token); code != 401 || !strings.Contains(body, "no longer exists") {
		t.Fatalf("removed user's token: %d %s, want 401", code, body)
	}
}

func TestOldGenerationTokenIsRefused(t *testing.T) {
	srv, iss, users := tokenServerWith(t, nil)
	users.set(func(u *memUsers) { u.generations = map[string]int64{"test": 7} })
	// A token issued before generations existed (none in it) or of another
	// generation is refused; the current one passes.
	for gen, want := range map[int64]int{0: 401, 6: 401, 8: 401, 7: 200} {
		c := testClaims()
		c.Generation = gen
		tok, err := iss.Issue(c)
		if err != nil {
			t.Fatal(err)
		}
		if code, body := getWith(t, srv.URL+"/api/v1/user", tok); code != want {
			t.Errorf("generation %d: %d %s, want %d", gen, code, body, want)
		}
	}
}

func TestSessionStoreDownIsUnavailable(t *testing.T) {
	srv, _, users := tokenServerWith(t, nil)
	token := loginAs(t, srv.URL, "test", "test")
	users.set(func(u *memUsers) { u.down = true })
	code, body := getWith(t, srv.URL+"/api/v1/user", token)
	if code != http.StatusServiceUnavailable || strings.Contains(body, "127.0.0.1") {
		t.Fatalf("store down: %d %s, want 503 without internals", code, body)
	}
	// Anonymous requests do not need the store.
	if code, _ := getWith(t, srv.URL+"/api/v1/user", ""); code != 401 {
		t.Fatalf("anonymous with the store down: %d, want 401", code)
	}
}
