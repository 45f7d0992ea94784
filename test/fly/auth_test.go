package fly_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/test/testenv"
)

// expectNotAuthorized checks what fly prints on a 401: it tells the person to log in.
func expectNotAuthorized(res testenv.FlyResult, target string) {
	GinkgoHelper()
	Expect(res.ExitCode).To(Equal(1), res.String())
	Expect(res.Stderr).To(ContainSubstring("not authorized. run the following to log in:"), res.String())
	Expect(plain(res.Stderr)).To(ContainSubstring("-t "+target+" login"), res.String())
}

var _ = Describe("fly login, logout, status, userinfo", func() {
	It("logs in with a password and saves the target, without a version warning", func(ctx SpecContext) {
		f := newFly("login")
		res := login(ctx, f, s.server, adminUser, s.adminPassword)
		Expect(res.Stdout).To(ContainSubstring("logging in to team 'main'"))
		Expect(res.Stderr).NotTo(ContainSubstring("WARNING"), res.String())
		flyrc, err := os.ReadFile(filepath.Join(f.Home, ".flyrc"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(flyrc)).To(ContainSubstring("api: " + s.server.URL()))
		Expect(string(flyrc)).To(ContainSubstring("team: main"))

		res = succeed(ctx, f, "status")
		Expect(res.Stdout).To(Equal("logged in successfully\n"))
	})

	It("refuses a wrong password clearly and saves no token", func(ctx SpecContext) {
		f := newFly("wrong")
		res, err := f.Login(ctx, s.server.URL(), adminUser, "not-"+s.adminPassword)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("Invalid username or password"), res.String())
		Expect(res.Stdout).NotTo(ContainSubstring("target saved"))

		// Nor does a user that does not exist get further.
		res, err = f.Login(ctx, s.server.URL(), "nobody", s.adminPassword)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("Invalid username or password"), res.String())
	})

	It("refuses to log in to a team that does not exist", func(ctx SpecContext) {
		f := newFly("nope")
		res, err := f.Login(ctx, s.server.URL(), adminUser, s.adminPassword, "-n", "nope")
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stdout).To(ContainSubstring("logging in to team 'nope'"))
		// admin is an admin, so fly looks the team up among all of them.
		Expect(res.Stderr).To(ContainSubstring("error: team 'nope' does not exist"), res.String())
		Expect(res.Stdout).NotTo(ContainSubstring("target saved"))
	})

	It("logs out: status then says logged out and the API wants a login again", func(ctx SpecContext) {
		f := newFly("bye")
		login(ctx, f, s.server, adminUser, s.adminPassword)

		res := succeed(ctx, f, "logout")
		Expect(res.Stdout).To(Equal("logged out of target: bye\n"))

		res = run(ctx, f, "status")
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("logged out"))

		// A missing token: 401, and fly says how to log in.
		expectNotAuthorized(run(ctx, f, "workers"), "bye")
		expectNotAuthorized(run(ctx, f, "execute", "-c", shTask("true")), "bye")
	})

	It("shows the logged-in user's teams and roles (userinfo)", func(ctx SpecContext) {
		res := succeed(ctx, s.adminFly, "userinfo")
		Expect(strings.Fields(res.Stdout)).To(Equal([]string{adminUser, "main/owner"}), res.String())

		res = succeed(ctx, s.adminFly, "userinfo", "--json")
		var info map[string]any
		Expect(json.Unmarshal([]byte(res.Stdout), &info)).To(Succeed(), res.String())
		Expect(info).To(HaveKeyWithValue("user_id", adminUser))
		Expect(info).To(HaveKeyWithValue("display_user_id", adminUser))
		Expect(info).To(HaveKeyWithValue("connector", "local"))
		Expect(info).To(HaveKeyWithValue("is_admin", true))
		Expect(info).To(HaveKeyWithValue("teams", map[string]any{"main": []any{"owner"}}))
	})
})

var _ = Describe("tokens", func() {
	It("refuses an expired token with 401, and fly says to log in again", func(ctx SpecContext) {
		srv := newServer(ctx, testenv.ATCConfig{TokenTTL: 2 * time.Second})
		f := newFly("short")
		login(ctx, f, srv, adminUser, s.adminPassword)
		token := flyrcToken(f)
		// Waits for the expiry on the server's own clock.
		Eventually(func() int {
			code, _ := call(ctx, http.MethodGet, srv.URL()+"/api/v1/workers", token, nil, nil)
			return code
		}).WithTimeout(15 * time.Second).WithPolling(200 * time.Millisecond).Should(Equal(http.StatusUnauthorized))

		expectNotAuthorized(run(ctx, f, "workers"), "short")
		res := run(ctx, f, "status")
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("please login again"), res.String())

		// A new login works again (login checks its token at once).
		login(ctx, f, srv, adminUser, s.adminPassword)
	})

	It("refuses a missing token with 401, and fly says to log in", func(ctx SpecContext) {
		f := newFly("none")
		login(ctx, f, s.server, adminUser, s.adminPassword)
		setFlyrcToken(f, "")

		expectNotAuthorized(run(ctx, f, "workers"), "none")
		expectNotAuthorized(run(ctx, f, "execute", "-c", shTask("true")), "none")
		res := run(ctx, f, "status")
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("logged out"))
	})

	It("refuses a tampered token with 401", func(ctx SpecContext) {
		// fly holds an opaque token; the signed one it stands for is the
		// login's id_token, which the API takes too.
		header, payload, sig := splitJWT(idToken(ctx, s.server, adminUser, s.adminPassword))
		// The same signature over claims that say something else.
		claims, err := base64.RawURLEncoding.DecodeString(payload)
		Expect(err).NotTo(HaveOccurred())
		forged := strings.Replace(string(claims), `"admin"`, `"alice"`, 1)
		Expect(forged).NotTo(Equal(string(claims)), "no \"admin\" in the token's claims: %s", claims)
		tampered := []string{
			header + "." + base64.RawURLEncoding.EncodeToString([]byte(forged)) + "." + sig,
			header + "." + payload + "." + flipMiddle(sig),
			header + "." + payload + ".",
		}
		// An opaque token with one byte changed is no token.
		opaque := []byte(s.adminToken)
		opaque[3] ^= 1
		tampered = append(tampered, string(opaque))
		for _, token := range tampered {
			code, body := call(ctx, http.MethodGet, s.server.URL()+"/api/v1/workers", token, nil, nil)
			Expect(code).To(Equal(http.StatusUnauthorized), body)
		}

		// fly with a tampered token in its ~/.flyrc is told to log in.
		f := newFly("tampered")
		login(ctx, f, s.server, adminUser, s.adminPassword)
		setFlyrcToken(f, tampered[0])
		expectNotAuthorized(run(ctx, f, "workers"), "tampered")
	})

	It("answers 401 without a token where Concourse does", func(ctx SpecContext) {
		for _, r := range []struct{ method, path string }{
			{http.MethodGet, "/api/v1/workers"},
			{http.MethodGet, "/api/v1/teams/main/containers"},
			{http.MethodPost, "/api/v1/teams/main/builds"},
			{http.MethodGet, "/api/v1/user"},
			{http.MethodGet, "/api/v1/teams/main/volumes"},
			{http.MethodPut, "/api/v1/teams/main"},
		} {
			code, body := call(ctx, r.method, s.server.URL()+r.path, "", strings.NewReader("{}"), nil)
			Expect(code).To(Equal(http.StatusUnauthorized), "%s %s: %s", r.method, r.path, body)
		}
		// What needs no token.
		code, body := call(ctx, http.MethodGet, s.server.URL()+"/api/v1/info", "", nil, nil)
		Expect(code).To(Equal(http.StatusOK), body)
	})

	It("lists no build to an anonymous caller while builds exist", func(ctx SpecContext) {
		startBuild(ctx, s.adminFly, "true") // at least one build exists
		code, body := call(ctx, http.MethodGet, s.server.URL()+"/api/v1/builds", s.adminToken, nil, nil)
		Expect(code).To(Equal(http.StatusOK))
		Expect(body).NotTo(MatchJSON(`[]`))

		code, body = call(ctx, http.MethodGet, s.server.URL()+"/api/v1/builds", "", nil, nil)
		Expect(code).To(Equal(http.StatusOK))
		Expect(body).To(MatchJSON(`[]`))
		code, body = call(ctx, http.MethodGet, s.server.URL()+"/api/v1/teams", "", nil, nil)
		Expect(code).To(Equal(http.StatusOK))
		Expect(body).To(MatchJSON(`[]`))
	})

	It("refuses a cross-origin POST with 403, even with a good token", func(ctx SpecContext) {
		before := latestBuildID(ctx)
		evil := http.Header{"Origin": {"https://evil.example"}, "Content-Type": {"application/json"}}
		plan := `{"id":"1","task":{"name":"one-off","config":{"platform":"linux",` +
			`"image_resource":{"type":"registry-image","source":{"repository":"busybox"}},"run":{"path":"true"}}}}`
		code, body := call(ctx, http.MethodPost, s.server.URL()+"/api/v1/teams/main/builds", s.adminToken, strings.NewReader(plan), evil)
		Expect(code).To(Equal(http.StatusForbidden), body)
		Expect(latestBuildID(ctx)).To(Equal(before), "the refused request created a build")

		// The same request from the server's own origin gets through.
		own := http.Header{"Origin": {s.server.URL()}, "Content-Type": {"application/json"}}
		code, body = call(ctx, http.MethodPost, s.server.URL()+"/api/v1/teams/main/builds", s.adminToken, strings.NewReader(plan), own)
		Expect(code).To(Equal(http.StatusCreated), body)
	})
})

// flyrcToken is the token value in f's ~/.flyrc.
func flyrcToken(f *testenv.Fly) string {
	GinkgoHelper()
	b, err := os.ReadFile(filepath.Join(f.Home, ".flyrc"))
	Expect(err).NotTo(HaveOccurred())
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "value: "); ok {
			return strings.Trim(v, `"'`)
		}
	}
	Fail("no token in ~/.flyrc:\n" + string(b))
	return ""
}

// setFlyrcToken replaces the token value in f's ~/.flyrc.
func setFlyrcToken(f *testenv.Fly, token string) {
	GinkgoHelper()
	rc := filepath.Join(f.Home, ".flyrc")
	b, err := os.ReadFile(rc)
	Expect(err).NotTo(HaveOccurred())
	changed := strings.Replace(string(b), flyrcToken(f), token, 1)
	Expect(changed).NotTo(Equal(string(b)))
	Expect(os.WriteFile(rc, []byte(changed), 0o600)).To(Succeed())
}

// idToken logs user in with the password grant and returns the signed
// token (id_token) behind the opaque access token fly keeps.
func idToken(ctx context.Context, srv *testenv.ATC, user, password string) string {
	GinkgoHelper()
	form := url.Values{"grant_type": {"password"}, "username": {user}, "password": {password}, "scope": {"openid profile email federated:id groups"}}
	code, body := call(ctx, http.MethodPost, srv.URL()+"/sky/issuer/token", "", strings.NewReader(form.Encode()), http.Header{
		"Content-Type": {"application/x-www-form-urlencoded"}, "Authorization": {"Basic Zmx5OlpteDU="}})
	Expect(code).To(Equal(http.StatusOK), body)
	var tok struct {
		AccessToken string `json:"access_token"`
		IDToken     string `json:"id_token"`
	}
	Expect(json.Unmarshal([]byte(body), &tok)).To(Succeed(), body)
	Expect(tok.IDToken).To(ContainSubstring("."), body)
	Expect(tok.AccessToken).NotTo(ContainSubstring("."), "the access token is opaque: %s", body)
	return tok.IDToken
}

func splitJWT(token string) (header, payload, sig string) {
	GinkgoHelper()
	parts := strings.Split(token, ".")
	Expect(parts).To(HaveLen(3), "not a JWT: %s", token)
	return parts[0], parts[1], parts[2]
}

// flipMiddle changes a base64url string's middle character (the last one
// may only carry padding bits).
func flipMiddle(s string) string {
	i := len(s) / 2
	c := byte('A')
	if s[i] == 'A' {
		c = 'B'
	}
	return s[:i] + string(c) + s[i+1:]
}
