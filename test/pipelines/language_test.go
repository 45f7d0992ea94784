package pipelines_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/test/testenv"
)

// pipelinesByName is `fly pipelines --json` by pipeline name.
func pipelinesByName(ctx context.Context, f *testenv.Fly) map[string]map[string]any {
	GinkgoHelper()
	res := succeed(ctx, f, "pipelines", "--json")
	var ps []map[string]any
	Expect(json.Unmarshal([]byte(res.Stdout), &ps)).To(Succeed(), res.String())
	out := map[string]map[string]any{}
	for _, p := range ps {
		out[fmt.Sprint(p["name"])] = p
	}
	return out
}

var _ = Describe("the rest of the pipeline language", func() {
	It("loads vars from files (json, trim, reveal), reads a dummy var source and runs a step across values", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("lang")
		setPipeline(ctx, f, p, `
var_sources:
- name: dummy-src
  type: dummy
  config: {vars: {who: dummy-world}}
jobs:
- name: lang
  plan:
  - task: make
    config:
`+busyboxTask("      ", `outputs: [{name: out}]
run:
  path: sh
  args: [-c, 'printf "{\"greeting\": \"hi\", \"items\": [\"a\", \"b\"]}" > out/v.json; printf "  s3cr3t-%s \n" value > out/secret.txt; printf visible > out/shown.txt; printf v > out/one.txt']`)+`
  - load_var: data
    file: out/v.json
    reveal: true
  - load_var: secret
    file: out/secret.txt
  - load_var: shown
    file: out/shown.txt
    reveal: true
  - load_var: one
    file: out/one.txt
  - task: use
    config:
`+busyboxTask("      ", `params: {GREETING: ((.:data.greeting)), SECRET: ((.:secret)), SHOWN: ((.:shown)), WHO: ((dummy-src:who)), ONE: ((.:one))}
run: {path: sh, args: [-c, 'echo "greeting=$GREETING secret=$SECRET shown=$SHOWN who=$WHO one=$ONE"; echo "length=${#SECRET}"']}`)+`
  - task: each
    across:
    - var: item
      values: ((.:data.items))
      max_in_flight: all
    - var: size
      values: [1, 2]
      max_in_flight: all
    config:
`+busyboxTask("      ", `run: {path: echo, args: ["item=((.:item)) size=((.:size))"]}`))
		res := succeed(ctx, f, "trigger-job", "-j", p+"/lang", "-w")
		out := res.Stdout
		// load_var's own lines, then the values: the secret (trimmed)
		// and the var source's value redacted, the revealed ones shown
		// (a value not revealed is redacted wherever it appears, as in
		// Concourse).
		// A one-character value is not redacted (as in Concourse): "v"
		// would garble "var data fetched." and every other v.
		Expect(out).To(ContainSubstring("var data fetched."))
		Expect(out).To(ContainSubstring("added var secret to build."))
		Expect(out).To(ContainSubstring("greeting=hi secret=((redacted)) shown=visible who=((redacted)) one=v"))
		Expect(out).To(ContainSubstring("length=12"), "trim format: the spaces and newline are gone")
		Expect(out).NotTo(ContainSubstring("s3cr3t-value"))
		Expect(out).NotTo(ContainSubstring("dummy-world"))
		for _, combo := range []string{"item=a size=1", "item=a size=2", "item=b size=1", "item=b size=2"} {
			Expect(out).To(ContainSubstring(combo))
		}
		Expect(out).To(ContainSubstring("succeeded"))

		// The build's events carry the across step's runs in Concourse's
		// across-substeps shape, with the run ids Concourse gives.
		ev := succeed(ctx, f, "curl", "/api/v1/builds/"+buildID(ctx, f, p, "lang")+"/events")
		Expect(ev.Stdout).To(ContainSubstring(`"event":"across-substeps"`))
		Expect(ev.Stdout).To(MatchRegexp(`"substeps":\[\{"step":\{"id":"[0-9a-f]+/0/0","task":\{[^}]*"name":"each"[^}]*\}\},"values":\["a",1\]\}`))
		Expect(ev.Stdout).To(ContainSubstring(`"event":"finish"`))
	})

	It("sets itself, then child pipelines with vars and var_files from a git repository, and fans out to 20 children", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("parent")
		child := p + "-child"
		repo, _ := newRepo(ctx, "pipelines", "configs")
		// The bootstrap config only sets itself; the repository's adds the
		// children.
		bootstrap := fmt.Sprintf(`
resources:
%s
jobs:
- name: configure
  plan:
  - get: repo
  - set_pipeline: self
    file: repo/ci/parent.yml
`, gitResource("repo", repo, "main"))
		team := pipelineName("team")
		full := bootstrap + fmt.Sprintf(`  - set_pipeline: %s
    file: repo/ci/child.yml
    vars: {greeting: hello, num: 0}
    var_files: [repo/ci/vars.yml]
  - set_pipeline: %[1]s-inst
    file: repo/ci/child.yml
    instance_vars: {num: 7}
    vars: {greeting: howdy}
    var_files: [repo/ci/vars.yml]
  - set_pipeline: %[1]s
    team: %[3]s
    file: repo/ci/child.yml
    vars: {greeting: hey, num: 0}
    var_files: [repo/ci/vars.yml]
- name: fan-out
  plan:
  - get: repo
  - set_pipeline: %[2]s-fan-((.:i))
    file: repo/ci/child.yml
    vars: {greeting: hi, num: ((.:i))}
    var_files: [repo/ci/vars.yml]
    across:
    - var: i
      values: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
      max_in_flight: all
`, child, p, team)
		childConfig := `
jobs:
- name: hello
  plan:
  - task: say
    config:
` + busyboxTask("      ", `run: {path: echo, args: ["((greeting)) from ((who)), child ((num))"]}`)
		sha, err := s.git.Commit(ctx, repo, "main", map[string]string{
			"ci/parent.yml": full, "ci/child.yml": childConfig, "ci/vars.yml": "who: the-parent\n",
		}, "pipelines")
		Expect(err).NotTo(HaveOccurred())
		// The main team may set another team's pipeline.
		succeed(ctx, f, "set-team", "-n", team, "--local-user", adminUser, "--non-interactive")
		setPipeline(ctx, f, p, bootstrap)
		waitForVersion(ctx, f, p, "repo", sha)

		// Build 1 sets the pipeline from the repository: the diff is in
		// its log.
		first := succeed(ctx, f, "trigger-job", "-j", p+"/configure", "-w")
		Expect(first.Stdout).To(ContainSubstring("job configure has changed:"))
		Expect(first.Stdout).To(ContainSubstring("+   file: repo/ci/child.yml"))
		Expect(first.Stdout).To(ContainSubstring("job fan-out has been added:"))
		Expect(first.Stdout).To(ContainSubstring("setting pipeline: " + p))
		Expect(first.Stdout).To(ContainSubstring("succeeded"))

		// Build 2 runs the new plan: itself unchanged, then the child.
		second := succeed(ctx, f, "trigger-job", "-j", p+"/configure", "-w")
		Expect(second.Stdout).To(ContainSubstring("no changes to apply."))
		Expect(second.Stdout).To(ContainSubstring("setting pipeline: " + child))
		got := succeed(ctx, f, "get-pipeline", "-p", child)
		Expect(got.Stdout).To(ContainSubstring("hello from the-parent, child 0"))
		got = succeed(ctx, f, "get-pipeline", "-p", child, "--team", team)
		Expect(got.Stdout).To(ContainSubstring("hey from the-parent, child 0"))
		// instance_vars set an instance, and fill in the config as vars.
		Expect(second.Stdout).To(ContainSubstring("setting pipeline: " + child + "-inst/num:7"))
		got = succeed(ctx, f, "get-pipeline", "-p", child+"-inst/num:7")
		Expect(got.Stdout).To(ContainSubstring("howdy from the-parent, child 7"))

		// The child remembers the job and build that set it, and fly
		// warns before a hand-made change.
		ps := pipelinesByName(ctx, f)
		Expect(ps).To(HaveKey(child))
		Expect(ps[child]["parent_build_id"]).To(BeNumerically(">", 0))
		Expect(ps[child]["parent_job_id"]).To(BeNumerically(">", 0))
		Expect(ps[child]["paused"]).To(BeFalse(), "a pipeline set by a build starts unpaused, as in Concourse")
		path := filepath.Join(GinkgoT().TempDir(), "child.yml")
		Expect(os.WriteFile(path, []byte(strings.Replace(childConfig, "((greeting))", "changed", 1)), 0o644)).To(Succeed())
		warned := run(ctx, f, "set-pipeline", "-n", "-p", child, "-c", path, "-v", "who=x", "-v", "num=1")
		Expect(warned.Stdout).To(ContainSubstring("WARNING: pipeline has been configured through the 'set_pipeline' step"))

		// The child set by the build runs.
		hello := succeed(ctx, f, "trigger-job", "-j", child+"/hello", "-w")
		Expect(hello.Stdout).To(ContainSubstring("changed from x, child 1"))

		// Fan-out: one across step sets 20 children; time from the
		// trigger until fly lists all of them.
		start := time.Now()
		succeed(ctx, f, "trigger-job", "-j", p+"/fan-out")
		var visible time.Duration
		Eventually(ctx, func() int {
			ps := pipelinesByName(ctx, f)
			n := 0
			for i := 1; i <= 20; i++ {
				if _, ok := ps[fmt.Sprintf("%s-fan-%d", p, i)]; ok {
					n++
				}
			}
			if n == 20 && visible == 0 {
				visible = time.Since(start)
			}
			return n
		}).WithTimeout(3 * time.Minute).WithPolling(200 * time.Millisecond).Should(Equal(20))
		name := waitForBuild(ctx, f, p, "fan-out", "succeeded", 2*time.Minute)
		var builds []map[string]any
		for _, b := range jobBuilds(ctx, f, p, "fan-out") {
			if fmt.Sprint(b["name"]) == name {
				builds = append(builds, b)
			}
		}
		Expect(builds).To(HaveLen(1))
		AddReportEntry("set_pipeline fan-out of 20 children", fmt.Sprintf(
			"trigger to all 20 visible to fly pipelines: %s (build ran %ds, its get included)",
			visible.Round(10*time.Millisecond), int64(builds[0]["end_time"].(float64)-builds[0]["start_time"].(float64))))
		GinkgoWriter.Printf("set_pipeline fan-out: 20 children visible %s after the trigger\n", visible)
		got = succeed(ctx, f, "get-pipeline", "-p", p+"-fan-17")
		Expect(got.Stdout).To(ContainSubstring("hi from the-parent, child 17"))
	})

	It("sets instanced pipelines with fly set-pipeline -i, runs a job of one, and orders them", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("inst")
		path := filepath.Join(GinkgoT().TempDir(), "inst.yml")
		Expect(os.WriteFile(path, []byte(`
jobs:
- name: hello
  plan:
  - task: say
    config:
`+busyboxTask("      ", `run: {path: echo, args: ["branch ((branch))"]}`)), 0o644)).To(Succeed())
		for _, branch := range []string{"main", "dev"} {
			succeed(ctx, f, "set-pipeline", "-n", "-p", p, "-c", path, "-i", "branch="+branch)
			succeed(ctx, f, "unpause-pipeline", "-p", p+"/branch:"+branch)
		}
		list := succeed(ctx, f, "pipelines")
		Expect(list.Stdout).To(MatchRegexp(`(?s)` + p + `/branch:main.*` + p + `/branch:dev`))
		res := succeed(ctx, f, "trigger-job", "-j", p+"/branch:dev/hello", "-w")
		Expect(res.Stdout).To(ContainSubstring("branch dev"))
		// fly names the build's pipeline with its instance vars.
		Expect(succeed(ctx, f, "builds", "-j", p+"/branch:dev/hello").Stdout).To(ContainSubstring(p + "/branch:dev/hello"))
		// fly fills the instance vars into the config it sends.
		Expect(run(ctx, f, "get-pipeline", "-p", p+"/branch:main").Stdout).To(ContainSubstring("branch main"))
		succeed(ctx, f, "order-instanced-pipelines", "-g", p, "-p", "branch:dev", "-p", "branch:main")
		list = succeed(ctx, f, "pipelines")
		Expect(list.Stdout).To(MatchRegexp(`(?s)` + p + `/branch:dev.*` + p + `/branch:main`))
		bad := run(ctx, f, "order-instanced-pipelines", "-g", p, "-p", "branch:nope")
		Expect(bad.ExitCode).NotTo(Equal(0), bad.String())
	})

	// (fly validate-pipeline validates on the client alone, with fly's
	// own rules: it never asks the server.)
	It("refuses at set time, naming the step, what the server cannot run", func(ctx SpecContext) {
		f := newFly(ctx)
		for _, tc := range []struct{ config, want string }{
			{"var_sources:\n- {name: v, type: ssm, config: {region: x}}\njobs:\n- name: j\n  plan: [{task: t, file: a/t.yml}]\n",
				"var_sources[0](v): type 'ssm' is not supported by this server (supported: dummy, vault)"},
			{"jobs:\n- name: j\n  plan: [{task: t, file: a/t.yml, across: [{var: x, values: [1], max_in_flight: 0}]}]\n",
				"jobs.j.plan[0].task(t): across var 'x': max_in_flight must be a positive number"},
			{"jobs:\n- name: j\n  plan: [{run: hello, type: proto}]\n", "run steps (prototypes) are not supported"},
		} {
			path := filepath.Join(GinkgoT().TempDir(), "p.yml")
			Expect(os.WriteFile(path, []byte(tc.config), 0o644)).To(Succeed())
			res := run(ctx, f, "set-pipeline", "-n", "-p", pipelineName("refused"), "-c", path)
			Expect(res.ExitCode).NotTo(Equal(0), res.String())
			Expect(res.Stdout + res.Stderr).To(ContainSubstring(tc.want))
		}
	})
})

// buildID is the id of the latest build of job.
func buildID(ctx context.Context, f *testenv.Fly, pipeline, job string) string {
	GinkgoHelper()
	builds := jobBuilds(ctx, f, pipeline, job)
	Expect(builds).NotTo(BeEmpty())
	return fmt.Sprint(int64(builds[0]["id"].(float64)))
}
