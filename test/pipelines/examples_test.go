package pipelines_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/test/testenv"
)

// busyboxTask is an inline task config running script in busybox.
func busyboxTask(indent, rest string) string {
	lines := []string{
		"platform: linux",
		"image_resource:",
		"  type: registry-image",
		"  source: {repository: busybox}",
	}
	lines = append(lines, strings.Split(strings.TrimRight(rest, "\n"), "\n")...)
	for i, l := range lines {
		lines[i] = indent + l
	}
	return strings.Join(lines, "\n") + "\n"
}

// jobBuilds is `fly builds -j` as JSON.
func jobBuilds(ctx context.Context, f *testenv.Fly, pipeline, job string) []map[string]any {
	GinkgoHelper()
	res := succeed(ctx, f, "builds", "-j", pipeline+"/"+job, "--json")
	var builds []map[string]any
	Expect(json.Unmarshal([]byte(res.Stdout), &builds)).To(Succeed(), res.String())
	return builds
}

// waitForBuild waits until job has a build with status and returns its name.
func waitForBuild(ctx context.Context, f *testenv.Fly, pipeline, job, status string, timeout time.Duration) string {
	GinkgoHelper()
	var name string
	Eventually(ctx, func() string {
		for _, b := range jobBuilds(ctx, f, pipeline, job) {
			if b["status"] == status {
				name = fmt.Sprint(b["name"])
				return name
			}
		}
		return ""
	}).WithTimeout(timeout).WithPolling(500*time.Millisecond).ShouldNot(BeEmpty(), "job %s/%s has no %s build", pipeline, job, status)
	return name
}

var _ = Describe("the RFC's developer examples", func() {
	It("runs a hello world job with an image_resource, triggered and watched with fly", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("hello")
		setPipeline(ctx, f, p, `
jobs:
- name: hello-world-job
  plan:
  - task: hello-world-task
    config:
`+busyboxTask("      ", `run: {path: echo, args: ["Hello world!"]}`))
		res := succeed(ctx, f, "trigger-job", "-j", p+"/hello-world-job", "-w")
		Expect(res.Stdout).To(ContainSubstring("started " + p + "/hello-world-job #1"))
		Expect(res.Stdout).To(ContainSubstring("Hello world!"))
		Expect(res.Stdout).To(ContainSubstring("succeeded"))

		jobs := succeed(ctx, f, "jobs", "-p", p)
		Expect(jobs.Stdout).To(MatchRegexp(`hello-world-job\s+no\s+succeeded`))
		watch := succeed(ctx, f, "watch", "-j", p+"/hello-world-job")
		Expect(watch.Stdout).To(ContainSubstring("Hello world!"))
		// fly builds names the job build's pipeline and job, as Concourse does.
		builds := succeed(ctx, f, "builds")
		Expect(builds.Stdout).To(MatchRegexp(`\d+\s+`+p+`/hello-world-job/1\s+succeeded`), builds.String())
	})

	It("creates and consumes an artifact, with mappings and a task cache that clear-task-cache empties", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("create-consume")
		setPipeline(ctx, f, p, `
jobs:
- name: create-and-consume
  plan:
  - task: make-a-file
    config:
`+busyboxTask("      ", `outputs: [{name: made}]
caches: [{path: cache}]
run:
  path: sh
  args: [-c, 'echo "runs so far: $(cat cache/count 2>/dev/null || echo 0)"; echo $(( $(cat cache/count 2>/dev/null || echo 0) + 1 )) > cache/count; echo hello > made/file']`)+`
    output_mapping: {made: the-artifact}
  - task: consume-the-file
    input_mapping: {renamed: the-artifact}
    config:
`+busyboxTask("      ", `inputs: [{name: renamed}]
run: {path: cat, args: [renamed/file]}`))
		first := succeed(ctx, f, "trigger-job", "-j", p+"/create-and-consume", "-w")
		Expect(first.Stdout).To(ContainSubstring("runs so far: 0"))
		Expect(first.Stdout).To(ContainSubstring("hello"))
		second := succeed(ctx, f, "trigger-job", "-j", p+"/create-and-consume", "-w")
		Expect(second.Stdout).To(ContainSubstring("runs so far: 1"))

		clear := succeed(ctx, f, "clear-task-cache", "-n", "-j", p+"/create-and-consume", "-s", "make-a-file")
		Expect(clear.Stdout).To(ContainSubstring("1 caches removed"))
		third := succeed(ctx, f, "trigger-job", "-j", p+"/create-and-consume", "-w")
		Expect(third.Stdout).To(ContainSubstring("runs so far: 0"))
	})

	It("chains two jobs by passed: a new version triggers the first, then the second with the same version", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("passed")
		setPipeline(ctx, f, p, `
resources:
- name: src
  type: mock
  check_every: 1s
  source: {initial_version: v1, create_files: {greeting: hi}}
jobs:
- name: first
  plan:
  - get: src
    trigger: true
  - task: t
    config:
`+busyboxTask("      ", `inputs: [{name: src}]
run: {path: cat, args: [src/version]}`)+`
- name: second
  plan:
  - get: src
    passed: [first]
    trigger: true
  - task: show
    config:
`+busyboxTask("      ", `inputs: [{name: src}]
run: {path: sh, args: [-c, 'echo "second got $(cat src/version) $(cat src/greeting)"']}`))
		check := succeed(ctx, f, "check-resource", "-r", p+"/src")
		Expect(check.Stdout).To(ContainSubstring("succeeded"))
		waitForBuild(ctx, f, p, "second", "succeeded", 180*time.Second)
		watch := succeed(ctx, f, "watch", "-j", p+"/second")
		Expect(watch.Stdout).To(ContainSubstring("second got v1 hi"))
		Expect(jobBuilds(ctx, f, p, "first")).To(HaveLen(1), "the first job ran more than once for one version")

		versions := succeed(ctx, f, "resource-versions", "-r", p+"/src")
		Expect(versions.Stdout).To(ContainSubstring("version:v1"))
	})

	It("puts to a resource and gets the version it produced (the implicit get)", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("put")
		setPipeline(ctx, f, p, `
resources:
- name: target
  type: mock
  check_every: never
  source: {no_initial_version: true, create_files: {fetched: "yes"}}
jobs:
- name: publish
  plan:
  - task: make-version
    config:
`+busyboxTask("      ", `outputs: [{name: out}]
run: {path: sh, args: [-c, 'echo v42 > out/version']}`)+`
  - put: target
    params: {file: out/version}
  - task: read-it
    config:
`+busyboxTask("      ", `inputs: [{name: target}]
run: {path: sh, args: [-c, 'echo "got $(cat target/version), fetched=$(cat target/fetched)"']}`))
		res := succeed(ctx, f, "trigger-job", "-j", p+"/publish", "-w")
		Expect(res.Stdout).To(ContainSubstring("got v42, fetched=yes"))
		versions := succeed(ctx, f, "resource-versions", "-r", p+"/target")
		Expect(versions.Stdout).To(ContainSubstring("version:v42"))
	})
})

var _ = Describe("bad pipelines and broken resources", func() {
	It("shows set-pipeline's errors and saves nothing", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("invalid")
		path := filepath.Join(GinkgoT().TempDir(), "bad.yml")
		// fly reads the YAML itself first (a typo'd step kind never reaches
		// the server); these errors are the server's.
		Expect(os.WriteFile(path, []byte(`
resources:
- name: src
  type: mock
  source: {}
jobs:
- name: a
  plan:
  - get: src
    passed: [b]
- name: b
  plan:
  - get: nope
  - get: src
    passed: [a]
`), 0o644)).To(Succeed())
		res := run(ctx, f, "set-pipeline", "-n", "-p", p, "-c", path)
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		Expect(res.Output()).To(ContainSubstring("unknown resource 'nope'"))
		Expect(res.Output()).To(MatchRegexp(`'a' -> 'b' -> 'a'|'b' -> 'a' -> 'b'`), "the cycle through passed is not named")
		pipelines := succeed(ctx, f, "pipelines")
		Expect(pipelines.Stdout).NotTo(ContainSubstring(p))
	})

	It("reports check's invalid JSON on the resource, and keeps checking", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("badcheck")
		setPipeline(ctx, f, p, `
resources:
- name: broken
  type: mock
  check_every: 1s
  source: {check_output: "this is not json"}
jobs:
- name: j
  plan:
  - get: broken
`)
		var out string
		Eventually(ctx, func() string {
			out = run(ctx, f, "check-resource", "-r", p+"/broken").Output()
			return out
		}).WithTimeout(60 * time.Second).Should(ContainSubstring("invalid JSON"))
		expectNextCheck(ctx, f, p, "broken", checkBuildID(out))
	})

	It("times out a check that hangs, says so, and runs the next one", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("hangcheck")
		setPipeline(ctx, f, p, `
resources:
- name: slow
  type: mock
  check_every: 1s
  check_timeout: 3s
  source: {check_delay: 1h}
jobs:
- name: j
  plan:
  - get: slow
`)
		res := run(ctx, f, "check-resource", "-r", p+"/slow")
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		Expect(res.Output()).To(MatchRegexp(`(?i)timeout|timed out`))
		expectNextCheck(ctx, f, p, "slow", checkBuildID(res.Output()))
	})
})

// checkBuildID is the build `fly check-resource` said it checks in.
func checkBuildID(out string) int64 {
	GinkgoHelper()
	id, err := strconv.ParseInt(buildNumber(out), 10, 64)
	Expect(err).NotTo(HaveOccurred(), "no check build in %q", out)
	return id
}

// expectNextCheck waits for a periodic check of resource after the check
// build after, waits for that check to end, and expects it to have ended
// as a broken resource's check does (not stuck, not succeeded).
func expectNextCheck(ctx context.Context, f *testenv.Fly, pipeline, resource string, after int64) {
	GinkgoHelper()
	var next int64
	Eventually(ctx, func(g Gomega) {
		res := run(ctx, f, "resources", "-p", pipeline, "--json")
		var rs []struct {
			Name  string `json:"name"`
			Build *struct {
				ID int64 `json:"id"`
			} `json:"build"`
		}
		g.Expect(json.Unmarshal([]byte(res.Stdout), &rs)).To(Succeed(), res.String())
		g.Expect(rs).To(ContainElement(HaveField("Name", resource)))
		for _, r := range rs {
			if r.Name == resource {
				g.Expect(r.Build).NotTo(BeNil(), "resource %s has no check build", resource)
				g.Expect(r.Build.ID).To(BeNumerically(">", after), "no check of %s ran after build %d", resource, after)
				next = r.Build.ID
			}
		}
	}).WithTimeout(60 * time.Second).WithPolling(time.Second).Should(Succeed())
	Eventually(ctx, func() string {
		res := run(ctx, f, "curl", fmt.Sprintf("/api/v1/builds/%d", next), "--", "-sS")
		var b struct {
			Status string `json:"status"`
		}
		if json.Unmarshal([]byte(res.Stdout), &b) != nil {
			return res.String()
		}
		return b.Status
	}).WithTimeout(120*time.Second).WithPolling(time.Second).Should(BeElementOf("errored", "aborted", "failed"),
		"check build %d of %s did not end as a broken resource's check", next, resource)
}

// Shapes of Concourse's public example pipelines (hooks, serial jobs, a
// time-triggered job feeding a manual one), written for these specs.
var _ = Describe("Concourse's example pipeline shapes", func() {
	It("runs job and task hooks, a serial job's builds one at a time, and a time trigger feeding a manual job", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("shapes")
		// echo is a task step printing text, its keys at indent.
		echo := func(indent, name, text string) string {
			return "task: " + name + "\n" + indent + "config:\n" + busyboxTask(indent+"  ", `run: {path: echo, args: ["`+text+`"]}`)
		}
		setPipeline(ctx, f, p, `
resources:
- name: tick
  type: time
  check_every: 2s
  source: {interval: 10s}
jobs:
- name: hooks
  plan:
  - task: fails
    config:
`+busyboxTask("      ", `run: {path: sh, args: [-c, 'echo "the task ran"; exit 1']}`)+`
    on_failure:
      `+echo("      ", "task-on-failure", "task hook: on_failure")+`    ensure:
      `+echo("      ", "task-ensure", "task hook: ensure")+`  on_success:
    `+echo("    ", "job-on-success", "job hook: on_success ran though the job failed")+`  on_failure:
    `+echo("    ", "job-on-failure", "job hook: on_failure")+`  ensure:
    `+echo("    ", "job-ensure", "job hook: ensure")+`
- name: serial
  serial: true
  plan:
  - task: slow
    config:
`+busyboxTask("      ", `run: {path: sleep, args: ["3"]}`)+`
- name: timed
  plan:
  - get: tick
    trigger: true
  - `+echo("    ", "tock", "timed build")+`- name: manual
  plan:
  - get: tick
    passed: [timed]
  - task: show
    config:
`+busyboxTask("      ", `inputs: [{name: tick}]
run: {path: sh, args: [-c, 'echo "manual build after timed: $(cat tick/input 2>/dev/null || ls tick)"']}`))

		By("the job and task hooks of a failing task run in Concourse's order, and on_success does not")
		hooks := run(ctx, f, "trigger-job", "-j", p+"/hooks", "-w")
		Expect(hooks.ExitCode).To(Equal(1), hooks.String())
		out := hooks.Stdout
		order := []string{"the task ran", "task hook: on_failure", "task hook: ensure", "job hook: on_failure", "job hook: ensure"}
		last := -1
		for _, line := range order {
			i := strings.Index(out, line)
			Expect(i).To(BeNumerically(">", last), "%q is missing or out of order in:\n%s", line, out)
			last = i
		}
		Expect(out).NotTo(ContainSubstring("on_success ran"))
		Expect(out).To(ContainSubstring("failed"))

		By("a serial job's second build waits for the first to end")
		succeed(ctx, f, "trigger-job", "-j", p+"/serial")
		succeed(ctx, f, "trigger-job", "-j", p+"/serial")
		var builds []map[string]any
		Eventually(ctx, func() []string {
			builds = jobBuilds(ctx, f, p, "serial")
			var st []string
			for _, b := range builds {
				st = append(st, fmt.Sprint(b["status"]))
			}
			return st
		}).WithTimeout(120 * time.Second).WithPolling(time.Second).Should(Equal([]string{"succeeded", "succeeded"}))
		// fly lists the newest first.
		newer, older := builds[0], builds[1]
		Expect(newer["start_time"]).To(BeNumerically(">=", older["end_time"]), "the serial job's builds overlapped: %v", builds)

		By("the time resource triggers its job; the manual job waits for a person, then gets the same version")
		waitForBuild(ctx, f, p, "timed", "succeeded", 90*time.Second)
		Expect(jobBuilds(ctx, f, p, "manual")).To(BeEmpty(), "the manual job (no trigger) started on its own")
		manual := succeed(ctx, f, "trigger-job", "-j", p+"/manual", "-w")
		Expect(manual.Stdout).To(ContainSubstring("manual build after timed"))
		timedVersions := succeed(ctx, f, "resource-versions", "-r", p+"/tick", "--json")
		Expect(timedVersions.Stdout).To(ContainSubstring(`"time"`))
	})
})
