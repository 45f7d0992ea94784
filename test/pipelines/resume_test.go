package pipelines_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/test/testenv"
)

// porterClient is this tree's client (atc-porter-runtime's client
// commands), sharing f's ~/.flyrc and so its login.
func porterClient(f *testenv.Fly) *testenv.Fly {
	c := testenv.NewFly(s.env.Bin, f.Home, f.Target)
	c.Log = GinkgoWriter
	return c
}

// gate is a credential a gated task reads: "closed" fails it, "open"
// lets it pass; a resumed build reads it anew.
type gate struct{ name string }

func newGate(ctx context.Context) gate {
	GinkgoHelper()
	g := gate{name: varName("gate")}
	createCredential(ctx, g.name, map[string]string{"value": "closed"})
	return g
}

func (g gate) open(ctx context.Context) {
	GinkgoHelper()
	sec, err := s.env.Admin.CoreV1().Secrets(s.credNS).Get(ctx, g.name, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	sec.Data = nil
	sec.StringData = map[string]string{"value": "open"}
	_, err = s.env.Admin.CoreV1().Secrets(s.credNS).Update(ctx, sec, metav1.UpdateOptions{})
	Expect(err).NotTo(HaveOccurred())
}

// task is a busybox task running script, with yaml's extra lines
// (inputs, outputs), indented for a plan step's config.
func (g gate) task(indent, script, extra string) string {
	return busyboxTask(indent, extra+"run: {path: sh, args: [-c, '"+script+"']}")
}

// check is the shell test that fails while the gate is closed.
func (g gate) check() string { return `test "((` + g.name + `))" = open` }

// resume runs the client's `resume -b ID -w`.
func resume(ctx context.Context, f *testenv.Fly, id string) testenv.FlyResult {
	GinkgoHelper()
	res, err := porterClient(f).Run(ctx, "resume", "-b", id, "-w")
	Expect(err).NotTo(HaveOccurred(), res.String())
	return res
}

// failedBuild triggers the job, expects it to fail, and says its ID.
func failedBuild(ctx context.Context, f *testenv.Fly, p, job string) (string, testenv.FlyResult) {
	GinkgoHelper()
	res := run(ctx, f, "trigger-job", "-j", p+"/"+job, "-w")
	Expect(res.ExitCode).To(Equal(1), res.String())
	return buildID(ctx, f, p, job), res
}

// line matches a whole line of output: what a step printed, not the
// "running ..." line that shows its command.
func line(s string) string { return "(?m)^" + regexp.QuoteMeta(s) + "$" }

// reusedLines counts the "reused from build N" lines of an output.
func reusedLines(out, from string) int {
	return strings.Count(out, "reused from build "+from+"\n")
}

var _ = Describe("resuming a failed build from its failed step", func() {
	It("serial: reuses the steps before the failure (outputs by digest, a put not repeated), runs from the failed one and links both builds in the audit", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("resume-serial")
		g := newGate(ctx)
		setPipeline(ctx, f, p, fmt.Sprintf(`
resources:
- name: target
  type: mock
  check_every: never
  source: {no_initial_version: true}
jobs:
- name: j
  plan:
  - task: make
    config:
%s  - task: copy
    config:
%s  - put: target
    params: {file: out/version}
  - task: gated
    config:
%s- name: after
  plan:
  - get: target
    passed: [j]
    trigger: true
`,
			g.task("      ", `t=$(head -c 12 /dev/urandom | od -An -tx1 | tr -dc 0-9a-f); printf v-$t > out/version; echo made $t`, "outputs: [{name: out}]\n"),
			g.task("      ", `echo copied $(cat out/version)`, "inputs: [{name: out}]\n"),
			g.task("      ", g.check()+` && echo read $(cat out/version)`, "inputs: [{name: out}]\n")))
		id, first := failedBuild(ctx, f, p, "j")
		made := regexp.MustCompile(`made ([0-9a-f]{24})`).FindStringSubmatch(first.Stdout)
		Expect(made).To(HaveLen(2), first.String())
		Expect(reusedLines(first.Stdout, "1")).To(Equal(0))

		g.open(ctx)
		res := resume(ctx, f, id)
		Expect(res.ExitCode).To(Equal(0), res.String())
		Expect(res.Stdout).To(ContainSubstring(p + "/j #1.1"))
		// The output of make, taken from the blobstore: not made again.
		Expect(res.Stdout).To(MatchRegexp(line("read v-" + made[1])))
		Expect(res.Stdout).NotTo(MatchRegexp(`(?m)^made `))
		Expect(res.Stdout).NotTo(MatchRegexp(`(?m)^copied `))
		// make, copy, the put and the get after it
		Expect(reusedLines(res.Stdout, "1")).To(Equal(4), res.String())

		builds := jobBuilds(ctx, f, p, "j")
		Expect(builds[0]["name"]).To(Equal("1.1"))
		resumedID := buildID(ctx, f, p, "j")
		pods := declaredSteps(ctx, resumedID)
		Expect(pods).To(HaveKey("gated"))
		Expect(pods).NotTo(HaveKey("make"))
		Expect(pods).NotTo(HaveKey("copy"))
		Expect(pods).NotTo(HaveKey("target"))
		versions := succeed(ctx, f, "resource-versions", "-r", p+"/target", "--json")
		var vs []map[string]any
		Expect(json.Unmarshal([]byte(versions.Stdout), &vs)).To(Succeed())
		Expect(vs).To(HaveLen(1), "the put ran again: %s", versions.Stdout)
		// The reused put's version is the resumed build's output: a job
		// that takes it passed: j runs once 1.1 succeeded (1 failed).
		waitForBuild(ctx, f, p, "after", "succeeded", 2*time.Minute)

		// The audit trail: the new build names the one it resumes, and its
		// reused steps keep the failed build's audit records.
		var rec struct {
			ResumedFrom struct {
				ID      int64  `json:"id"`
				Name    string `json:"name"`
				AuditID string `json:"audit_id"`
			} `json:"resumed_from"`
			Steps map[string]struct {
				Name       string `json:"name"`
				ReusedFrom string `json:"reused_from"`
				AuditKey   string `json:"audit_key"`
			} `json:"steps"`
		}
		store := auditStore(ctx)
		keys, err := store.List(ctx, "builds/")
		Expect(err).NotTo(HaveOccurred())
		var body []byte
		for _, k := range keys {
			if strings.HasPrefix(k.Key, "builds/"+resumedID+"-") && strings.HasSuffix(k.Key, "/build.json") ||
				k.Key == "builds/"+resumedID+"/build.json" {
				rc, _, err := store.Get(ctx, k.Key)
				Expect(err).NotTo(HaveOccurred())
				body, err = io.ReadAll(rc)
				rc.Close()
				Expect(err).NotTo(HaveOccurred())
			}
		}
		Expect(body).NotTo(BeEmpty(), "no build.json of build %s", resumedID)
		Expect(json.Unmarshal(body, &rec)).To(Succeed())
		Expect(fmt.Sprint(rec.ResumedFrom.ID)).To(Equal(id))
		Expect(rec.ResumedFrom.Name).To(Equal("1"))
		reused := map[string]bool{}
		for _, st := range rec.Steps {
			if st.ReusedFrom == "1" {
				reused[st.Name] = true
				Expect(st.AuditKey).To(ContainSubstring(rec.ResumedFrom.AuditID), "step %s", st.Name)
			}
		}
		Expect(reused).To(Equal(map[string]bool{"make": true, "copy": true, "target": true}))

		// Only a failed build resumes.
		again, err := porterClient(f).Run(ctx, "resume", "-b", resumedID)
		Expect(err).NotTo(HaveOccurred())
		Expect(again.ExitCode).NotTo(Equal(0))
		Expect(again.Stderr).To(ContainSubstring("only a failed or errored build can be resumed"))
	})

	It("in_parallel: reuses the branches that succeeded and runs the failed one again", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("resume-parallel")
		g := newGate(ctx)
		setPipeline(ctx, f, p, fmt.Sprintf(`
jobs:
- name: j
  plan:
  - in_parallel:
    - task: left
      config:
%s    - task: middle
      config:
%s    - task: right
      config:
%s`,
			g.task("        ", `echo ran left`, ""),
			g.task("        ", g.check()+` && echo ran middle`, ""),
			g.task("        ", `echo ran right`, "")))
		id, first := failedBuild(ctx, f, p, "j")
		Expect(first.Stdout).To(MatchRegexp(line("ran left")))
		Expect(first.Stdout).To(MatchRegexp(line("ran right")))
		g.open(ctx)
		res := resume(ctx, f, id)
		Expect(res.ExitCode).To(Equal(0), res.String())
		Expect(res.Stdout).To(MatchRegexp(line("ran middle")))
		Expect(res.Stdout).NotTo(MatchRegexp(line("ran left")))
		Expect(res.Stdout).NotTo(MatchRegexp(line("ran right")))
		Expect(reusedLines(res.Stdout, "1")).To(Equal(2), res.String())
	})

	It("across: reuses the runs that succeeded and runs the failed value's again", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("resume-across")
		g := newGate(ctx)
		setPipeline(ctx, f, p, fmt.Sprintf(`
jobs:
- name: j
  plan:
  - across:
    - var: v
      values: [a, b, c]
    task: each
    config:
%s`,
			g.task("      ", `if [ ((.:v)) = b ]; then `+g.check()+`; fi && echo ran-((.:v))`, "")))
		id, first := failedBuild(ctx, f, p, "j")
		Expect(first.Stdout).To(MatchRegexp(line("ran-a")))
		Expect(first.Stdout).To(MatchRegexp(line("ran-c")))
		Expect(first.Stdout).NotTo(MatchRegexp(line("ran-b")))
		g.open(ctx)
		res := resume(ctx, f, id)
		Expect(res.ExitCode).To(Equal(0), res.String())
		Expect(res.Stdout).To(MatchRegexp(line("ran-b")))
		Expect(res.Stdout).NotTo(MatchRegexp(line("ran-a")))
		Expect(res.Stdout).NotTo(MatchRegexp(line("ran-c")))
		Expect(reusedLines(res.Stdout, "1")).To(Equal(2), res.String())
	})

	It("hooks: runs an on_failure hook that ran again when the resumed build fails again, and reuses a step's on_success hook", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("resume-hooks")
		g := newGate(ctx)
		setPipeline(ctx, f, p, fmt.Sprintf(`
jobs:
- name: j
  plan:
  - task: first
    config:
%s    on_success:
      task: celebrate
      config:
%s  - task: gated
    config:
%s    on_failure:
      task: mourn
      config:
%s`,
			g.task("      ", `echo ran first`, ""),
			g.task("        ", `echo ran celebrate`, ""),
			g.task("      ", g.check(), ""),
			g.task("        ", `echo ran mourn`, "")))
		id, first := failedBuild(ctx, f, p, "j")
		Expect(first.Stdout).To(MatchRegexp(line("ran mourn")))
		res := resume(ctx, f, id) // the gate is still closed
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stdout).To(MatchRegexp(line("ran mourn")))
		Expect(res.Stdout).NotTo(MatchRegexp(line("ran first")))
		Expect(res.Stdout).NotTo(MatchRegexp(line("ran celebrate")))
		Expect(reusedLines(res.Stdout, "1")).To(Equal(2), res.String()) // first, celebrate

		// A resumed build resumes too: 1.2 reuses what 1.1 reused, naming
		// the build that ran it.
		g.open(ctx)
		second := resume(ctx, f, buildID(ctx, f, p, "j"))
		Expect(second.ExitCode).To(Equal(0), second.String())
		Expect(second.Stdout).To(ContainSubstring(p + "/j #1.2"))
		Expect(reusedLines(second.Stdout, "1")).To(Equal(2), second.String())
		Expect(second.Stdout).NotTo(MatchRegexp(line("ran mourn")))
	})

	It("attempts: reuses a step that succeeded within its attempts, and runs a step whose attempts all failed from its first attempt", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("resume-attempts")
		g := newGate(ctx)
		setPipeline(ctx, f, p, fmt.Sprintf(`
jobs:
- name: j
  plan:
  - task: steady
    attempts: 2
    config:
%s  - task: gated
    attempts: 2
    config:
%s`,
			g.task("      ", `echo ran steady`, ""),
			g.task("      ", `echo attempt; `+g.check(), "")))
		id, first := failedBuild(ctx, f, p, "j")
		Expect(strings.Count(first.Stdout, "attempt\n")).To(Equal(2), first.String())
		g.open(ctx)
		res := resume(ctx, f, id)
		Expect(res.ExitCode).To(Equal(0), res.String())
		Expect(res.Stdout).NotTo(MatchRegexp(line("ran steady")))
		Expect(strings.Count(res.Stdout, "attempt\n")).To(Equal(1), res.String())
		Expect(reusedLines(res.Stdout, "1")).To(Equal(1), res.String())
	})
})
