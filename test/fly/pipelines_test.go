package fly_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/test/testenv"
)

// These specs manage pipelines, jobs and resources; none runs a build, so
// no step pod starts. Each works on pipelines (and teams) of its own, so
// they run in any order.

// pipelineYAML has vars for each of fly's ways to give them: -v greeting,
// -y count, -l (extra).
const pipelineYAML = `resources:
- name: repo
  type: mock
  source: {greeting: ((greeting)), count: ((count))}
- name: other
  type: mock
  source: {extra: ((extra))}
jobs:
- name: build
  plan:
  - get: repo
    trigger: true
  - task: unit
    config:
      platform: linux
      image_resource: {type: registry-image, source: {repository: busybox}}
      caches: [{path: cache}]
      run: {path: "true"}
- name: ship
  plan:
  - get: repo
    passed: [build]
  - put: other
`

// pipelineName is a fresh pipeline name.
func pipelineName(prefix string) string {
	return prefix + "-" + strings.ToLower(rand.Text()[:8])
}

// writeFile writes content into a fresh directory and returns its path.
func writeFile(name, content string) string {
	GinkgoHelper()
	p := filepath.Join(GinkgoT().TempDir(), name)
	Expect(os.WriteFile(p, []byte(content), 0o644)).To(Succeed())
	return p
}

// setPipeline sets pipelineYAML as name with greeting, non-interactively.
func setPipeline(ctx context.Context, f *testenv.Fly, name, greeting string, extra ...string) testenv.FlyResult {
	GinkgoHelper()
	vars := writeFile("vars.yml", "extra: from-file\n")
	args := append([]string{"set-pipeline", "-n", "-p", name, "-c", writeFile("pipeline.yml", pipelineYAML),
		"-v", "greeting=" + greeting, "-y", "count=3", "-l", vars}, extra...)
	return succeed(ctx, f, args...)
}

// flyPipeline is a row of `fly pipelines --json`.
type flyPipeline struct {
	ID       int    `json:"id"`
	Name     string `json:"name"`
	TeamName string `json:"team_name"`
	Paused   bool   `json:"paused"`
	PausedBy string `json:"paused_by"`
	Public   bool   `json:"public"`
}

// listPipelines runs `fly pipelines --json` with args and returns the rows
// named in names (every row if none), in the order listed.
func listPipelines(ctx context.Context, f *testenv.Fly, args []string, names ...string) []flyPipeline {
	GinkgoHelper()
	res := succeed(ctx, f, append([]string{"pipelines", "--json"}, args...)...)
	var all, out []flyPipeline
	Expect(json.Unmarshal([]byte(res.Stdout), &all)).To(Succeed(), res.String())
	for _, p := range all {
		if len(names) == 0 || slices.Contains(names, p.Name) {
			out = append(out, p)
		}
	}
	return out
}

func onePipeline(ctx context.Context, f *testenv.Fly, name string) flyPipeline {
	GinkgoHelper()
	ps := listPipelines(ctx, f, nil, name)
	Expect(ps).To(HaveLen(1))
	return ps[0]
}

// flyJob is a row of `fly jobs --json`.
type flyJob struct {
	Name          string `json:"name"`
	PipelineName  string `json:"pipeline_name"`
	TeamName      string `json:"team_name"`
	Paused        bool   `json:"paused"`
	PausedBy      string `json:"paused_by"`
	FinishedBuild any    `json:"finished_build"`
	Inputs        []struct {
		Name    string   `json:"name"`
		Passed  []string `json:"passed"`
		Trigger bool     `json:"trigger"`
	} `json:"inputs"`
	Outputs []struct {
		Name string `json:"name"`
	} `json:"outputs"`
}

// flyResource is a row of `fly resources --json`.
type flyResource struct {
	ID           int    `json:"id"` // only in the API's answer
	Name         string `json:"name"`
	Type         string `json:"type"`
	PipelineName string `json:"pipeline_name"`
	TeamName     string `json:"team_name"`
}

var _ = Describe("pipelines", func() {
	It("sets a pipeline with -v, -y and -l, shows it, and applies only changes (set-pipeline, get-pipeline)", func(ctx SpecContext) {
		name := pipelineName("set")
		res := setPipeline(ctx, s.adminFly, name, "hello")
		out := plain(res.Stdout)
		Expect(out).To(ContainSubstring("resource repo has been added"), res.String())
		Expect(out).To(ContainSubstring("job build has been added"), res.String())
		Expect(out).To(ContainSubstring("pipeline name: "+name), res.String())
		Expect(out).To(ContainSubstring("pipeline created!"), res.String())
		Expect(out).To(ContainSubstring("you can view your pipeline here: "+s.server.URL()+"/teams/main/pipelines/"+name), res.String())
		// New pipelines start paused, as in Concourse.
		Expect(out).To(ContainSubstring("the pipeline is currently paused"), res.String())
		Expect(out).To(ContainSubstring("unpause-pipeline -p "+name), res.String())
		Expect(onePipeline(ctx, s.adminFly, name).Paused).To(BeTrue())

		// fly filled the vars in; the server keeps what it was sent.
		res = succeed(ctx, s.adminFly, "get-pipeline", "-p", name)
		Expect(res.Stdout).To(ContainSubstring("greeting: hello"), res.String())
		Expect(res.Stdout).To(ContainSubstring("count: 3"), res.String())
		Expect(res.Stdout).To(ContainSubstring("extra: from-file"), res.String())
		Expect(res.Stdout).To(ContainSubstring("name: build"), res.String())

		res = succeed(ctx, s.adminFly, "get-pipeline", "-p", name, "-j")
		var cfg struct {
			Jobs []struct {
				Name string `json:"name"`
				Plan []map[string]any
			} `json:"jobs"`
			Resources []struct {
				Name   string         `json:"name"`
				Source map[string]any `json:"source"`
			} `json:"resources"`
		}
		Expect(json.Unmarshal([]byte(res.Stdout), &cfg)).To(Succeed(), res.String())
		Expect(cfg.Jobs).To(HaveLen(2))
		Expect(cfg.Jobs[0].Name).To(Equal("build"))
		Expect(cfg.Jobs[1].Plan[0]).To(HaveKeyWithValue("passed", []any{"build"}))
		Expect(cfg.Resources[0].Source).To(Equal(map[string]any{"greeting": "hello", "count": float64(3)}))

		// The same config again: what the server gave back is what fly
		// would send, so there is nothing to apply.
		res = setPipeline(ctx, s.adminFly, name, "hello")
		Expect(res.Stdout).To(ContainSubstring("no changes to apply"), res.String())

		res = setPipeline(ctx, s.adminFly, name, "bye")
		out = plain(res.Stdout)
		Expect(out).To(ContainSubstring("resource repo has changed"), res.String())
		Expect(out).NotTo(ContainSubstring("resource other has changed"), res.String())
		Expect(out).To(ContainSubstring("configuration updated"), res.String())
		Expect(succeed(ctx, s.adminFly, "get-pipeline", "-p", name).Stdout).To(ContainSubstring("greeting: bye"))
	})

	It("asks before applying, and applies nothing when told no (set-pipeline without -n)", func(ctx SpecContext) {
		name := pipelineName("ask")
		res := runCmd(ctx, s.adminFly, testenv.FlyCmd{
			Args:  []string{"set-pipeline", "-p", name, "-c", writeFile("p.yml", "jobs:\n- name: j\n  plan:\n  - task: t\n    file: x/t.yml\n")},
			Stdin: strings.NewReader("n\r"), // bubbletea's Enter is a carriage return
		})
		Expect(res.ExitCode).To(Equal(0), res.String())
		Expect(res.Stdout).To(ContainSubstring("apply configuration?"), res.String())
		Expect(res.Stdout).To(ContainSubstring("bailing out"), res.String())
		res = run(ctx, s.adminFly, "get-pipeline", "-p", name)
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("pipeline not found"), res.String())
	})

	It("refuses an invalid config with its errors and saves nothing", func(ctx SpecContext) {
		name := pipelineName("invalid")
		bad := writeFile("bad.yml", "jobs:\n- name: j\n  plan:\n  - get: nowhere\n")
		res := run(ctx, s.adminFly, "set-pipeline", "-n", "-p", name, "-c", bad)
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("invalid pipeline config"), res.String())
		Expect(res.Stderr).To(ContainSubstring(`unknown resource 'nowhere'`), res.String())
		res = run(ctx, s.adminFly, "get-pipeline", "-p", name)
		Expect(res.Stderr).To(ContainSubstring("pipeline not found"), res.String())

		// Over an existing pipeline: the old config stays.
		setPipeline(ctx, s.adminFly, name, "kept")
		unknownKey := writeFile("unknown.yml", "jobs:\n- name: j\n  colour: blue\n  plan: []\n")
		res = run(ctx, s.adminFly, "set-pipeline", "-n", "-p", name, "-c", unknownKey)
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("malformed config"), res.String())
		Expect(res.Stderr).To(ContainSubstring("colour"), res.String())
		res = run(ctx, s.adminFly, "set-pipeline", "-n", "-p", name, "-c", bad)
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(succeed(ctx, s.adminFly, "get-pipeline", "-p", name).Stdout).To(ContainSubstring("greeting: kept"))
		jobs := succeed(ctx, s.adminFly, "jobs", "-p", name, "--json")
		Expect(jobs.Stdout).To(ContainSubstring(`"build"`), jobs.String())
		Expect(jobs.Stdout).NotTo(ContainSubstring(`"j"`), jobs.String())
	})

	It("warns about a pipeline name that is not an identifier, and refuses one that cannot be a name", func(ctx SpecContext) {
		name := "Caps-" + pipelineName("warn")
		res := setPipeline(ctx, s.adminFly, name, "x")
		Expect(res.Stdout).To(ContainSubstring("pipeline created!"), res.String())
		Expect(res.Stderr).To(ContainSubstring("pipeline: '"+name+"' is not a valid identifier: must start with a lowercase letter or a number"), res.String())

		res = run(ctx, s.adminFly, "set-pipeline", "-n", "-p", "with space", "-c", writeFile("p.yml", pipelineYAML),
			"-v", "greeting=x", "-v", "count=1", "-v", "extra=y")
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring(`pipeline: "with space" is not a valid name`), res.String())
	})

	It("checks credentials with --check-creds: a missing var fails the save, present ones let it through", func(ctx SpecContext) {
		// A server of its own, whose team main reads Secrets in a namespace
		// of this spec's.
		prefix, removeCredNS, err := s.env.NewCredentialNamespace(ctx, s.ns, "main")
		DeferCleanup(removeCredNS)
		Expect(err).NotTo(HaveOccurred())
		srv := newServer(ctx, testenv.ATCConfig{CredentialNamespacePrefix: prefix})
		f := newFly("checkcreds")
		login(ctx, f, srv, adminUser, s.adminPassword)
		credNS := prefix + "main"
		name := pipelineName("creds")
		Expect(testenv.CreateSecret(ctx, s.env.Admin, credNS, "password", map[string]string{"value": "hunter2"})).To(Succeed())
		Expect(testenv.CreateSecret(ctx, s.env.Admin, credNS, name+".login", map[string]string{"user": "u"})).To(Succeed())
		config := writeFile("p.yml", `resources:
- name: r
  type: mock
  source: {password: ((password)), user: ((login.user))}
jobs:
- name: j
  plan:
  - get: r
  - task: t
    params: {TOKEN: ((token))}
    config:
      platform: linux
      image_resource: {type: mock, source: {mirror_self: true}}
      run: {path: "true"}
`)
		res := run(ctx, f, "set-pipeline", "-n", "--check-creds", "-p", name, "-c", config)
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("credential validation failed"), res.String())
		Expect(res.Stderr).To(ContainSubstring(`job "j" task "t" params: undefined vars: token`), res.String())
		Expect(res.Stderr).NotTo(ContainSubstring("hunter2"), res.String())
		Expect(run(ctx, f, "get-pipeline", "-p", name).Stderr).To(ContainSubstring("pipeline not found"))
		// Without the flag the vars are looked up when a build runs.
		Expect(run(ctx, f, "set-pipeline", "-n", "-p", pipelineName("unchecked"), "-c", config).ExitCode).To(Equal(0))

		Expect(testenv.CreateSecret(ctx, s.env.Admin, credNS, "token", map[string]string{"value": "t0k3n"})).To(Succeed())
		res = succeed(ctx, f, "set-pipeline", "-n", "--check-creds", "-p", name, "-c", config)
		Expect(res.Stdout).To(ContainSubstring("pipeline created!"), res.String())
		Expect(succeed(ctx, f, "get-pipeline", "-p", name).Stdout).To(ContainSubstring("((token))"))
	})

	It("refuses a save from a stale config version with 409 and keeps the newer config", func(ctx SpecContext) {
		name := pipelineName("stale")
		setPipeline(ctx, s.adminFly, name, "one")
		url := s.server.URL() + "/api/v1/teams/main/pipelines/" + name + "/config"
		get := func() (string, string) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			Expect(err).NotTo(HaveOccurred())
			req.Header.Set("Authorization", "Bearer "+s.adminToken)
			resp, err := http.DefaultClient.Do(req)
			Expect(err).NotTo(HaveOccurred())
			defer resp.Body.Close()
			Expect(resp.StatusCode).To(Equal(http.StatusOK))
			Expect(resp.Header.Get("Content-Type")).To(Equal("application/json"))
			var body struct {
				Config json.RawMessage `json:"config"`
			}
			Expect(json.NewDecoder(resp.Body).Decode(&body)).To(Succeed())
			return resp.Header.Get("X-Concourse-Config-Version"), string(body.Config)
		}
		version, _ := get()
		Expect(version).NotTo(BeEmpty())
		put := func(version, yaml string) (int, string) {
			return call(ctx, http.MethodPut, url, s.adminToken, strings.NewReader(yaml), http.Header{
				"Content-Type": {"application/x-yaml"}, "X-Concourse-Config-Version": {version}})
		}
		config := func(v string) string {
			return "resources: [{name: a, type: mock, source: {v: " + v + "}}]\njobs: [{name: j, plan: [{get: a}]}]\n"
		}
		code, body := put(version, config("first"))
		Expect(code).To(Equal(http.StatusOK), body)
		code, body = put(version, config("second"))
		Expect(code).To(Equal(http.StatusConflict), body)
		Expect(body).To(ContainSubstring("changed since"))
		newVersion, cfg := get()
		Expect(newVersion).NotTo(Equal(version))
		Expect(cfg).To(ContainSubstring("first"))
		Expect(cfg).NotTo(ContainSubstring("second"))

		code, body = call(ctx, http.MethodPut, url, s.adminToken, strings.NewReader("{}"), http.Header{
			"Content-Type": {"text/plain"}, "X-Concourse-Config-Version": {newVersion}})
		Expect(code).To(Equal(http.StatusUnsupportedMediaType), body)
	})

	It("pauses, exposes, hides, renames, orders and destroys pipelines", func(ctx SpecContext) {
		a, b := pipelineName("a"), pipelineName("b")
		setPipeline(ctx, s.adminFly, a, "x")
		setPipeline(ctx, s.adminFly, b, "x")

		Expect(succeed(ctx, s.adminFly, "unpause-pipeline", "-p", a).Stdout).To(ContainSubstring("unpaused '" + a + "'"))
		Expect(onePipeline(ctx, s.adminFly, a).Paused).To(BeFalse())
		Expect(succeed(ctx, s.adminFly, "pause-pipeline", "-p", a).Stdout).To(ContainSubstring("paused '" + a + "'"))
		p := onePipeline(ctx, s.adminFly, a)
		Expect(p.Paused).To(BeTrue())
		Expect(p.PausedBy).To(Equal(adminUser))
		res := run(ctx, s.adminFly, "pause-pipeline", "-p", "no-such-pipeline")
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("pipeline 'no-such-pipeline' not found"), res.String())

		// The table: paused and public columns.
		res = succeed(ctx, s.adminFly, "pipelines")
		Expect(res.Stdout).To(MatchRegexp(`(?m)^\d+\s+`+a+`\s+yes\s+no\s+`), res.String())

		// Exposed: anyone may read the pipeline, its jobs and resources,
		// but not its config.
		pipelineURL := s.server.URL() + "/api/v1/teams/main/pipelines/" + a
		code, body := call(ctx, http.MethodGet, pipelineURL, "", nil, nil)
		Expect(code).To(Equal(http.StatusUnauthorized), body)
		Expect(succeed(ctx, s.adminFly, "expose-pipeline", "-p", a).Stdout).To(ContainSubstring("exposed '" + a + "'"))
		Expect(onePipeline(ctx, s.adminFly, a).Public).To(BeTrue())
		for _, sub := range []string{"", "/jobs", "/resources", "/jobs/build", "/resources/repo"} {
			code, body = call(ctx, http.MethodGet, pipelineURL+sub, "", nil, nil)
			Expect(code).To(Equal(http.StatusOK), sub+": "+body)
		}
		code, body = call(ctx, http.MethodGet, pipelineURL+"/config", "", nil, nil)
		Expect(code).To(Equal(http.StatusUnauthorized), body)
		code, body = call(ctx, http.MethodGet, s.server.URL()+"/api/v1/teams/main/pipelines", "", nil, nil)
		Expect(code).To(Equal(http.StatusOK), body)
		Expect(body).To(ContainSubstring(`"`+a+`"`), body)
		Expect(body).NotTo(ContainSubstring(`"`+b+`"`), body)
		Expect(succeed(ctx, s.adminFly, "hide-pipeline", "-p", a).Stdout).To(ContainSubstring("hid '" + a + "'"))
		code, _ = call(ctx, http.MethodGet, pipelineURL, "", nil, nil)
		Expect(code).To(Equal(http.StatusUnauthorized))

		// Ordering: the named ones first.
		res = succeed(ctx, s.adminFly, "order-pipelines", "-p", b, "-p", a)
		Expect(res.Stdout).To(ContainSubstring("ordered pipelines"), res.String())
		var order []string
		for _, p := range listPipelines(ctx, s.adminFly, nil) {
			order = append(order, p.Name)
		}
		Expect(order[:2]).To(Equal([]string{b, a}))
		res = run(ctx, s.adminFly, "order-pipelines", "-p", "no-such-pipeline")
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("no-such-pipeline"), res.String())

		// Rename: a taken name is refused; then the pipeline moves.
		res = run(ctx, s.adminFly, "rename-pipeline", "-o", a, "-n", b)
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("already has a pipeline"), res.String())
		renamed := a + "-renamed"
		res = succeed(ctx, s.adminFly, "rename-pipeline", "-o", a, "-n", renamed)
		Expect(res.Stdout).To(ContainSubstring("pipeline successfully renamed to '"+renamed+"'"), res.String())
		Expect(succeed(ctx, s.adminFly, "get-pipeline", "-p", renamed).Stdout).To(ContainSubstring("name: build"))
		Expect(run(ctx, s.adminFly, "get-pipeline", "-p", a).Stderr).To(ContainSubstring("pipeline not found"))

		res = succeed(ctx, s.adminFly, "destroy-pipeline", "-n", "-p", renamed)
		Expect(res.Stdout).To(ContainSubstring("`"+renamed+"` deleted"), res.String())
		Expect(listPipelines(ctx, s.adminFly, nil, renamed)).To(BeEmpty())
		res = succeed(ctx, s.adminFly, "destroy-pipeline", "-n", "-p", renamed)
		Expect(res.Stdout).To(ContainSubstring("`"+renamed+"` does not exist"), res.String())
	})

	It("lists and pauses jobs, and lists resources (jobs, pause-job, unpause-job, resources)", func(ctx SpecContext) {
		name := pipelineName("jobs")
		setPipeline(ctx, s.adminFly, name, "x")

		res := succeed(ctx, s.adminFly, "jobs", "-p", name)
		Expect(res.Stdout).To(MatchRegexp(`(?m)^build\s+no\s+n/a\s+n/a\s*$`), res.String())
		Expect(res.Stdout).To(MatchRegexp(`(?m)^ship\s+no\s+n/a\s+n/a\s*$`), res.String())

		Expect(succeed(ctx, s.adminFly, "pause-job", "-j", name+"/ship").Stdout).To(ContainSubstring("paused 'ship'"))
		var jobs []flyJob
		res = succeed(ctx, s.adminFly, "jobs", "-p", name, "--json")
		Expect(json.Unmarshal([]byte(res.Stdout), &jobs)).To(Succeed(), res.String())
		Expect(jobs).To(HaveLen(2))
		Expect(jobs[0].Name).To(Equal("build"))
		Expect(jobs[0].Paused).To(BeFalse())
		Expect(jobs[0].FinishedBuild).To(BeNil())
		Expect(jobs[0].Inputs).To(HaveLen(1))
		Expect(jobs[0].Inputs[0].Trigger).To(BeTrue())
		Expect(jobs[1].Name).To(Equal("ship"))
		Expect(jobs[1].Paused).To(BeTrue())
		Expect(jobs[1].PausedBy).To(Equal(adminUser))
		Expect(jobs[1].PipelineName).To(Equal(name))
		Expect(jobs[1].TeamName).To(Equal("main"))
		Expect(jobs[1].Inputs[0].Passed).To(Equal([]string{"build"}))
		Expect(jobs[1].Outputs[0].Name).To(Equal("other"))

		Expect(succeed(ctx, s.adminFly, "unpause-job", "-j", name+"/ship").Stdout).To(ContainSubstring("unpaused 'ship'"))
		res = succeed(ctx, s.adminFly, "jobs", "-p", name)
		Expect(res.Stdout).To(MatchRegexp(`(?m)^ship\s+no\s+`), res.String())

		res = run(ctx, s.adminFly, "jobs", "-p", "no-such-pipeline")
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("pipeline 'no-such-pipeline' not found in team 'main'"), res.String())
		res = run(ctx, s.adminFly, "resources", "-p", "no-such-pipeline")
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("pipeline 'no-such-pipeline' not found in team 'main'"), res.String())

		res = run(ctx, s.adminFly, "pause-job", "-j", name+"/nope")
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring(name+"/nope not found on team main"), res.String())

		var resources []flyResource
		res = succeed(ctx, s.adminFly, "resources", "-p", name, "--json")
		Expect(json.Unmarshal([]byte(res.Stdout), &resources)).To(Succeed(), res.String())
		Expect(resources).To(HaveLen(2))
		Expect(resources[0].Name).To(Equal("repo"))
		Expect(resources[0].Type).To(Equal("mock"))
		Expect(resources[0].PipelineName).To(Equal(name))
		Expect(resources[1].Name).To(Equal("other"))
		res = succeed(ctx, s.adminFly, "resources", "-p", name)
		Expect(res.Stdout).To(MatchRegexp(`(?m)^repo\s+mock\s+n/a\s+n/a\s*$`), res.String())

		// A job removed from the config is gone from the list.
		succeed(ctx, s.adminFly, "set-pipeline", "-n", "-p", name, "-c", writeFile("one.yml",
			"resources: [{name: repo, type: mock, source: {}}]\njobs:\n- name: build\n  plan: [{get: repo}]\n"))
		res = succeed(ctx, s.adminFly, "jobs", "-p", name, "--json")
		Expect(json.Unmarshal([]byte(res.Stdout), &jobs)).To(Succeed(), res.String())
		Expect(jobs).To(HaveLen(1))
	})

	It("keeps the task caches of each instance of an instanced pipeline apart (a build's cache, clear-task-cache, destroy-pipeline) and intercepts one instance's step", func(ctx SpecContext) {
		name := pipelineName("inst-caches")
		a, b := name+"/branch:a", name+"/branch:b"
		config := writeFile("caches.yml", `jobs:
- name: build
  plan:
  - task: unit
    config:
      platform: linux
      image_resource: {type: registry-image, source: {repository: busybox}}
      caches: [{path: cache}]
      run: {path: sh, args: [-c, "date > cache/stamp"]}
`)
		succeed(ctx, s.adminFly, "set-pipeline", "-n", "-p", name, "-c", config, "-i", "branch=a")
		succeed(ctx, s.adminFly, "set-pipeline", "-n", "-p", name, "-c", config, "-i", "branch=b")
		store := sharedBucket(ctx)
		exists := func(k string) bool {
			_, err := store.Stat(ctx, k)
			return err == nil
		}
		segA := blobstore.TaskCachePipeline(name, map[string]any{"branch": "a"})
		segB := blobstore.TaskCachePipeline(name, map[string]any{"branch": "b"})
		Expect(segA).NotTo(Equal(segB))

		// A build of instance a stores its cache under a's key only.
		succeed(ctx, s.adminFly, "unpause-pipeline", "-p", a)
		res := succeed(ctx, s.adminFly, "trigger-job", "-j", a+"/build", "-w")
		cacheA := blobstore.TaskCacheKey("main", segA, "build", "unit", "cache")
		Expect(exists(cacheA)).To(BeTrue(), res.String())
		Expect(exists(blobstore.TaskCacheKey("main", name, "build", "unit", "cache"))).To(BeFalse())
		cacheB := blobstore.TaskCacheKey("main", segB, "build", "unit", "cache")
		Expect(exists(cacheB)).To(BeFalse())
		succeed(ctx, s.adminFly, "unpause-pipeline", "-p", b)
		res = succeed(ctx, s.adminFly, "trigger-job", "-j", b+"/build", "-w")
		Expect(exists(cacheB)).To(BeTrue(), res.String())

		// fly intercept -j names one instance's job: its step's pod only
		// (two would make fly ask which one).
		res = run(ctx, s.adminFly, "intercept", "-j", a+"/build", "-s", "unit", "--", "cat", "cache/stamp")
		Expect(res.ExitCode).To(Equal(0), res.String())
		Expect(res.Stdout).NotTo(BeEmpty(), res.String())

		// Clearing or destroying one instance leaves the other's.
		res = succeed(ctx, s.adminFly, "clear-task-cache", "-n", "-j", a+"/build", "-s", "unit")
		Expect(res.Stdout).To(ContainSubstring("1 caches removed"), res.String())
		Expect(exists(cacheA)).To(BeFalse())
		Expect(exists(cacheB)).To(BeTrue())
		_, err := store.Put(ctx, cacheA, strings.NewReader("cache"), 5, blobstore.PutOptions{})
		Expect(err).NotTo(HaveOccurred())
		succeed(ctx, s.adminFly, "destroy-pipeline", "-n", "-p", a)
		Expect(exists(cacheA)).To(BeFalse())
		Expect(exists(cacheB)).To(BeTrue())
		succeed(ctx, s.adminFly, "destroy-pipeline", "-n", "-p", b)
		Expect(exists(cacheB)).To(BeFalse())
	})

	It("clears a job's task caches and a resource's caches (clear-task-cache, clear-resource-cache)", func(ctx SpecContext) {
		name := pipelineName("caches")
		setPipeline(ctx, s.adminFly, name, "x")
		store := sharedBucket(ctx)
		keys := []string{
			blobstore.TaskCacheKey("main", name, "build", "unit", "cache"),
			blobstore.TaskCacheKey("main", name, "build", "unit", "other/dir"),
			blobstore.TaskCacheKey("main", name, "build", "unit2", "cache"),
			blobstore.TaskCacheKey("main", name, "ship", "unit", "cache"),
		}
		for _, k := range keys {
			_, err := store.Put(ctx, k, strings.NewReader("cache"), 5, blobstore.PutOptions{})
			Expect(err).NotTo(HaveOccurred())
		}
		exists := func(k string) bool {
			_, err := store.Stat(ctx, k)
			return err == nil
		}

		res := succeed(ctx, s.adminFly, "clear-task-cache", "-n", "-j", name+"/build", "-s", "unit", "--cache-path", "cache")
		Expect(res.Stdout).To(ContainSubstring("1 caches removed"), res.String())
		Expect(exists(keys[0])).To(BeFalse())
		Expect(exists(keys[1])).To(BeTrue())
		res = succeed(ctx, s.adminFly, "clear-task-cache", "-n", "-j", name+"/build", "-s", "unit")
		Expect(res.Stdout).To(ContainSubstring("1 caches removed"), res.String())
		Expect(exists(keys[1])).To(BeFalse())
		// Another step's and another job's caches stay.
		Expect(exists(keys[2])).To(BeTrue())
		Expect(exists(keys[3])).To(BeTrue())
		res = succeed(ctx, s.adminFly, "clear-task-cache", "-n", "-j", name+"/build", "-s", "unit")
		Expect(res.Stdout).To(ContainSubstring("0 caches removed"), res.String())

		res = run(ctx, s.adminFly, "clear-task-cache", "-n", "-j", name+"/nope", "-s", "unit")
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stdout+res.Stderr).To(ContainSubstring("Job with name 'nope' not found"), res.String())
		res = run(ctx, s.adminFly, "clear-task-cache", "-n", "-j", name+"/build", "-s", "..")
		Expect(res.ExitCode).To(Equal(1), res.String())
		res = run(ctx, s.adminFly, "clear-task-cache", "-n", "-j", name+"/build", "-s", "unit", "--cache-path", "../../ship/unit/cache")
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stdout+res.Stderr).To(ContainSubstring("inside the task's working directory"), res.String())
		Expect(exists(keys[3])).To(BeTrue())

		// Renaming moves the caches with the pipeline; destroying it takes
		// them with it.
		renamed := name + "-renamed"
		succeed(ctx, s.adminFly, "rename-pipeline", "-o", name, "-n", renamed)
		moved := []string{blobstore.TaskCacheKey("main", renamed, "build", "unit2", "cache"),
			blobstore.TaskCacheKey("main", renamed, "ship", "unit", "cache")}
		Expect(exists(keys[2]) || exists(keys[3])).To(BeFalse())
		Expect(exists(moved[0]) && exists(moved[1])).To(BeTrue())
		res = succeed(ctx, s.adminFly, "destroy-pipeline", "-n", "-p", renamed)
		Expect(exists(moved[0]) || exists(moved[1])).To(BeFalse(), res.String())

		// Resource caches: rows of the database the getter writes.
		name = pipelineName("rcache")
		setPipeline(ctx, s.adminFly, name, "x")
		// fly leaves the id out of what it prints; the API has it.
		code, body := call(ctx, http.MethodGet, s.server.URL()+"/api/v1/teams/main/pipelines/"+name+"/resources/repo", s.adminToken, nil, nil)
		Expect(code).To(Equal(http.StatusOK), body)
		var repo flyResource
		Expect(json.Unmarshal([]byte(body), &repo)).To(Succeed(), body)
		Expect(repo.ID).NotTo(BeZero(), body)
		conn, err := pgx.Connect(ctx, s.server.Config.Database)
		Expect(err).NotTo(HaveOccurred())
		defer conn.Close(context.Background())
		for i := range 3 {
			_, err := conn.Exec(ctx, `INSERT INTO resource_caches (key, team_id, resource_id, artifact, digest, version)
				SELECT $1, id, $2, 'artifacts/x', 'sha256:x', '{}' FROM teams WHERE name = 'main'`,
				name+"-"+strconv.Itoa(i), repo.ID)
			Expect(err).NotTo(HaveOccurred())
		}
		// clear-resource-cache always asks.
		res = runCmd(ctx, s.adminFly, testenv.FlyCmd{Args: []string{"clear-resource-cache", "-r", name + "/repo"}, Stdin: strings.NewReader("y\r")})
		Expect(res.ExitCode).To(Equal(0), res.String())
		Expect(res.Stdout).To(ContainSubstring("3 caches removed"), res.String())
		res = runCmd(ctx, s.adminFly, testenv.FlyCmd{Args: []string{"clear-resource-cache", "-r", name + "/repo"}, Stdin: strings.NewReader("y\r")})
		Expect(res.Stdout).To(ContainSubstring("0 caches removed"), res.String())
		// -v: that version's caches only (flycmds_test clears one that exists).
		res = runCmd(ctx, s.adminFly, testenv.FlyCmd{Args: []string{"clear-resource-cache", "-r", name + "/repo", "-v", "ref:abc"}, Stdin: strings.NewReader("y\r")})
		Expect(res.ExitCode).To(Equal(0), res.String())
		Expect(res.Stdout).To(ContainSubstring("0 caches removed"), res.String())
		res = runCmd(ctx, s.adminFly, testenv.FlyCmd{Args: []string{"clear-resource-cache", "-r", name + "/nope"}, Stdin: strings.NewReader("y\r")})
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("Resource with name 'nope' not found"), res.String())
	})

	It("keeps each team's pipelines to itself, except exposed ones (pipelines -a)", func(ctx SpecContext) {
		team := pipelineName("team")
		succeed(ctx, s.adminFly, "set-team", "-n", team, "--local-user", aliceUser, "--non-interactive")
		alice := newFly(team)
		login(ctx, alice, s.server, aliceUser, s.alicePassword, "-n", team)

		mine, hidden, exposed := pipelineName("alice"), pipelineName("hidden"), pipelineName("exposed")
		res := setPipeline(ctx, alice, mine, "x")
		Expect(res.Stdout).To(ContainSubstring("/teams/"+team+"/pipelines/"+mine), res.String())
		setPipeline(ctx, s.adminFly, hidden, "x")
		setPipeline(ctx, s.adminFly, exposed, "x")
		succeed(ctx, s.adminFly, "expose-pipeline", "-p", exposed)

		var names []string
		for _, p := range listPipelines(ctx, alice, []string{"-a"}) {
			names = append(names, p.TeamName+"/"+p.Name)
		}
		Expect(names).To(ContainElements(team+"/"+mine, "main/"+exposed))
		Expect(names).NotTo(ContainElement("main/" + hidden))
		Expect(listPipelines(ctx, alice, nil)).To(HaveLen(1))

		// The admin sees every team's.
		var all []string
		for _, p := range listPipelines(ctx, s.adminFly, []string{"-a"}) {
			all = append(all, p.TeamName+"/"+p.Name)
		}
		Expect(all).To(ContainElements(team+"/"+mine, "main/"+hidden, "main/"+exposed))

		token, err := s.server.Login(ctx, aliceUser, s.alicePassword)
		Expect(err).NotTo(HaveOccurred())
		base := s.server.URL() + "/api/v1/teams/main/pipelines/"
		for _, req := range []struct{ method, path string }{
			{http.MethodGet, hidden}, {http.MethodGet, hidden + "/config"}, {http.MethodGet, hidden + "/jobs"},
			{http.MethodGet, "no-such-pipeline"}, {http.MethodGet, exposed + "/config"},
			{http.MethodPut, exposed + "/pause"}, {http.MethodDelete, exposed},
		} {
			code, body := call(ctx, req.method, base+req.path, token, nil, nil)
			Expect(code).To(Equal(http.StatusForbidden), req.method+" "+req.path+": "+body)
		}
		code, body := call(ctx, http.MethodGet, base+exposed+"/jobs", token, nil, nil)
		Expect(code).To(Equal(http.StatusOK), body)
		res = run(ctx, alice, "set-pipeline", "-n", "--team", "main", "-p", "intruder", "-c", writeFile("p.yml", "resources: []\n"))
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(listPipelines(ctx, s.adminFly, nil, "intruder")).To(BeEmpty())
	})
})
