package fly_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/test/testenv"
)

// The rest of fly 8.2.5's commands (issue 20 §1), on the shared server.
// Each spec uses teams and pipelines of its own; the one that runs jobs
// pauses the shared scheduler for a moment, and unpauses it however it ends.

// sharedDB is a connection to the shared server's database, for what no
// fly command can set up (a resource's versions without a check pod).
func sharedDB(ctx context.Context) *pgx.Conn {
	GinkgoHelper()
	conn, err := pgx.Connect(ctx, s.server.Config.Database)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func(ctx context.Context) { _ = conn.Close(ctx) })
	return conn
}

// addVersion gives a pipeline's resource a version, as a check would.
func addVersion(ctx context.Context, pipeline, resource string, version map[string]string) {
	GinkgoHelper()
	v, err := json.Marshal(version)
	Expect(err).NotTo(HaveOccurred())
	tag, err := sharedDB(ctx).Exec(ctx, `
		INSERT INTO resource_versions (resource_id, config_hash, version, version_hash, check_order)
		SELECT r.id, r.config_hash, $3::text::jsonb, md5($3::text), 1 FROM resources r JOIN pipelines p ON p.id = r.pipeline_id
		JOIN teams t ON t.id = p.team_id WHERE t.name = 'main' AND p.name = $1 AND r.name = $2`, pipeline, resource, string(v))
	Expect(err).NotTo(HaveOccurred())
	Expect(tag.RowsAffected()).To(BeEquivalentTo(1))
}

var _ = Describe("the rest of fly's commands", func() {
	It("renames and destroys a team (rename-team, destroy-team)", func(ctx SpecContext) {
		old, renamed := pipelineName("doomed"), pipelineName("renamed")
		succeed(ctx, s.adminFly, "set-team", "-n", old, "--local-user", aliceUser, "--non-interactive")
		res := succeed(ctx, s.adminFly, "rename-team", "-o", old, "-n", renamed)
		Expect(res.Stdout).To(Equal("Team successfully renamed to " + renamed + "\n"))
		teams := strings.Fields(succeed(ctx, s.adminFly, "teams").Stdout)
		Expect(teams).To(ContainElement(renamed))
		Expect(teams).NotTo(ContainElement(old))
		res = run(ctx, s.adminFly, "rename-team", "-o", old, "-n", "x")
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("Team '" + old + "' not found"))

		// A pipeline of the team goes with it.
		succeed(ctx, s.adminFly, "set-pipeline", "-n", "--team", renamed, "-p", "p", "-c", writeFile("p.yml", pipelineYAML),
			"-v", "greeting=hi", "-y", "count=1", "-v", "extra=x")
		Expect(succeed(ctx, s.adminFly, "pipelines", "-a").Stdout).To(ContainSubstring(renamed))
		res = succeed(ctx, s.adminFly, "destroy-team", "-n", renamed, "--non-interactive")
		Expect(res.Stdout).To(ContainSubstring("`" + renamed + "` deleted"))
		Expect(strings.Fields(succeed(ctx, s.adminFly, "teams").Stdout)).NotTo(ContainElement(renamed))
		Expect(succeed(ctx, s.adminFly, "pipelines", "-a").Stdout).NotTo(ContainSubstring(renamed))

		// The admin team cannot go: fly explains its 403.
		res = run(ctx, s.adminFly, "destroy-team", "-n", "main", "--non-interactive")
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(plain(res.Stdout)).To(ContainSubstring("could not destroy `main`"))
	})

	It("archives a pipeline, and set-pipeline unarchives it paused (archive-pipeline, pipelines --include-archived)", func(ctx SpecContext) {
		name := pipelineName("archived")
		setPipeline(ctx, s.adminFly, name, "hi")
		succeed(ctx, s.adminFly, "unpause-pipeline", "-p", name)
		res := succeed(ctx, s.adminFly, "archive-pipeline", "-p", name, "-n")
		Expect(res.Stdout).To(ContainSubstring("archived '" + name + "'"))
		Expect(succeed(ctx, s.adminFly, "pipelines").Stdout).NotTo(ContainSubstring(name))
		Expect(plain(succeed(ctx, s.adminFly, "pipelines", "--include-archived").Stdout)).To(MatchRegexp(`(?m)^\d+\s+%s\s+yes\s+no\s+yes\s`, regexp.QuoteMeta(name)))

		setPipeline(ctx, s.adminFly, name, "again")
		Expect(plain(succeed(ctx, s.adminFly, "pipelines", "--include-archived").Stdout)).To(MatchRegexp(`(?m)^\d+\s+%s\s+yes\s+no\s+no\s`, regexp.QuoteMeta(name)))
		res = run(ctx, s.adminFly, "archive-pipeline", "-p", "ghost-pipeline", "-n")
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("pipeline 'ghost-pipeline' not found"))
	})

	It("clears a resource's versions and a resource type's (clear-versions -r, --resource-type)", func(ctx SpecContext) {
		name := pipelineName("versions")
		cfg := `resource_types:
- name: custom
  type: registry-image
  source: {repository: busybox}
resources:
- name: repo
  type: mock
  check_every: never
  source: {}
jobs:
- name: j
  plan:
  - get: repo
`
		succeed(ctx, s.adminFly, "set-pipeline", "-n", "-p", name, "-c", writeFile("p.yml", cfg))
		addVersion(ctx, name, "repo", map[string]string{"version": "v1"})
		Expect(plain(succeed(ctx, s.adminFly, "resource-versions", "-r", name+"/repo").Stdout)).To(ContainSubstring("version:v1"))

		res := succeed(ctx, s.adminFly, "clear-versions", "--resource", name+"/repo", "-n")
		Expect(res.Stdout).To(Equal("1 versions removed\n"))
		Expect(strings.TrimSpace(succeed(ctx, s.adminFly, "resource-versions", "-r", name+"/repo").Stdout)).To(BeEmpty())

		// The type's check runs as a build fly follows.
		res = succeed(ctx, s.adminFly, "check-resource-type", "-r", name+"/custom")
		Expect(plain(res.Stdout)).To(MatchRegexp(`^checking %s/custom in build \d+\n`, regexp.QuoteMeta(name)))
		Expect(plain(res.Stdout)).To(HaveSuffix("succeeded\n"))
		res = run(ctx, s.adminFly, "check-resource-type", "-r", name+"/ghost")
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("resource-type 'ghost' not found"))

		res = succeed(ctx, s.adminFly, "clear-versions", "--resource-type", name+"/custom", "-n")
		Expect(res.Stdout).To(Equal("0 versions removed\n"))
		res = run(ctx, s.adminFly, "clear-versions", "--resource-type", name+"/ghost", "-n")
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("resource type 'ghost' is not found"))
	})

	It("sets, shows and clears the wall (set-wall, get-wall, clear-wall)", func(ctx SpecContext) {
		res := succeed(ctx, s.adminFly, "set-wall", "-m", "upgrade at noon", "--ttl", "1h")
		Expect(res.Stdout).To(Equal("Wall message set successfully\nMessage will expire in 1h0m0s\n"))
		res = succeed(ctx, s.adminFly, "get-wall")
		Expect(res.Stdout).To(MatchRegexp(`^Wall Message: upgrade at noon\nExpires in: (59m\d+s|1h0m0s)\n$`))
		succeed(ctx, s.adminFly, "set-wall", "-m", "no end")
		Expect(succeed(ctx, s.adminFly, "get-wall").Stdout).To(Equal("Wall Message: no end\nNo expiration set\n"))
		Expect(succeed(ctx, s.adminFly, "clear-wall").Stdout).To(Equal("Wall message cleared successfully\n"))
		Expect(succeed(ctx, s.adminFly, "get-wall").Stdout).To(Equal("No wall message is currently set\n"))
	})

	It("lists active users and shows the token's expiry (active-users, targets)", func(ctx SpecContext) {
		res := succeed(ctx, s.adminFly, "active-users")
		Expect(plain(res.Stdout)).To(MatchRegexp(`(?m)^admin\s+local\s+` + time.Now().Format(time.DateOnly) + `\s*$`))
		res = succeed(ctx, s.adminFly, "active-users", "--since", time.Now().AddDate(0, 0, -1).Format(time.DateOnly), "--json")
		Expect(res.Stdout).To(ContainSubstring(`"username": "admin"`))

		// fly reads the expiry out of the access token it holds.
		res = succeed(ctx, s.adminFly, "targets")
		Expect(res.Stdout).NotTo(ContainSubstring("n/a"), res.String())
		Expect(plain(res.Stdout)).To(MatchRegexp(`(?m)^porter\s+http://\S+\s+main\s+\w{3}, \d{2} \w{3} \d{4} \d{2}:\d{2}:\d{2} UTC\s*$`))
	})

	It("answers the other reads, and fly's local commands work beside it (get-team, paused-pipelines, paused-jobs, checklist, validate-pipeline, format-pipeline, edit-target, delete-target, completion, help)", func(ctx SpecContext) {
		res := succeed(ctx, s.adminFly, "get-team", "-n", "main")
		Expect(plain(res.Stdout)).To(MatchRegexp(`(?m)^name/role\s+users\s+groups\s*$|(?m)^main/owner\s+local:admin\s+none\s*$`))
		name := pipelineName("paused")
		setPipeline(ctx, s.adminFly, name, "hi")
		succeed(ctx, s.adminFly, "pause-job", "-j", name+"/ship")
		Expect(succeed(ctx, s.adminFly, "paused-pipelines").Stdout).To(ContainSubstring(name))
		out := plain(succeed(ctx, s.adminFly, "paused-jobs", "-p", name).Stdout)
		Expect(out).To(ContainSubstring("ship"))
		Expect(out).NotTo(ContainSubstring("build"))
		res = succeed(ctx, s.adminFly, "checklist", "-p", name)
		Expect(res.Stdout).To(ContainSubstring("build: concourse.check " + s.server.URL() + " main " + name + " build"))

		cfg := writeFile("p.yml", "jobs:\n- name: j\n  plan:\n  - task: t\n    file: x/t.yml\n")
		Expect(succeed(ctx, s.adminFly, "validate-pipeline", "-c", cfg).Stdout).To(ContainSubstring("looks good"))
		Expect(succeed(ctx, s.adminFly, "format-pipeline", "-c", cfg).Stdout).To(ContainSubstring("- name: j"))
		Expect(succeed(ctx, s.adminFly, "completion", "--shell", "bash").Stdout).To(ContainSubstring("complete"))
		Expect(run(ctx, s.adminFly, "help").Stdout).To(ContainSubstring("Available commands"))

		f := newFly("edited")
		login(ctx, f, s.server, adminUser, s.adminPassword)
		Expect(succeed(ctx, f, "edit-target", "--target-name", "renamed-target").Stdout).To(Equal("Updated target: edited\n"))
		Expect(succeed(ctx, f, "targets").Stdout).To(ContainSubstring("renamed-target"))
		f.Target = "renamed-target"
		Expect(succeed(ctx, f, "delete-target").Stdout).To(Equal("deleted target: renamed-target\n"))
		Expect(succeed(ctx, f, "targets").Stdout).NotTo(ContainSubstring("renamed-target"))
	})

	It("says which worker it does not know (land-worker, prune-worker)", func(ctx SpecContext) {
		for _, cmd := range []string{"land-worker", "prune-worker"} {
			res := run(ctx, s.adminFly, cmd, "-w", "ghost-worker")
			Expect(res.ExitCode).To(Equal(1), res.String())
			Expect(res.Stderr).To(ContainSubstring("worker 'ghost-worker' not found"), res.String())
		}
	})
})

// Ordered: the jobs' builds run once, and the specs read them.
var _ = Describe("fly's commands around jobs' builds", Ordered, func() {
	var name string
	var since time.Time

	// twoJobs have a step of the same name: intercept -j must pick the
	// job's own.
	const twoJobs = `resources:
- name: repo
  type: mock
  check_every: never
  source: {}
jobs:
- name: a
  plan:
  - get: repo
  - task: t
    config:
      platform: linux
      image_resource: {type: registry-image, source: {repository: busybox}}
      run: {path: sh, args: [-c, "echo job-a > marker.txt"]}
- name: b
  plan:
  - task: t
    config:
      platform: linux
      image_resource: {type: registry-image, source: {repository: busybox}}
      run: {path: sh, args: [-c, "echo job-b > marker.txt"]}
`

	BeforeAll(func(ctx SpecContext) {
		since = time.Now().Add(-time.Second)
		name = pipelineName("jobs")
		succeed(ctx, s.adminFly, "set-pipeline", "-n", "-p", name, "-c", writeFile("p.yml", twoJobs))
		addVersion(ctx, name, "repo", map[string]string{"version": "v1"})
		succeed(ctx, s.adminFly, "unpause-pipeline", "-p", name)
	})

	It("pauses the scheduler, so a triggered build waits until it is unpaused (pause-component, get-components, unpause-component, schedule-job)", func(ctx SpecContext) {
		Expect(succeed(ctx, s.adminFly, "pause-component", "-n", "scheduler").Stdout).To(Equal("paused 'scheduler'\n"))
		DeferCleanup(func(ctx context.Context) { _, _ = s.adminFly.Run(ctx, "unpause-component", "-a") })
		out := plain(succeed(ctx, s.adminFly, "get-components").Stdout)
		Expect(out).To(MatchRegexp(`(?m)^scheduler\s+1s\s+.*\s+true\s*$`))
		Expect(out).To(MatchRegexp(`(?m)^scanner\s+1s\s+.*\s+false\s*$`))
		Expect(out).To(MatchRegexp(`(?m)^collector\s+`))

		Expect(succeed(ctx, s.adminFly, "trigger-job", "-j", name+"/a").Stdout).To(Equal("started " + name + "/a #1\n"))
		Expect(succeed(ctx, s.adminFly, "trigger-job", "-j", name+"/b").Stdout).To(Equal("started " + name + "/b #1\n"))
		Consistently(func() string {
			return plain(succeed(ctx, s.adminFly, "builds", "-j", name+"/a").Stdout)
		}).WithTimeout(3 * time.Second).WithPolling(time.Second).Should(MatchRegexp(`\s+pending\s`))

		Expect(succeed(ctx, s.adminFly, "unpause-component", "-n", "scheduler").Stdout).To(Equal("unpaused 'scheduler'\n"))
		Expect(succeed(ctx, s.adminFly, "schedule-job", "-j", name+"/a").Stdout).To(Equal("scheduled 'a'\n"))
		for _, j := range []string{"a", "b"} {
			Eventually(func() string {
				return plain(succeed(ctx, s.adminFly, "builds", "-j", name+"/"+j).Stdout)
			}).WithTimeout(2*time.Minute).WithPolling(time.Second).Should(MatchRegexp(`\s+succeeded\s`), j)
		}
		res := run(ctx, s.adminFly, "pause-component", "-n", "ghost")
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("component 'ghost' not found"))
	})

	It("lists a pipeline's builds, and builds by start time (builds -p, --since, --until)", func(ctx SpecContext) {
		out := plain(succeed(ctx, s.adminFly, "builds", "-p", name).Stdout)
		rows := strings.Split(strings.TrimSpace(out), "\n")
		Expect(rows).To(HaveLen(2), out)
		Expect(out).To(MatchRegexp(`(?m)^\d+\s+%s/a/1\s+succeeded\s`, regexp.QuoteMeta(name)))
		Expect(out).To(MatchRegexp(`(?m)^\d+\s+%s/b/1\s+succeeded\s`, regexp.QuoteMeta(name)))

		layout := "2006-01-02 15:04:05"
		out = plain(succeed(ctx, s.adminFly, "builds", "--since", since.Format(layout), "-c", "1000").Stdout)
		Expect(out).To(ContainSubstring(name + "/a/1"))
		Expect(out).To(ContainSubstring(name + "/b/1"))
		out = plain(succeed(ctx, s.adminFly, "builds", "--until", since.Format(layout), "-c", "1000").Stdout)
		Expect(out).NotTo(ContainSubstring(name + "/"))
		out = plain(succeed(ctx, s.adminFly, "builds", "-j", name+"/a", "--since", time.Now().Add(time.Hour).Format(layout)).Stdout)
		Expect(strings.TrimSpace(out)).To(BeEmpty())
	})

	It("names the pipeline and job of a job build's containers (containers)", func(ctx SpecContext) {
		res := succeed(ctx, s.adminFly, "containers", "--json")
		var cs []struct {
			StepName     string `json:"step_name"`
			PipelineName string `json:"pipeline_name"`
			JobName      string `json:"job_name"`
			BuildName    string `json:"build_name"`
		}
		Expect(json.Unmarshal([]byte(res.Stdout), &cs)).To(Succeed())
		var mine []string
		for _, c := range cs {
			if c.PipelineName == name {
				mine = append(mine, c.JobName+"/"+c.BuildName+"/"+c.StepName)
			}
		}
		Expect(mine).To(ContainElements("a/1/t", "b/1/t", "a/1/repo"))
		Expect(plain(succeed(ctx, s.adminFly, "containers").Stdout)).To(MatchRegexp(`(?m)\s%s\s+b\s+1\s+`, regexp.QuoteMeta(name)))
	})

	It("intercepts the step of the job named, and fails for a step that is gone (intercept -j -s)", func(ctx SpecContext) {
		for _, j := range []string{"a", "b"} {
			res := run(ctx, s.adminFly, "intercept", "-j", name+"/"+j, "-s", "t", "--", "cat", "marker.txt")
			Expect(res.ExitCode).To(Equal(0), res.String())
			Expect(res.Stdout).To(Equal("job-" + j + "\n"))
		}
		res := run(ctx, s.adminFly, "intercept", "-j", name+"/a", "-s", "nope", "--", "true")
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("no containers matched your search parameters"))

		// b's pod goes (as GC or a node loss would take it): fly fails.
		code, body := call(ctx, "GET", s.server.URL()+"/api/v1/teams/main/pipelines/"+name+"/jobs/b/builds/1", s.adminToken, nil, nil)
		Expect(code).To(Equal(200), body)
		var b apiBuild
		Expect(json.Unmarshal([]byte(body), &b)).To(Succeed())
		pods := buildPods(ctx, sharedWorker, b.ID)
		Expect(pods).NotTo(BeEmpty())
		for _, p := range pods {
			Expect(s.env.Admin.CoreV1().Pods(s.ns.Name).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})).To(Succeed())
		}
		Eventually(func() int {
			res = run(ctx, s.adminFly, "intercept", "-j", name+"/b", "-s", "t", "--", "true")
			return res.ExitCode
		}).WithTimeout(time.Minute).WithPolling(time.Second).ShouldNot(Equal(0))
		Expect(strings.TrimSpace(res.Output())).NotTo(BeEmpty(), res.String())
		GinkgoWriter.Printf("intercept of a gone step: %s\n", res.String())
	})

	It("clears the caches of one version of a resource (clear-resource-cache -v)", func(ctx SpecContext) {
		// fly asks first (it has no --non-interactive here).
		clear := func(version string) testenv.FlyResult {
			res := runCmd(ctx, s.adminFly, testenv.FlyCmd{Args: []string{"clear-resource-cache", "-r", name + "/repo", "-v", version},
				Stdin: strings.NewReader("y\r")}) // bubbletea's Enter is a carriage return
			Expect(res.ExitCode).To(Equal(0), res.String())
			return res
		}
		res := clear("version:other")
		Expect(res.Stdout).To(ContainSubstring("0 caches removed"))
		res = clear("version:v1")
		Expect(res.Stdout).To(ContainSubstring("1 caches removed"))
	})
})
