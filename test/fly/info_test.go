package fly_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/test/testenv"
)

var _ = Describe("fly workers, containers, volumes, curl, sync", func() {
	It("lists the server's two workers, the tagged one with its tag (workers)", func(ctx SpecContext) {
		res := succeed(ctx, s.adminFly, "workers")
		Expect(plain(res.Stdout)).To(MatchRegexp(`(?m)^`+sharedWorker+`\s+\d+\s+linux\s+none\s+none\s+running\s+\S+\s+\S+\s*$`), res.String())
		Expect(plain(res.Stdout)).To(MatchRegexp(`(?m)^`+taggedWorker+`\s+\d+\s+linux\s+`+workerTag+`\s+none\s+running\s+\S+\s+\S+\s*$`), res.String())

		res = succeed(ctx, s.adminFly, "workers", "--json")
		var workers []struct {
			Name     string   `json:"name"`
			Platform string   `json:"platform"`
			Tags     []string `json:"tags"`
			State    string   `json:"state"`
		}
		Expect(json.Unmarshal([]byte(res.Stdout), &workers)).To(Succeed(), res.String())
		Expect(workers).To(HaveLen(2))
		Expect(workers[0].Name).To(Equal(sharedWorker))
		Expect(workers[0].Tags).To(BeEmpty())
		Expect(workers[1].Name).To(Equal(taggedWorker))
		Expect(workers[1].Tags).To(Equal([]string{workerTag}))
		Expect(workers[0].State).To(Equal("running"))
		Expect(workers[1].State).To(Equal("running"))
	})

	It("lists a build's step pod (containers)", func(ctx SpecContext) {
		id := buildID(succeed(ctx, s.adminFly, "execute", "-c", shTask("true")).Stdout)
		cs := containersOf(ctx, id)
		Expect(cs).To(HaveLen(1))
		Expect(cs[0].WorkerName).To(Equal(sharedWorker))
		Expect(cs[0].Type).To(Equal("task"))
		Expect(cs[0].StepName).To(Equal("one-off"))

		res := succeed(ctx, s.adminFly, "containers")
		n := strconv.Itoa(id)
		// handle, worker, pipeline, job, build #, build id, type, name, attempt
		Expect(plain(res.Stdout)).To(MatchRegexp(`(?m)^`+cs[0].ID+`\s+`+sharedWorker+`\s+none\s+none\s+`+n+`\s+`+n+`\s+task\s+one-off\s+n/a\s*$`), res.String())

		// fly workers counts the worker's pods as fly containers lists them:
		// the finished build's kept pod too, as Concourse counts a kept
		// container.
		res = succeed(ctx, s.adminFly, "workers", "--json")
		var workers []struct {
			Name       string `json:"name"`
			Containers int    `json:"active_containers"`
		}
		Expect(json.Unmarshal([]byte(res.Stdout), &workers)).To(Succeed(), res.String())
		Expect(workers).To(ContainElement(And(HaveField("Name", sharedWorker), HaveField("Containers", BeNumerically(">=", 1)))), res.String())
	})

	It("lists an output as a volume (volumes)", func(ctx SpecContext) {
		type volume struct {
			ID         string `json:"id"`
			WorkerName string `json:"worker_name"`
			Type       string `json:"type"`
		}
		volumes := func() []volume {
			res := succeed(ctx, s.adminFly, "volumes", "--json")
			var vs []volume
			Expect(json.Unmarshal([]byte(res.Stdout), &vs)).To(Succeed(), res.String())
			return vs
		}
		before := volumes()
		succeed(ctx, s.adminFly, "execute", "-o", "out="+GinkgoT().TempDir(), "-c", taskFile(`outputs: [{name: out}]
run: {path: sh, args: [-c, "echo x > out/x"]}
`))
		after := volumes()
		Expect(len(after)).To(BeNumerically(">", len(before)), "no new volume for the output")
		var added volume
		for _, v := range after {
			if !slices.Contains(before, v) {
				added = v
			}
		}
		Expect(added.WorkerName).To(Equal(sharedWorker))

		res := succeed(ctx, s.adminFly, "volumes")
		// handle, worker, type, identifier
		Expect(plain(res.Stdout)).To(MatchRegexp(`(?m)^`+regexp.QuoteMeta(added.ID)+`\s+`+sharedWorker+`\s+`+added.Type+`\s+\S+\s*$`), res.String())
	})

	It("lists a team's task caches and resource caches as volumes, and another team none of them (volumes)", func(ctx SpecContext) {
		name := pipelineName("volumes")
		succeed(ctx, s.adminFly, "set-pipeline", "-n", "-p", name, "-c", writeFile("p.yml", `resources:
- name: repo
  type: mock
  check_every: never
  source: {}
jobs:
- name: j
  plan:
  - get: repo
  - task: t
    config:
      platform: linux
      image_resource: {type: registry-image, source: {repository: busybox}}
      caches: [{path: cache}]
      run: {path: sh, args: [-c, "echo x > cache/x"]}
`))
		// The version names the pipeline: no other spec's cache has it.
		addVersion(ctx, name, "repo", map[string]string{"version": name})
		succeed(ctx, s.adminFly, "unpause-pipeline", "-p", name)
		succeed(ctx, s.adminFly, "trigger-job", "-j", name+"/j", "-w")

		type volume struct {
			ID           string `json:"id"`
			WorkerName   string `json:"worker_name"`
			Type         string `json:"type"`
			PipelineName string `json:"pipeline_name"`
			JobName      string `json:"job_name"`
			StepName     string `json:"step_name"`
			ResourceType *struct {
				Version map[string]string `json:"version"`
			} `json:"resource_type"`
		}
		volumes := func(f *testenv.Fly) []volume {
			res := succeed(ctx, f, "volumes", "--json")
			var vs []volume
			Expect(json.Unmarshal([]byte(res.Stdout), &vs)).To(Succeed(), res.String())
			return vs
		}
		var cache, fetched volume
		for _, v := range volumes(s.adminFly) {
			switch {
			case v.Type == "task-cache" && v.PipelineName == name:
				cache = v
			case v.Type == "resource" && v.ResourceType != nil && v.ResourceType.Version["version"] == name:
				fetched = v
			}
		}
		Expect(cache.ID).NotTo(BeEmpty(), "no task cache among the volumes")
		Expect(cache.JobName).To(Equal("j"))
		Expect(cache.StepName).To(Equal("t"))
		Expect(cache.WorkerName).To(Equal(sharedWorker))
		Expect(fetched.ID).NotTo(BeEmpty(), "no resource cache among the volumes")
		Expect(fetched.PipelineName).To(Equal(name))
		Expect(fetched.StepName).To(Equal("repo"))

		// handle, worker, type, identifier: a task cache is pipeline/job/step,
		// a resource cache its version (with -d its type), as Concourse's.
		out := plain(succeed(ctx, s.adminFly, "volumes").Stdout)
		Expect(out).To(MatchRegexp(`(?m)^%s\s+%s\s+task-cache\s+%s/j/t\s*$`, cache.ID, sharedWorker, regexp.QuoteMeta(name)), out)
		Expect(out).To(MatchRegexp(`(?m)^%s\s+%s\s+resource\s+version:%s\s*$`, fetched.ID, sharedWorker, regexp.QuoteMeta(name)), out)
		out = plain(succeed(ctx, s.adminFly, "volumes", "-d").Stdout)
		Expect(out).To(MatchRegexp(`(?m)^%s\s+%s\s+resource\s+name:mock\b`, fetched.ID, sharedWorker), out)

		// Another team's member sees that team's volumes only.
		team := pipelineName("vols")
		succeed(ctx, s.adminFly, "set-team", "-n", team, "--local-user", aliceUser, "--non-interactive")
		DeferCleanup(func(ctx context.Context) { _, _ = s.adminFly.Run(ctx, "destroy-team", "-n", team, "--non-interactive") })
		alice := newFly(team)
		login(ctx, alice, s.server, aliceUser, s.alicePassword, "-n", team)
		Expect(volumes(alice)).To(BeEmpty())
		succeed(ctx, alice, "execute", "-c", taskFile(`caches: [{path: cache}]
run: {path: sh, args: [-c, "echo x > cache/x"]}
`))
		theirs := volumes(alice)
		Expect(theirs).To(HaveLen(1))
		Expect(theirs[0].Type).To(Equal("task-cache"))
		Expect(theirs[0].StepName).To(Equal("one-off"))
		Expect(volumes(s.adminFly)).NotTo(ContainElement(theirs[0]))
	})

	It("names a check's container once, by its resource, as Concourse's fly shows it (containers)", func(ctx SpecContext) {
		name := pipelineName("check-name")
		// Left paused: the one check is the spec's.
		succeed(ctx, s.adminFly, "set-pipeline", "-n", "-p", name, "-c", writeFile("p.yml",
			"resources: [{name: r, type: mock, check_every: never, source: {}}]\njobs: [{name: j, plan: [{get: r}]}]\n"))
		res := run(ctx, s.adminFly, "check-resource", "-r", name+"/r")
		m := regexp.MustCompile(`in build (\d+)`).FindStringSubmatch(res.Stdout)
		Expect(m).NotTo(BeNil(), res.String())

		res = succeed(ctx, s.adminFly, "containers", "--json")
		var cs []map[string]any
		Expect(json.Unmarshal([]byte(res.Stdout), &cs)).To(Succeed(), res.String())
		var check map[string]any
		for _, c := range cs {
			if c["pipeline_name"] == name && c["type"] == "check" {
				check = c
			}
		}
		Expect(check).NotTo(BeNil(), "no check container of %s: %s", name, res.Stdout)
		Expect(check).To(HaveKeyWithValue("step_name", "r"))
		Expect(check).To(HaveKeyWithValue("build_name", "check"))
		// fly prints step_name+resource_name: Concourse sends no resource_name.
		Expect(check).NotTo(HaveKey("resource_name"))

		// handle, worker, pipeline, job, build #, build id, type, name, attempt
		out := plain(succeed(ctx, s.adminFly, "containers").Stdout)
		Expect(out).To(MatchRegexp(`(?m)^%s\s+\S+\s+%s\s+none\s+check\s+%s\s+check\s+r\s+n/a\s*$`, check["id"], regexp.QuoteMeta(name), m[1]), out)
	})

	It("calls the API with the target's token (curl)", func(ctx SpecContext) {
		res := succeed(ctx, s.adminFly, "curl", "/api/v1/info", "--", "-sS")
		var info map[string]any
		Expect(json.Unmarshal([]byte(res.Stdout), &info)).To(Succeed(), res.String())
		Expect(info).To(HaveKeyWithValue("version", "8.2.5"))
		Expect(info).To(HaveKeyWithValue("worker_version", "2.5"))

		// The token goes along: a route that needs one answers.
		res = succeed(ctx, s.adminFly, "curl", "/api/v1/user", "--", "-sS", "-w", `\n%{http_code}`)
		Expect(res.Stdout).To(HaveSuffix("\n200"), res.String())
	})

	It("reports a version this fly accepts, without a mismatch warning", func(ctx SpecContext) {
		code, body := call(ctx, http.MethodGet, s.server.URL()+"/api/v1/info", "", nil, nil)
		Expect(code).To(Equal(http.StatusOK))
		Expect(body).To(ContainSubstring(`"version":"8.2.5"`))
		for _, cmd := range [][]string{{"workers"}, {"builds"}, {"teams"}, {"containers"}} {
			res := succeed(ctx, s.adminFly, cmd...)
			Expect(res.Stderr).NotTo(ContainSubstring("out of sync"), res.String())
			Expect(res.Stderr).NotTo(ContainSubstring("WARNING"), res.String())
		}
		res := succeed(ctx, s.adminFly, "sync")
		Expect(res.Stdout).To(Equal("version 8.2.5 already matches; skipping\n"))
	})

	It("fails fly sync --force clearly and leaves fly alone", func(ctx SpecContext) {
		// A copy: a sync that worked would replace the binary it runs from.
		bin := filepath.Join(GinkgoT().TempDir(), "fly")
		orig, err := os.ReadFile(s.flyBin)
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(bin, orig, 0o755)).To(Succeed())
		f := testenv.NewFly(bin, s.adminFly.Home, s.adminFly.Target)
		f.Log = GinkgoWriter

		res := run(ctx, f, "sync", "--force")
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(strings.ToLower(res.Stderr)).To(ContainSubstring("does not distribute fly"), res.String())
		after, err := os.ReadFile(bin)
		Expect(err).NotTo(HaveOccurred())
		Expect(after).To(Equal(orig), "fly sync replaced the binary")
	})
})
