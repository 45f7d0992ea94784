package redteam_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// call sends method path with token (none if empty) and body, and returns
// the status and the body.
func call(ctx context.Context, method, path, token, body string) (int, string) {
	GinkgoHelper()
	req, err := http.NewRequestWithContext(ctx, method, server.URL()+path, strings.NewReader(body))
	Expect(err).NotTo(HaveOccurred())
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/x-yaml")
	}
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

func token(ctx context.Context, user string) string {
	GinkgoHelper()
	t, err := server.Login(ctx, user, passwords[user])
	Expect(err).NotTo(HaveOccurred())
	return t
}

var _ = Describe("teams", func() {
	// The attacks of "Speak Concourse" and the hardening issue, replayed:
	// a user of another team reads, writes and aborts nothing of the main
	// team, and learns nothing of it from the answers; a token forged from
	// one's own says nothing the server believes.
	It("keep a user of another team out of everything of theirs, and out of what their answers say", func(ctx SpecContext) {
		suffix := strings.ToLower(rand8())
		pipeline, secret := "private-"+suffix, "private-secret-"+suffix
		cfg := writeFile(fmt.Sprintf("jobs:\n- name: j\n  plan:\n  - task: t\n    config:\n      platform: linux\n"+
			"      image_resource: {type: registry-image, source: {repository: busybox}}\n      params: {SECRET: %q}\n"+
			"      run: {path: sh, args: [-c, 'echo $SECRET']}\n", secret))
		run(ctx, member, "set-pipeline", "-n", "-p", pipeline, "-c", cfg)
		run(ctx, member, "unpause-pipeline", "-p", pipeline)
		DeferCleanup(func(ctx context.Context) { run(ctx, admin, "destroy-pipeline", "-n", "-p", pipeline) })
		res := run(ctx, member, "trigger-job", "-w", "-j", pipeline+"/j")
		Expect(res.Stdout).To(ContainSubstring("succeeded"), res.String())
		var builds []struct {
			ID int64 `json:"id"`
		}
		Expect(json.Unmarshal([]byte(run(ctx, member, "builds", "-j", pipeline+"/j", "--json").Stdout), &builds)).To(Succeed())
		Expect(builds).NotTo(BeEmpty())
		build := fmt.Sprint(builds[0].ID)
		var handle string
		for _, c := range containers(ctx, member) {
			if c.PipelineName == pipeline {
				handle = c.ID
			}
		}

		tok := token(ctx, outsider)
		p := "/api/v1/teams/main/pipelines/" + pipeline
		for _, r := range []struct{ method, path, body string }{
			{"GET", "/api/v1/teams/main/pipelines", ""},
			{"GET", p, ""},
			{"GET", p + "/config", ""},
			{"GET", p + "/jobs", ""},
			{"GET", p + "/jobs/j/builds", ""},
			{"GET", "/api/v1/builds/" + build, ""},
			{"GET", "/api/v1/builds/" + build + "/events", ""},
			{"GET", "/api/v1/builds/" + build + "/plan", ""},
			{"GET", "/api/v1/builds/" + build + "/resources", ""},
			{"GET", "/api/v1/teams/main/containers", ""},
			{"GET", "/api/v1/containers/" + handle, ""},
			{"GET", "/api/v1/builds", ""},
			{"GET", "/api/v1/pipelines", ""},
			{"PUT", p + "/config", "jobs: [{name: x, plan: [{task: t, config: {platform: linux, run: {path: 'true'}}}]}]"},
			{"POST", p + "/jobs/j/builds", ""},
			{"PUT", "/api/v1/builds/" + build + "/abort", ""},
			{"PUT", p + "/pause", ""},
			{"PUT", p + "/hide", ""},
			{"DELETE", p, ""},
			{"PUT", "/api/v1/teams/main", `{"auth":{"owner":{"users":["local:` + outsider + `"]}}}`},
		} {
			code, body := call(ctx, r.method, r.path, tok, r.body)
			what := r.method + " " + r.path
			if code == http.StatusOK {
				// A list the outsider may read holds nothing of main's.
				Expect(r.method).To(Equal("GET"), "%s: %d %s", what, code, body)
				Expect(strings.TrimSpace(body)).To(Equal("[]"), "%s: %s", what, body)
				continue
			}
			Expect(code).To(BeElementOf(http.StatusForbidden, http.StatusNotFound), "%s: %s", what, body)
			Expect(body).NotTo(ContainSubstring(pipeline), what)
			Expect(body).NotTo(ContainSubstring(secret), what)
			if !strings.HasPrefix(r.path, "/api/v1/teams/main") {
				// An ID alone must not map to its team's name.
				Expect(body).NotTo(ContainSubstring(`"main"`), "%s names the team: %s", what, body)
				Expect(body).NotTo(MatchRegexp(`team .?main`), "%s names the team: %s", what, body)
			}
		}
		// Nothing changed: the pipeline is there, unpaused, and its build
		// succeeded; the outsider is still no owner of main.
		status, body := call(ctx, "GET", p, token(ctx, member), "")
		Expect(status).To(Equal(http.StatusOK), body)
		Expect(body).To(ContainSubstring(`"paused":false`))
		Expect(run(ctx, member, "builds", "-j", pipeline+"/j").Stdout).To(ContainSubstring("succeeded"))
		res, err := flyAs[outsider].Run(ctx, "pipelines", "--team", "main")
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Stdout + res.Stderr).NotTo(ContainSubstring(pipeline))
	})

	It("believe no token forged from one's own, and say nothing of why", func(ctx SpecContext) {
		// The login's id_token is the signed token the API also takes.
		idToken := signedToken(ctx, outsider)
		parts := strings.Split(idToken, ".")
		Expect(parts).To(HaveLen(3))
		claims, err := base64.RawURLEncoding.DecodeString(parts[1])
		Expect(err).NotTo(HaveOccurred())
		// The outsider's claims made to say main's owner.
		var m map[string]any
		Expect(json.Unmarshal(claims, &m)).To(Succeed())
		m["teams"] = map[string]any{"main": []string{"owner"}}
		m["is_admin"], m["exp"] = true, time.Now().Add(time.Hour).Unix()
		forgedClaims, err := json.Marshal(m)
		Expect(err).NotTo(HaveOccurred())
		none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`))
		forged := base64.RawURLEncoding.EncodeToString(forgedClaims)
		for name, t := range map[string]string{
			"claims changed, signature kept": parts[0] + "." + forged + "." + parts[2],
			"alg none":                       none + "." + forged + ".",
			"no signature":                   parts[0] + "." + forged + ".",
			"garbage":                        "not-a-token",
		} {
			// As Concourse, a token that is no token is no login: a list
			// anyone may read answers as to an anonymous caller.
			code, body := call(ctx, "GET", "/api/v1/teams/main/pipelines", t, "")
			Expect(code).To(BeElementOf(http.StatusOK, http.StatusUnauthorized), "%s: %s", name, body)
			if code == http.StatusOK {
				Expect(strings.TrimSpace(body)).To(Equal("[]"), name)
			}
			for _, r := range []struct{ method, path, body string }{
				{"GET", "/api/v1/teams/main/containers", ""},
				{"PUT", "/api/v1/teams/evil", `{"auth":{"owner":{"users":["local:` + outsider + `"]}}}`},
			} {
				code, body = call(ctx, r.method, r.path, t, r.body)
				Expect(code).To(Equal(http.StatusUnauthorized), "%s: %s %s: %s", name, r.method, r.path, body)
				// What a client needs, not which library refused what.
				Expect(strings.ToLower(body)).NotTo(MatchRegexp(`jws|jwt|signature|algorithm|malformed|segment|base64|json`), "%s: the 401 says why: %s", name, body)
			}
		}
		res, err := flyAs[admin].Run(ctx, "teams")
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Stdout).NotTo(ContainSubstring("evil"))
	})
})

// signedToken is the login's id_token: the signed JWT behind fly's opaque
// token.
func signedToken(ctx context.Context, user string) string {
	GinkgoHelper()
	status, body := tokenFrom(ctx, "127.0.0.1", user, passwords[user])
	Expect(status).To(Equal(http.StatusOK), body)
	var out struct {
		IDToken string `json:"id_token"`
	}
	Expect(json.Unmarshal([]byte(body), &out)).To(Succeed())
	Expect(out.IDToken).NotTo(BeEmpty())
	return out.IDToken
}
