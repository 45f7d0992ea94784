package fly_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/test/testenv"
)

// Authentication that holds (issue 18 item 5), on a server of its own: the
// specs log users out, change their teams, restart the server without one of
// its users and finally throttle 127.0.0.1's logins, none of which the shared
// server's other specs should feel. Ordered: they share the server, and the
// throttling comes last.
var _ = Describe("authentication that holds", Ordered, func() {
	const (
		team     = "authn"
		password = "authn-password"
		lou      = "lou" // logs out
		mem      = "mem" // loses the membership
		gone     = "gone"
		guessed  = "guessed" // whose password is guessed at
	)
	var (
		srv   *testenv.ATC
		admin *testenv.Fly
	)
	BeforeAll(func(ctx SpecContext) {
		var users []string
		for _, u := range []string{lou, mem, gone, guessed} {
			users = append(users, u+":"+password)
		}
		srv = newServer(ctx, testenv.ATCConfig{LocalUsers: users})
		admin = newFly("authn-admin")
		login(ctx, admin, srv, adminUser, s.adminPassword)
		succeed(ctx, admin, "set-team", "-n", team, "--non-interactive",
			"--local-user", lou, "--local-user", mem, "--local-user", gone, "--local-user", guessed)
	})

	memberFly := func(ctx context.Context, user string) *testenv.Fly {
		GinkgoHelper()
		f := newFly(user)
		login(ctx, f, srv, user, password, "-n", team)
		return f
	}

	It("logout through the API ends the token and every copy of it at once (fly curl /sky/logout)", func(ctx SpecContext) {
		f := memberFly(ctx, lou)
		token := flyrcToken(f)
		other := newFly("lou-elsewhere") // the same user on another machine
		login(ctx, other, srv, lou, password, "-n", team)
		succeed(ctx, f, "containers")

		res := succeed(ctx, f, "curl", "/sky/logout", "--", "-sS", "-w", `%{http_code}`)
		Expect(res.Stdout).To(Equal("200"), res.String())

		// fly still holds the token, the server no longer takes it: 401,
		// and fly says to log in again.
		expectNotAuthorized(run(ctx, f, "containers"), lou)
		expectNotAuthorized(run(ctx, other, "containers"), "lou-elsewhere")
		code, body := call(ctx, http.MethodGet, srv.URL()+"/api/v1/user", token, nil, nil)
		Expect(code).To(Equal(http.StatusUnauthorized), body)
		Expect(body).To(ContainSubstring("token revoked"))

		// A new login works, and another user's session was not touched.
		login(ctx, f, srv, lou, password, "-n", team)
		succeed(ctx, f, "containers")
		succeed(ctx, admin, "teams")
	})

	It("a membership removed by set-team takes effect at once, on the token already held", func(ctx SpecContext) {
		f := memberFly(ctx, mem)
		succeed(ctx, f, "containers")
		res := succeed(ctx, f, "userinfo")
		Expect(strings.Fields(res.Stdout)).To(Equal([]string{mem, team + "/owner"}), res.String())

		succeed(ctx, admin, "set-team", "-n", team, "--non-interactive",
			"--local-user", lou, "--local-user", gone, "--local-user", guessed)

		res = run(ctx, f, "containers")
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("forbidden"), res.String())
		res = run(ctx, f, "execute", "-c", shTask("true"))
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		res = succeed(ctx, f, "userinfo")
		Expect(strings.Fields(res.Stdout)).To(Equal([]string{mem}), res.String())
	})

	It("refuses a Host that is not --external-url's, before anything else (DNS rebinding), but not /healthz", func(ctx SpecContext) {
		port := strings.TrimPrefix(srv.URL(), "http://127.0.0.1:")
		forged := "rebind.attacker.example:" + port
		res := succeed(ctx, admin, "curl", "/api/v1/teams", "--", "-sS", "-H", "Host: "+forged, "-w", `\n%{http_code}`)
		Expect(lines(res.Stdout)).To(HaveExactElements(
			`host "`+forged+`" is not this server: reach it at `+srv.URL()+` (its --external-url)`, "", "400"), res.String())

		// With an Origin to match the forged Host, a state-changing request
		// would pass the cross-origin check; it never gets there.
		res = succeed(ctx, admin, "curl", "/api/v1/teams/main/builds", "--", "-sS", "-X", "POST",
			"-H", "Host: "+forged, "-H", "Origin: http://"+forged, "-d", "{}", "-w", `\n%{http_code}`)
		Expect(lines(res.Stdout)).To(HaveExactElements(ContainSubstring("is not this server"), "", "400"), res.String())

		// The server's own address and its health check still answer.
		res = succeed(ctx, admin, "curl", "/api/v1/teams", "--", "-sS", "-o", "/dev/null", "-w", `%{http_code}`)
		Expect(res.Stdout).To(Equal("200"), res.String())
		code, body := callWithHost(ctx, srv.URL()+"/healthz", forged)
		Expect(code).To(Equal(http.StatusOK), body)
	})

	It("answers anonymous callers the same for a team that does not exist as for one they cannot see", func(ctx SpecContext) {
		// The status and body, the team's name in it made TEAM.
		answer := func(teamName, probe, token string) string {
			code, body := call(ctx, http.MethodGet, srv.URL()+"/api/v1/teams/"+teamName+probe, token, nil, nil)
			return strconv.Itoa(code) + " " + strings.ReplaceAll(body, teamName, "TEAM")
		}
		for _, probe := range []string{"/pipelines", "/pipelines/p", "/pipelines/p/jobs", "/pipelines/p/resources", "/builds"} {
			existing := answer(team, probe, "")
			Expect(answer("no-such-team", probe, "")).To(Equal(existing), probe)
			Expect(answer("main", probe, "")).To(Equal(existing), probe)
		}
		Expect(answer("no-such-team", "/pipelines", "")).To(Equal("200 []\n"))

		// Nor can a user of another team tell.
		f := memberFly(ctx, lou)
		token := flyrcToken(f)
		for _, probe := range []string{"", "/pipelines", "/pipelines/p", "/pipelines/p/jobs", "/builds"} {
			Expect(answer("no-such-team", probe, token)).To(Equal(answer("main", probe, token)), probe)
		}
	})

	It("a local user removed from --add-local-user can no longer log in, and its token stops working", func(ctx SpecContext) {
		f := memberFly(ctx, gone)
		succeed(ctx, f, "containers")

		srv.Config.LocalUsers = slices.DeleteFunc(slices.Clone(srv.Config.LocalUsers), func(u string) bool {
			return strings.HasPrefix(u, gone+":")
		})
		Expect(srv.Restart(ctx)).To(Succeed())

		expectNotAuthorized(run(ctx, f, "containers"), gone)
		res, err := f.Login(ctx, srv.URL(), gone, password, "-n", team)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("Invalid username or password"), res.String())
		Expect(srv.Log()).To(ContainSubstring(`removed local users no longer given by --add-local-user" users=[gone]`))
		// The others are still there.
		login(ctx, newFly("still-here"), srv, lou, password, "-n", team)
	})

	It("throttles failed logins per user name at an address, then per address: 429 with Retry-After, even for the right password", func(ctx SpecContext) {
		// Each failed fly login is two attempts (fly retries with the
		// client credentials in the form): 10 failures are 5 logins.
		f := newFly("guess")
		for i := range 5 {
			res, err := f.Login(ctx, srv.URL(), guessed, "wrong-"+strconv.Itoa(i), "-n", team)
			Expect(err).NotTo(HaveOccurred())
			Expect(res.ExitCode).To(Equal(1), res.String())
			Expect(res.Stderr).To(ContainSubstring("Invalid username or password"), res.String())
		}
		res, err := f.Login(ctx, srv.URL(), guessed, password, "-n", team)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("too many failed logins"), res.String())
		Expect(res.Stdout).NotTo(ContainSubstring("target saved"))

		code, retry, body := tokenRequest(ctx, srv, guessed, password)
		Expect(code).To(Equal(http.StatusTooManyRequests), body)
		secs, err := strconv.Atoi(retry)
		Expect(err).NotTo(HaveOccurred(), "Retry-After %q", retry)
		Expect(secs).To(BeNumerically(">=", 1))
		Expect(secs).To(BeNumerically("<=", 6))

		// Other users from this address go on, until the address has
		// failed too often whatever the names.
		var names []string
		for i := 0; ; i++ {
			Expect(i).To(BeNumerically("<", 60), "never throttled by address: %v", names)
			name := "spray-" + strconv.Itoa(i)
			code, retry, body := tokenRequest(ctx, srv, name, "guess")
			if code == http.StatusTooManyRequests {
				Expect(retry).NotTo(BeEmpty())
				Expect(len(names)).To(BeNumerically(">=", 20), "throttled after %d names: %s", len(names), body)
				break
			}
			Expect(code).To(Equal(http.StatusUnauthorized), body)
			names = append(names, name)
		}
	})
})

// tokenRequest is fly's password grant, for the status and Retry-After fly
// does not print.
func tokenRequest(ctx context.Context, srv *testenv.ATC, user, password string) (code int, retryAfter, body string) {
	GinkgoHelper()
	form := url.Values{"grant_type": {"password"}, "username": {user}, "password": {password}, "scope": {"openid profile email federated:id groups"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL()+"/sky/issuer/token", strings.NewReader(form.Encode()))
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth("fly", "Zmx5")
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b := new(strings.Builder)
	_, _ = io.Copy(b, resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), b.String()
}

// callWithHost GETs url with the Host header set to host.
func callWithHost(ctx context.Context, url, host string) (int, string) {
	GinkgoHelper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	Expect(err).NotTo(HaveOccurred())
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b := new(strings.Builder)
	_, _ = io.Copy(b, resp.Body)
	return resp.StatusCode, b.String()
}
