package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/test/testenv"
	"github.com/porter-ci/porter/test/testenv/dex"
)

const task = `
    config:
      platform: linux
      image_resource: {type: registry-image, source: {repository: busybox}}
      run: {path: sh, args: [-c, %q]}`

func taskStep(name, script string) string {
	return "  - task: " + name + fmt.Sprintf(task, script) + "\n"
}

// chainYAML is three jobs in a passed chain fed by one resource: unit
// triggers on source, integration on unit's versions, deploy by hand.
func chainYAML() string {
	return `resources:
- name: source
  type: mock
  source: {initial_version: v1}
jobs:
- name: unit
  plan:
  - get: source
    trigger: true
` + taskStep("t", "true") + `- name: integration
  plan:
  - get: source
    passed: [unit]
    trigger: true
` + taskStep("t", "true") + `- name: deploy
  plan:
  - get: source
    passed: [integration]
` + taskStep("t", "true")
}

func setPipeline(ctx context.Context, name, yaml string) {
	GinkgoHelper()
	succeed(ctx, s.adminFly, "set-pipeline", "-n", "-p", name, "-c", writeFile("p.yml", yaml))
}

// apiGet reads path from the API as admin.
func apiGet(ctx context.Context, path string, out any) {
	GinkgoHelper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.server.URL()+path, nil)
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Authorization", "Bearer "+s.adminToken)
	res, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	Expect(err).NotTo(HaveOccurred(), path)
	Expect(res.StatusCode).To(Equal(http.StatusOK), string(body))
	Expect(json.Unmarshal(body, out)).To(Succeed())
}

func buildStatus(ctx context.Context, id int) func() string {
	return func() string {
		var b struct {
			Status string `json:"status"`
		}
		apiGet(ctx, fmt.Sprintf("/api/v1/builds/%d", id), &b)
		return b.Status
	}
}

var _ = Describe("the web UI", func() {
	It("opens the links fly prints as real pages", func(ctx SpecContext) {
		for _, path := range []string{"/", "/builds/1", "/teams/main/pipelines/x", "/login?fly_port=1"} {
			res, err := http.Get(s.server.URL() + path)
			Expect(err).NotTo(HaveOccurred())
			body, err := io.ReadAll(res.Body)
			res.Body.Close()
			Expect(err).NotTo(HaveOccurred(), path)
			Expect(res.StatusCode).To(Equal(http.StatusOK), path)
			Expect(string(body)).To(ContainSubstring(`<div id="app">`), path)
		}
		res, err := http.Get(s.server.URL() + "/api/v1/no-such-route")
		Expect(err).NotTo(HaveOccurred())
		res.Body.Close()
		Expect(res.StatusCode).To(Equal(http.StatusNotFound))
		c := tab()
		open(c, "/builds/999999", "[data-error]")
		screenshot(c, "unknown build")
	}, SpecTimeout(specTimeout))

	It("draws a three-job passed chain with the right edges, and the dashboard shows it", func(ctx SpecContext) {
		name := pipelineName("chain")
		setPipeline(ctx, name, chainYAML())
		c := loggedIn()
		open(c, "/teams/main/pipelines/"+name, `[data-testid=graph] [data-job="deploy"]`)
		// Each passed: goes through the resource (Concourse's graph).
		Expect(eval[[]string](c, edgesShown)).To(Equal([]string{"integration->source:passed:false", "source->deploy:passed:false",
			"source->integration:passed:true", "source->unit:input:true", "unit->source:passed:false"}))
		jobs := eval[[]string](c, `[...document.querySelectorAll('[data-job]')].map(e => e.dataset.job).sort()`)
		Expect(jobs).To(Equal([]string{"deploy", "integration", "unit"}))
		// dagre puts each job of the chain right of the one before.
		xs := eval[[]float64](c, `['unit','integration','deploy'].map(j => document.querySelector('[data-job="'+j+'"]').getBoundingClientRect().x)`)
		Expect(xs[0]).To(BeNumerically("<", xs[1]))
		Expect(xs[1]).To(BeNumerically("<", xs[2]))
		// A new pipeline is paused: the banner says so, and the button unpauses it.
		Expect(eval[bool](c, `!!document.querySelector('[data-testid=paused-banner]')`)).To(BeTrue())
		screenshot(c, "pipeline")
		pipelinePaused := func() bool {
			var p struct {
				Paused bool `json:"paused"`
			}
			apiGet(ctx, "/api/v1/teams/main/pipelines/"+name, &p)
			return p.Paused
		}
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-testid=pause-pipeline]`)))).To(Succeed())
		Eventually(pipelinePaused).Should(BeFalse())
		Eventually(evalEventually[bool](c, `!document.querySelector('[data-testid=paused-banner]')`)).Should(BeTrue())
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-testid=pause-pipeline]`)))).To(Succeed())
		Eventually(pipelinePaused).Should(BeTrue())

		open(c, "/", fmt.Sprintf(`[data-pipeline="main/%s"]`, name))
		Expect(eval[int](c, fmt.Sprintf(`document.querySelectorAll('[data-pipeline="main/%s"] .seg').length`, name))).To(Equal(3))
		Expect(eval[string](c, fmt.Sprintf(`document.querySelector('[data-pipeline="main/%s"] .markers').textContent`, name))).To(ContainSubstring("paused"))
		screenshot(c, "dashboard")
		// Concourse's filter: team:, status: and text.
		shown := fmt.Sprintf(`!!document.querySelector('[data-pipeline="main/%s"]')`, name)
		filter := func(q string) bool {
			// Cleared, the filter shows the pipeline again: what a query
			// then hides, the query hid.
			eval[bool](c, `(() => { const i = document.querySelector('[data-testid=filter]'); i.value = ''; return i.dispatchEvent(new Event('input', {bubbles: true})) })()`)
			Eventually(evalEventually[bool](c, shown)).Should(BeTrue(), "the pipeline with the filter cleared")
			// Typed as a person types: each key an input event.
			Expect(chromedp.Do(c, chromedp.SendKeys(chromedp.CSS(`[data-testid=filter]`), q))).To(Succeed())
			return eval[bool](c, shown)
		}
		Expect(filter("team:main status:paused " + name[:5])).To(BeTrue())
		Expect(filter("team:nope")).To(BeFalse())
		Expect(filter("status:failed")).To(BeFalse())
		Expect(filter("no-such-text")).To(BeFalse())
		// The user menu lists the teams and roles.
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-testid=user-menu]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=user-popup]`)))).To(Succeed())
		Expect(eval[string](c, `document.querySelector('[data-testid=user-popup]').textContent`)).To(And(ContainSubstring("main"), ContainSubstring("owner")))
	}, SpecTimeout(specTimeout))

	It("starts a build with the trigger button and shows its step tree, and stops one with the abort button", func(ctx SpecContext) {
		name := pipelineName("buttons")
		setPipeline(ctx, name, `jobs:
- name: hello
  plan:
  - in_parallel:
    - task: left
      config: &echo
        platform: linux
        image_resource: {type: registry-image, source: {repository: busybox}}
        params: {SIDE: left side}
        run: {path: sh, args: [-c, 'echo "$SIDE"']}
    - task: right
      config: *echo
      params: {SIDE: right side}
  on_success:
    task: after
    config: *echo
    params: {SIDE: hook ran}
- name: slow
  plan:
`+taskStep("sleep", "echo sleeping; sleep 300"))
		succeed(ctx, s.adminFly, "unpause-pipeline", "-p", name)
		c := loggedIn()
		open(c, "/teams/main/pipelines/"+name+"/jobs/hello", `[data-testid=trigger]`)
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-testid=trigger]`)))).To(Succeed())
		Eventually(evalEventually[string](c, `location.pathname`)).Should(Equal("/teams/main/pipelines/" + name + "/jobs/hello/builds/1"))
		Eventually(evalEventually[string](c, `document.querySelector('[data-testid=build-head]')?.dataset.status`)).
			WithTimeout(2 * time.Minute).Should(Equal("succeeded"))
		Eventually(evalEventually[[]string](c, `[...document.querySelectorAll('[data-step]')].map(e => e.dataset.step + ':' + e.dataset.status)`)).
			Should(ConsistOf("left:succeeded", "right:succeeded", "after:succeeded"))
		Expect(eval[int](c, `document.querySelectorAll('[data-testid=in-parallel] [data-step]').length`)).To(Equal(2))
		// Succeeded steps start folded; a click unfolds one with its log.
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-step="left"] .step-head`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-step="left"] [data-testid=log]`)))).To(Succeed())
		Expect(eval[string](c, `document.querySelector('[data-step="left"] [data-testid=log]').textContent`)).To(ContainSubstring("left side"))
		Expect(eval[string](c, `document.querySelector('[data-step="left"] [data-testid=intercept]').textContent`)).To(MatchRegexp(`fly -t \S+ intercept -b \d+ -s left`))
		screenshot(c, "build")
		open(c, "/teams/main/pipelines/"+name+"/jobs/hello", `[data-build="1"]`)
		screenshot(c, "job")
		// Rerun makes build 1.1 of the same inputs; pause pauses the job.
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-build="1"] button`)))).To(Succeed())
		Eventually(evalEventually[string](c, `location.pathname`)).Should(MatchRegexp(`/jobs/hello/builds/1\.1$`))
		open(c, "/teams/main/pipelines/"+name+"/jobs/hello", `[data-testid=pause-job]`)
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-testid=pause-job]`)))).To(Succeed())
		Eventually(func() bool {
			var j struct {
				Paused bool `json:"paused"`
			}
			apiGet(ctx, "/api/v1/teams/main/pipelines/"+name+"/jobs/hello", &j)
			return j.Paused
		}).Should(BeTrue())

		open(c, "/teams/main/pipelines/"+name+"/jobs/slow", `[data-testid=trigger]`)
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-testid=trigger]`)))).To(Succeed())
		Eventually(evalEventually[string](c, `document.querySelector('[data-step="sleep"] [data-testid=log]')?.textContent || ''`)).
			WithTimeout(2 * time.Minute).Should(ContainSubstring("sleeping"))
		var b struct {
			ID int `json:"id"`
		}
		apiGet(ctx, "/api/v1/teams/main/pipelines/"+name+"/jobs/slow/builds/1", &b)
		Expect(buildStatus(ctx, b.ID)()).To(Equal("started"))
		// While it runs, its box on the graph and its strip on the dashboard pulse.
		open(c, "/teams/main/pipelines/"+name, `[data-job="slow"][data-running="true"]`)
		Expect(eval[string](c, `getComputedStyle(document.querySelector('[data-job="slow"]')).animationName`)).To(Equal("pulse"))
		open(c, "/", fmt.Sprintf(`[data-pipeline="main/%s"] .seg.running`, name))
		open(c, "/teams/main/pipelines/"+name+"/jobs/slow/builds/1", `[data-testid=abort]`)
		// The abort button stays where it is when the header's user menu
		// changes (it shows "login" until the user is read, then the name):
		// a click aimed before that landed beside the button, and the build
		// ran on.
		abortX := `document.querySelector('[data-testid=abort]').getBoundingClientRect().x`
		x := eval[float64](c, abortX)
		Expect(eval[bool](c, `(document.querySelector('[data-testid=user-menu]').textContent = 'a much longer user name', true)`)).To(BeTrue())
		Expect(eval[float64](c, abortX)).To(Equal(x))
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-testid=abort]`)))).To(Succeed())
		Eventually(buildStatus(ctx, b.ID)).WithTimeout(time.Minute).Should(Equal("aborted"))
		Eventually(evalEventually[string](c, `document.querySelector('[data-testid=build-head]').dataset.status`)).Should(Equal("aborted"))
		// The task was stopped: it does not stay "running".
		Eventually(evalEventually[string](c, `document.querySelector('[data-step="sleep"]').dataset.status`)).Should(Equal("aborted"))
		screenshot(c, "aborted")
	}, SpecTimeout(specTimeout))

	It("shows a task whose pod was declared ahead of its turn as waiting, until it runs", func(ctx SpecContext) {
		name := pipelineName("ahead")
		setPipeline(ctx, name, "jobs:\n- name: j\n  plan:\n"+taskStep("first", "echo first; sleep 15")+taskStep("next", "echo next-ran"))
		succeed(ctx, s.adminFly, "unpause-pipeline", "-p", name)
		succeed(ctx, s.adminFly, "trigger-job", "-j", name+"/j")
		c := loggedIn()
		open(c, "/teams/main/pipelines/"+name+"/jobs/j/builds/1", `[data-step="next"]`)
		// Next's pod may be declared before first's image is resolved: the
		// page shows it waiting while first runs (its 15 s).
		Eventually(evalEventually[string](c, `document.querySelector('[data-step="first"]').dataset.status + ' ' + document.querySelector('[data-step="next"]').dataset.status`)).
			WithTimeout(time.Minute).Should(Equal("running waiting"))
		screenshot(c, "declared-ahead")
		Eventually(evalEventually[string](c, `document.querySelector('[data-testid=build-head]').dataset.status`)).
			WithTimeout(2 * time.Minute).Should(Equal("succeeded"))
		Expect(eval[string](c, `document.querySelector('[data-step="next"]').dataset.status`)).To(Equal("succeeded"))
	}, SpecTimeout(specTimeout))

	It("resumes a failed build from its failed step with the resume button, and shows the reused step's log", func(ctx SpecContext) {
		name := pipelineName("resume")
		setPipeline(ctx, name, "jobs:\n- name: j\n  plan:\n"+taskStep("ok", "echo made it")+taskStep("broken", "exit 1"))
		succeed(ctx, s.adminFly, "unpause-pipeline", "-p", name)
		res, err := s.adminFly.Run(ctx, "trigger-job", "-j", name+"/j", "-w")
		Expect(err).NotTo(HaveOccurred(), res.String())
		Expect(res.ExitCode).To(Equal(1), res.String())
		c := loggedIn()
		open(c, "/teams/main/pipelines/"+name+"/jobs/j/builds/1", `[data-testid=resume]`)
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-testid=resume]`)))).To(Succeed())
		Eventually(evalEventually[string](c, `location.pathname`)).Should(Equal("/teams/main/pipelines/" + name + "/jobs/j/builds/1.1"))
		Eventually(evalEventually[string](c, `document.querySelector('[data-testid=build-head]')?.dataset.status`)).
			WithTimeout(2 * time.Minute).Should(Equal("failed"))
		Eventually(evalEventually[[]string](c, `[...document.querySelectorAll('[data-step]')].map(e => e.dataset.step + ':' + e.dataset.status)`)).
			Should(ConsistOf("ok:succeeded", "broken:failed"))
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-step="ok"] .step-head`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-step="ok"] [data-testid=log]`)))).To(Succeed())
		log := eval[string](c, `document.querySelector('[data-step="ok"] [data-testid=log]').textContent`)
		Expect(log).To(ContainSubstring("reused from build 1"))
		Expect(log).NotTo(ContainSubstring("made it"))
		// Once its events end, the failed 1.1 can be resumed in its turn.
		Eventually(evalEventually[int](c, `document.querySelectorAll('[data-testid=resume]').length`)).Should(Equal(1))
	}, SpecTimeout(specTimeout))

	It("shows a step's audit record: its pod, image, and the artifacts it took and gave with size and digest", func(ctx SpecContext) {
		name := pipelineName("audit")
		setPipeline(ctx, name, `jobs:
- name: j
  plan:
  - task: make
    config:
      platform: linux
      image_resource: {type: registry-image, source: {repository: busybox}}
      outputs: [{name: out}]
      run: {path: sh, args: [-c, 'head -c 3000 /dev/zero > out/f']}
  - task: use
    config:
      platform: linux
      image_resource: {type: registry-image, source: {repository: busybox}}
      inputs: [{name: out}]
      run: {path: sh, args: [-c, 'wc -c out/f']}
`)
		succeed(ctx, s.adminFly, "unpause-pipeline", "-p", name)
		succeed(ctx, s.adminFly, "trigger-job", "-j", name+"/j", "-w")
		c := loggedIn()
		open(c, "/teams/main/pipelines/"+name+"/jobs/j/builds/1", `[data-testid=build-end]`)
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-step="make"] .step-head`)),
			chromedp.Click(chromedp.CSS(`[data-step="make"] [data-testid=audit-toggle]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-step="make"] [data-testid=audit] [data-artifact="out"][data-kind="output"]`)))).To(Succeed())
		row := eval[string](c, `document.querySelector('[data-step="make"] [data-testid=audit] [data-artifact="out"]').textContent`)
		Expect(row).To(MatchRegexp(`output\s*out\s*\d+(\.\d)? (B|KiB)\s*(sha256|blake3):[0-9a-f]+`))
		Expect(eval[string](c, `document.querySelector('[data-step="make"] [data-testid=audit]').textContent`)).To(ContainSubstring("SUCCEEDED"))
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-step="use"] .step-head`)),
			chromedp.Click(chromedp.CSS(`[data-step="use"] [data-testid=audit-toggle]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-step="use"] [data-testid=audit] [data-artifact="out"][data-kind="input"]`)))).To(Succeed())
		screenshot(c, "audit-record")
	}, SpecTimeout(specTimeout))

	It("streams a running build's lines as they come, in color with timestamps", func(ctx SpecContext) {
		script := `printf '\033[31mred alert\033[0m\n'; for i in $(seq 1 40); do echo "line $i"; sleep 0.5; done`
		res := succeed(ctx, s.adminFly, "execute", "--background", "-c", writeFile("task.yml", `platform: linux
image_resource: {type: registry-image, source: {repository: busybox}}
run: {path: sh, args: [-c, `+fmt.Sprintf("%q", script)+`]}
`))
		m := regexp.MustCompile(`executing build (\d+)`).FindStringSubmatch(res.Stdout)
		Expect(m).NotTo(BeNil(), res.Stdout)
		id, err := strconv.Atoi(m[1])
		Expect(err).NotTo(HaveOccurred(), m[1])
		c := loggedIn()
		open(c, fmt.Sprintf("/builds/%d", id), `[data-testid=build-head]`)
		logText := `[...document.querySelectorAll('[data-testid=log] .txt')].map(e => e.textContent).join('\n')`
		Eventually(evalEventually[string](c, logText)).WithTimeout(2 * time.Minute).Should(ContainSubstring("line 3"))
		// Seen while the build still runs: the page did not wait for the end.
		Expect(buildStatus(ctx, id)()).To(Equal("started"))
		Expect(eval[string](c, logText)).NotTo(MatchRegexp(`(?m)^line 40$`))
		Expect(eval[string](c, `document.querySelector('[data-testid=build-head]').dataset.status`)).To(Equal("started"))
		screenshot(c, "running")
		Eventually(evalEventually[string](c, logText)).WithTimeout(time.Minute).Should(MatchRegexp(`(?m)^line 40$`))
		Expect(eval[string](c, `document.querySelector('.ansi-red-fg')?.textContent`)).To(Equal("red alert"))
		Expect(eval[string](c, `document.querySelector('[data-testid=log] .ts').textContent`)).To(MatchRegexp(`^\d\d:\d\d:\d\d$`))
		Eventually(evalEventually[string](c, `document.querySelector('[data-testid=build-head]').dataset.status`)).WithTimeout(30 * time.Second).Should(Equal("succeeded"))
		screenshot(c, "finished")
	}, SpecTimeout(specTimeout))

	It("checks, pins with a comment, unpins and disables a resource's versions", func(ctx SpecContext) {
		name := pipelineName("res")
		setPipeline(ctx, name, chainYAML())
		c := loggedIn()
		open(c, "/teams/main/pipelines/"+name+"/resources/source", `[data-testid=check]`)
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-testid=check]`)))).To(Succeed())
		Eventually(evalEventually[int](c, `document.querySelectorAll('[data-version]').length`)).WithTimeout(2 * time.Minute).Should(BeNumerically(">=", 1))
		Eventually(evalEventually[string](c, `document.querySelector('[data-testid=last-check]')?.dataset.status`)).Should(Equal("succeeded"))
		Expect(chromedp.Do(c,
			chromedp.SendKeys(chromedp.CSS(`[data-testid=pin-comment]`), "hold v1 for the demo"),
			chromedp.Click(chromedp.CSS(`[data-version] [data-testid=pin]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=pinned]`)))).To(Succeed())
		var r struct {
			PinnedVersion map[string]string `json:"pinned_version"`
			PinComment    string            `json:"pin_comment"`
		}
		Eventually(func() string {
			apiGet(ctx, "/api/v1/teams/main/pipelines/"+name+"/resources/source", &r)
			return r.PinComment
		}).
			Should(Equal("hold v1 for the demo"))
		Expect(r.PinnedVersion).NotTo(BeEmpty())
		Eventually(evalEventually[string](c, `document.querySelector('[data-testid=pinned]').textContent`)).Should(ContainSubstring("hold v1 for the demo"))
		screenshot(c, "pinned")
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-testid=unpin]`)))).To(Succeed())
		Eventually(func() map[string]string {
			r.PinnedVersion = nil
			apiGet(ctx, "/api/v1/teams/main/pipelines/"+name+"/resources/source", &r)
			return r.PinnedVersion
		}).Should(BeEmpty())
		// A version's builds: unit triggers on it once the pipeline runs;
		// the version lists it as input_to, and no build as output_of.
		succeed(ctx, s.adminFly, "unpause-pipeline", "-p", name)
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-version] [data-testid=version-builds-toggle]`)))).To(Succeed())
		Eventually(evalEventually[string](c, `document.querySelector('[data-testid=input-to]')?.textContent || ''`)).
			WithTimeout(2 * time.Minute).Should(ContainSubstring("unit #1"))
		Expect(eval[string](c, `document.querySelector('[data-testid=output-of]').textContent`)).To(ContainSubstring("none"))
		// (The chain's next job may have taken the version in by now too.)
		Expect(eval[[]string](c, `[...document.querySelectorAll('[data-testid=input-to] a')].map(a => a.getAttribute('href'))`)).
			To(ContainElement("/teams/main/pipelines/" + name + "/jobs/unit/builds/1"))
		screenshot(c, "version builds")
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-version] [data-testid=toggle-version]`)))).To(Succeed())
		var versions []struct {
			Enabled bool `json:"enabled"`
		}
		Eventually(func() bool {
			apiGet(ctx, "/api/v1/teams/main/pipelines/"+name+"/resources/source/versions", &versions)
			return len(versions) > 0 && !versions[0].Enabled
		}).Should(BeTrue())
		Eventually(evalEventually[bool](c, `document.querySelector('[data-version]').classList.contains('disabled')`)).Should(BeTrue())
		screenshot(c, "disabled")
	}, SpecTimeout(specTimeout))

	It("shows an anonymous visitor exposed pipelines only", func(ctx SpecContext) {
		exposed, hidden := pipelineName("exposed"), pipelineName("hidden")
		setPipeline(ctx, exposed, chainYAML())
		setPipeline(ctx, hidden, chainYAML())
		succeed(ctx, s.adminFly, "expose-pipeline", "-p", exposed)
		c := tab()
		open(c, "/", fmt.Sprintf(`[data-pipeline="main/%s"]`, exposed))
		Expect(eval[bool](c, fmt.Sprintf(`!!document.querySelector('[data-pipeline="main/%s"]')`, hidden))).To(BeFalse())
		Expect(eval[string](c, fmt.Sprintf(`document.querySelector('[data-pipeline="main/%s"] .markers').textContent`, exposed))).To(ContainSubstring("exposed"))
		Expect(eval[bool](c, `!!document.querySelector('[data-testid=login-link]')`)).To(BeTrue())
		screenshot(c, "dashboard")
		open(c, "/teams/main/pipelines/"+exposed, `[data-job="deploy"]`)
		// An exposed pipeline's job builds are listed to anyone, without
		// the buttons that change things.
		open(c, "/teams/main/pipelines/"+exposed+"/jobs/unit", `[data-testid=builds]`)
		Expect(eval[string](c, `document.querySelector('[data-testid=job-title]').textContent`)).To(ContainSubstring("unit"))
		Expect(eval[bool](c, `!!document.querySelector('[data-testid=trigger]')`)).To(BeFalse())
		screenshot(c, "public job")
		open(c, "/teams/main/pipelines/"+hidden, `[data-error]`)
		Expect(eval[string](c, `document.querySelector('[data-error]').dataset.error`)).To(Equal("401"))
		Expect(eval[bool](c, `!!document.querySelector('[data-job]')`)).To(BeFalse())
		screenshot(c, "hidden")

		// A public job's build logs are anyone's; a private job's build is
		// listed and shown, its steps and logs are not (Concourse's rules).
		logs := pipelineName("logs")
		setPipeline(ctx, logs, `resources:
- name: source
  type: mock
  source: {initial_version: v1}
jobs:
- name: open
  public: true
  plan:
  - get: source
`+taskStep("t", "echo public-log-line")+`- name: closed
  plan:
`+taskStep("t", "echo private-log-line"))
		succeed(ctx, s.adminFly, "unpause-pipeline", "-p", logs)
		succeed(ctx, s.adminFly, "expose-pipeline", "-p", logs)
		succeed(ctx, s.adminFly, "trigger-job", "-j", logs+"/open", "-w")
		succeed(ctx, s.adminFly, "trigger-job", "-j", logs+"/closed", "-w")
		open(c, "/teams/main/pipelines/"+logs+"/jobs/open", `[data-build="1"]`)
		open(c, "/teams/main/pipelines/"+logs+"/jobs/open/builds/1", `[data-testid=build-end]`)
		// Two steps that succeeded start folded: unfold the task's.
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-step="t"] .step-head`)))).To(Succeed())
		// The intercept command has a copy button.
		Expect(eval[bool](c, `!!document.querySelector('[data-step="t"] [data-testid=intercept] [data-testid=copy]')`)).To(BeTrue())
		Eventually(evalEventually[string](c, `document.querySelector('[data-testid=steps]').textContent`)).Should(ContainSubstring("public-log-line"))
		Expect(eval[bool](c, `!!document.querySelector('[data-testid=login-for-more]')`)).To(BeFalse())
		screenshot(c, "public build")
		open(c, "/teams/main/pipelines/"+logs+"/jobs/closed", `[data-build="1"]`)
		open(c, "/teams/main/pipelines/"+logs+"/jobs/closed/builds/1", `[data-testid=login-for-more]`)
		Expect(eval[string](c, `document.querySelector('[data-testid=build-head]').dataset.status`)).To(Equal("succeeded"))
		Expect(eval[string](c, `document.body.textContent`)).NotTo(ContainSubstring("private-log-line"))
		screenshot(c, "private build")
		// The resource's versions, and the builds a version went into.
		open(c, "/teams/main/pipelines/"+logs+"/resources/source", `[data-version]`)
		Expect(eval[bool](c, `!!document.querySelector('[data-testid=check]')`)).To(BeFalse())
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-version] [data-testid=version-builds-toggle]`)))).To(Succeed())
		Eventually(evalEventually[string](c, `document.querySelector('[data-testid=input-to]')?.textContent || ''`)).Should(ContainSubstring("open #1"))
		screenshot(c, "public resource")
	}, SpecTimeout(specTimeout))

	It("logs fly in through the browser, and logs out", func(ctx SpecContext) {
		f := newFly("browser")
		// fly also reads a pasted token from stdin: keep it open (at EOF fly
		// gives up), and close it once fly has the token from the browser,
		// as a terminal's fly stops reading then.
		stdin, hold := io.Pipe()
		p, err := f.Start(testenv.FlyCmd{Args: []string{"login", "-c", s.server.URL()}, Stdin: stdin})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(p.Kill)
		DeferCleanup(hold.Close)
		loginURL := regexp.MustCompile(`http://\S+/login\?fly_port=\d+`)
		Eventually(func() string { return p.Stdout.String() }).WithTimeout(30 * time.Second).Should(MatchRegexp(loginURL.String()))
		u := loginURL.FindString(p.Stdout.String())
		Expect(u).To(HavePrefix(s.server.URL()))
		c := tab()
		Expect(chromedp.Do(c,
			chromedp.Navigate(u),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=login-form]`)),
			chromedp.SendKeys(chromedp.CSS(`input[name=username]`), bobUser),
			chromedp.SendKeys(chromedp.CSS(`input[name=password]`), s.bobPassword),
		)).To(Succeed())
		screenshot(c, "login")
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-testid=login-submit]`)))).To(Succeed())
		Eventually(evalEventually[string](c, `document.querySelector('[data-testid=fly-success]')?.dataset.state`)).
			WithTimeout(20*time.Second).Should(Equal("sent"), func() string { return eval[string](c, `document.body.innerText`) })
		Eventually(func() string { return p.Stdout.String() }).WithTimeout(20 * time.Second).Should(ContainSubstring("target saved"))
		Expect(hold.Close()).To(Succeed())
		res, err := p.Wait(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), res.String())
		screenshot(c, "fly success")
		teams := succeed(ctx, f, "teams")
		Expect(teams.Stdout).To(ContainSubstring("main"))
		succeed(ctx, f, "userinfo")

		open(c, "/", `[data-testid=user-menu]`)
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-testid=user-menu]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=logout]`)))).To(Succeed())
		Expect(eval[string](c, `document.querySelector('[data-testid=user-popup]').textContent`)).To(ContainSubstring("owner"))
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-testid=logout]`)))).To(Succeed())
		Eventually(evalEventually[bool](c, `!!document.querySelector('[data-testid=login-link]')`)).Should(BeTrue())
		Expect(eval[string](c, `localStorage.getItem("porter.token") || ""`)).To(BeEmpty())
		// The logout ended bob's sessions: fly's token is refused now too.
		refused(ctx, f, "not authorized", "userinfo")
		// A wrong password says so on the page.
		open(c, "/login", `[data-testid=login-form]`)
		Expect(chromedp.Do(c,
			chromedp.SendKeys(chromedp.CSS(`input[name=username]`), bobUser),
			chromedp.SendKeys(chromedp.CSS(`input[name=password]`), "wrong"),
			chromedp.Click(chromedp.CSS(`[data-testid=login-submit]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=login-error]`)))).To(Succeed())
		Expect(eval[string](c, `document.querySelector('[data-testid=login-error]').textContent`)).To(ContainSubstring("Invalid username or password"))
	}, SpecTimeout(specTimeout))
})

var _ = Describe("single sign-on", func() {
	It("logs fly in with OIDC at a real Dex, with the teams its group is granted", func(ctx SpecContext) {
		succeed(ctx, s.adminFly, "set-team", "-n", "sso-devs", "--oidc-group", ssoGroup, "--non-interactive")
		succeed(ctx, s.adminFly, "set-team", "-n", "sso-others", "--oidc-user", "someone-else", "--oidc-group", "other-group", "--non-interactive")
		detail := succeed(ctx, s.adminFly, "teams", "-d").Stdout
		Expect(detail).To(MatchRegexp(`sso-devs/owner\s+none\s+oidc:`+ssoGroup), detail)
		Expect(detail).To(MatchRegexp(`sso-others/owner\s+oidc:someone-else\s+oidc:other-group`), detail)

		f := newFly("sso")
		stdin, hold := io.Pipe()
		p, err := f.Start(testenv.FlyCmd{Args: []string{"login", "-n", "sso-devs", "-c", s.server.URL()}, Stdin: stdin})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(p.Kill)
		DeferCleanup(hold.Close)
		loginURL := regexp.MustCompile(`http://\S+/login\?fly_port=\d+`)
		Eventually(func() string { return p.Stdout.String() }).WithTimeout(30 * time.Second).Should(MatchRegexp(loginURL.String()))
		c := tab()
		Expect(chromedp.Do(c,
			chromedp.Navigate(loginURL.FindString(p.Stdout.String())),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=login-oidc]`)),
		)).To(Succeed())
		Expect(eval[string](c, `document.querySelector('[data-testid=login-oidc]').textContent`)).To(Equal("log in with Dex"))
		screenshot(c, "login page")
		// Dex's own password page.
		Expect(chromedp.Do(c,
			chromedp.Click(chromedp.CSS(`[data-testid=login-oidc]`)),
			chromedp.WaitVisible(chromedp.CSS(`#login`)),
		)).To(Succeed())
		Expect(eval[string](c, `location.href`)).To(HavePrefix(s.dex.Issuer()))
		Expect(chromedp.Do(c,
			chromedp.SendKeys(chromedp.CSS(`#login`), s.ssoUser.Email),
			chromedp.SendKeys(chromedp.CSS(`#password`), s.ssoUser.Password),
		)).To(Succeed())
		screenshot(c, "dex")
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`#submit-login`)))).To(Succeed())
		Eventually(evalEventually[string](c, `document.querySelector('[data-testid=fly-success]')?.dataset.state`)).
			WithTimeout(20*time.Second).Should(Equal("sent"), func() string { return eval[string](c, `location.href + "\n" + document.body.innerText`) })
		// The token left the address bar.
		Expect(eval[string](c, `location.hash`)).To(BeEmpty())
		Eventually(func() string { return p.Stdout.String() }).WithTimeout(20 * time.Second).Should(ContainSubstring("target saved"))
		Expect(hold.Close()).To(Succeed())
		res, err := p.Wait(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), res.String())

		info := succeed(ctx, f, "userinfo").Stdout
		// (Other specs may grant the group roles on their own teams.)
		Expect(info).To(MatchRegexp(`carol\s+(\S+,)?sso-devs/owner`), info)
		Expect(info).NotTo(ContainSubstring("sso-others"))
		targets := succeed(ctx, f, "targets").Stdout
		Expect(targets).To(MatchRegexp(`sso\s+\S+\s+sso-devs\s+\w{3}, \d{2} \w{3} \d{4}`), targets)
		Expect(targets).NotTo(ContainSubstring("n/a"))
		teams := succeed(ctx, f, "teams").Stdout
		Expect(teams).To(ContainSubstring("sso-devs"))
		Expect(teams).NotTo(ContainSubstring("sso-others"))
		succeed(ctx, f, "pipelines")
		refused(ctx, f, "you do not have a role on team 'sso-others'", "pipelines", "--team", "sso-others")
	}, SpecTimeout(specTimeout))
})

var _ = Describe("single sign-on roles", func() {
	// Roles name OIDC users by --oidc-user-name-key (preferred_username
	// here, which Dex's static users cannot set themselves) and nothing
	// else: a user who makes another claim say someone else's name gets
	// none of that one's roles.
	It("keeps oidc:<name> roles from a Dex user who renames itself to another's name", func(ctx SpecContext) {
		succeed(ctx, s.adminFly, "set-team", "-n", "sso-alice", "--oidc-user", s.alice.UserName, "--non-interactive")
		DeferCleanup(func(ctx SpecContext) {
			// Dex as the suite started it, whatever happened here.
			Expect(s.dex.Restart(ctx, s.dexUsers)).To(Succeed())
		})

		token, refused := ssoLogin(ctx, s.alice)
		Expect(refused).To(BeEmpty())
		Expect(userInfo(ctx, token).Teams).To(HaveKeyWithValue("sso-alice", []string{"owner"}))
		token, refused = ssoLogin(ctx, s.mallory)
		Expect(refused).To(BeEmpty())
		Expect(userInfo(ctx, token).Teams).NotTo(HaveKey("sso-alice"))

		// Mallory's display name becomes "alice" and its preferred_username
		// goes: the name is not a fallback for it, so the login is refused
		// (before, the name named the user and mallory got alice's team).
		renamed := s.mallory
		renamed.UserName, renamed.Name = "", s.alice.UserName
		Expect(s.dex.Restart(ctx, []dex.User{s.ssoUser, s.alice, renamed})).To(Succeed())
		_, refused = ssoLogin(ctx, renamed)
		Expect(refused).To(ContainSubstring(`no "preferred_username" claim`))

		// With its own preferred_username beside the name "alice", mallory
		// is mallory, with its own subject's session and no alice's team.
		renamed.UserName = s.mallory.UserName
		Expect(s.dex.Restart(ctx, []dex.User{s.ssoUser, s.alice, renamed})).To(Succeed())
		token, refused = ssoLogin(ctx, renamed)
		Expect(refused).To(BeEmpty())
		info := userInfo(ctx, token)
		Expect(info.UserName).To(Equal(s.mallory.UserName))
		Expect(info.Teams).NotTo(HaveKey("sso-alice"))

		// Alice still gets in, with her team.
		token, refused = ssoLogin(ctx, s.alice)
		Expect(refused).To(BeEmpty())
		Expect(userInfo(ctx, token).Teams).To(HaveKeyWithValue("sso-alice", []string{"owner"}))
	}, SpecTimeout(specTimeout))
})

// ssoLogin logs u in through Porter's OIDC connector and Dex's password
// form with a plain HTTP client (no browser: a few requests) and returns the
// token Porter hands to its login page, or what Porter said refusing.
func ssoLogin(ctx context.Context, u dex.User) (token, refused string) {
	GinkgoHelper()
	jar, err := cookiejar.New(nil)
	Expect(err).NotTo(HaveOccurred())
	porter, err := url.Parse(s.server.URL())
	Expect(err).NotTo(HaveOccurred())
	client := &http.Client{Jar: jar, Timeout: 30 * time.Second,
		// Stop at Porter's login page: the token is in the fragment of
		// the address the callback sends the browser to.
		CheckRedirect: func(req *http.Request, _ []*http.Request) error {
			if req.URL.Host == porter.Host && req.URL.Path == "/login" {
				return http.ErrUseLastResponse
			}
			return nil
		}}
	do := func(req *http.Request) (*http.Response, string) {
		GinkgoHelper()
		res, err := client.Do(req)
		Expect(err).NotTo(HaveOccurred())
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		Expect(err).NotTo(HaveOccurred())
		return res, string(body)
	}
	// Porter sends the browser to Dex, which shows its password form.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.server.URL()+"/sky/issuer/auth/oidc", nil)
	Expect(err).NotTo(HaveOccurred())
	res, body := do(req)
	Expect(res.StatusCode).To(Equal(http.StatusOK), body)
	Expect(res.Request.URL.String()).To(HavePrefix(s.dex.Issuer()), body)
	// The form posts back to where it is.
	form := url.Values{"login": {u.Email}, "password": {u.Password}}
	req, err = http.NewRequestWithContext(ctx, http.MethodPost, res.Request.URL.String(), strings.NewReader(form.Encode()))
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, body = do(req)
	if res.StatusCode == http.StatusForbidden && res.Request.URL.Host == porter.Host {
		return "", body
	}
	Expect(res.StatusCode).To(Equal(http.StatusFound), body)
	loc, err := url.Parse(res.Header.Get("Location"))
	Expect(err).NotTo(HaveOccurred())
	frag, err := url.ParseQuery(loc.EscapedFragment())
	Expect(err).NotTo(HaveOccurred())
	Expect(frag.Get("token")).NotTo(BeEmpty(), loc.String())
	return frag.Get("token"), ""
}

// userInfo is GET /api/v1/user with token.
func userInfo(ctx context.Context, token string) concourse.UserInfo {
	GinkgoHelper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.server.URL()+"/api/v1/user", nil)
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(res.Body)
		Fail(fmt.Sprintf("GET /api/v1/user with the login's token %q: %s %s", token, res.Status, body))
	}
	var info concourse.UserInfo
	Expect(json.NewDecoder(res.Body).Decode(&info)).To(Succeed())
	return info
}

// refused runs fly, which must fail saying why (want), not for any other
// reason (a wrong flag, a server down).
func refused(ctx context.Context, f *testenv.Fly, want string, args ...string) {
	GinkgoHelper()
	res, err := f.Run(ctx, args...)
	Expect(err).NotTo(HaveOccurred(), res.String())
	Expect(res.ExitCode).NotTo(Equal(0), res.String())
	Expect(res.Stderr).To(ContainSubstring(want), res.String())
}

// flyListener stands for fly's token listener on 127.0.0.1 (fly's
// listenForTokenCallback: CORS for the target, Private Network Access's
// preflight) and counts the requests that reach it.
type flyListener struct {
	port string
	hits chan string
}

func newFlyListener() *flyListener {
	GinkgoHelper()
	l := &flyListener{hits: make(chan string, 16)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", s.server.URL())
		if r.Header.Get("Access-Control-Request-Private-Network") == "true" {
			w.Header().Set("Access-Control-Allow-Private-Network", "true")
		}
		l.hits <- r.Method + " " + r.URL.String()
	}))
	DeferCleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	Expect(err).NotTo(HaveOccurred())
	l.port = u.Port()
	return l
}

var _ = Describe("the pages' security", func() {
	It("sends no token to a fly_port from a page this tab did not reach by its own login, nor from a build log's link", func(ctx SpecContext) {
		fly := newFly("osc8")
		// Its own fly target: admin's token is the suite's, and this is admin's too.
		res, err := fly.Login(ctx, s.server.URL(), adminUser, s.adminPassword)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), res.String())
		l := newFlyListener()
		c := loggedIn()
		// Another site links to /fly_success: the logged-in user's token
		// must not go to whatever listens on that port.
		open(c, "/fly_success?fly_port="+l.port, `[data-testid=fly-refused]`)
		Expect(eval[string](c, `document.querySelector('[data-testid=fly-success]').dataset.state`)).To(Equal("refused"))
		screenshot(c, "fly success from elsewhere")

		// A build prints an OSC-8 link to the same page on this server.
		link := s.server.URL() + "/fly_success?fly_port=" + l.port
		script := fmt.Sprintf(`printf '\033]8;;%s\033\\open me\033]8;;\033\\\n'`, link)
		out := succeed(ctx, fly, "execute", "-c", writeFile("task.yml", `platform: linux
image_resource: {type: registry-image, source: {repository: busybox}}
run: {path: sh, args: [-c, `+fmt.Sprintf("%q", script)+`]}
`))
		m := regexp.MustCompile(`executing build (\d+)`).FindStringSubmatch(out.Stdout)
		Expect(m).NotTo(BeNil(), out.Stdout)
		open(c, "/builds/"+m[1], `[data-testid=log] a[data-log-link]`)
		Expect(eval[[]string](c, `(() => { const a = document.querySelector('[data-testid=log] a'); return [a.getAttribute('href'), a.target, a.rel] })()`)).
			To(Equal([]string{link, "_blank", "noopener noreferrer"}))
		screenshot(c, "log link")
		before := eval[string](c, `location.href`)
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-testid=log] a`)))).To(Succeed())
		// The link opened a tab of its own (not routed in this one), whose
		// page refuses too.
		var opened target.ID
		Eventually(func() bool {
			ts, err := chromedp.Targets(c)
			Expect(err).NotTo(HaveOccurred())
			for _, t := range ts {
				if t.Type == "page" && strings.Contains(t.URL, "/fly_success") {
					opened = t.TargetID
					return true
				}
			}
			return false
		}).Should(BeTrue())
		Expect(eval[string](c, `location.href`)).To(Equal(before))
		nc, cancel := chromedp.NewContext(c, chromedp.WithTargetID(opened))
		DeferCleanup(cancel)
		Eventually(evalEventually[string](nc, `document.querySelector('[data-testid=fly-success]')?.dataset.state || ''`)).Should(Equal("refused"))
		// Whatever else ran, nothing reached the listener.
		Consistently(l.hits).WithTimeout(2 * time.Second).ShouldNot(Receive())
	}, SpecTimeout(specTimeout))

	It("ignores a /login#token=… this tab began no login for, and keeps the user's token", func(ctx SpecContext) {
		c := loggedIn()
		// (From another page: from /login itself it would be no page load.)
		open(c, "/", `[data-testid=user-menu]`)
		open(c, "/login#token=someone-elses-token", `[data-testid=fragment-refused]`)
		Expect(eval[string](c, `localStorage.getItem("porter.token")`)).To(Equal(s.adminToken))
		Expect(eval[string](c, `location.hash`)).To(BeEmpty())
		// With a nonce made up by the link's author too.
		open(c, "/login?redirect=/#token=someone-elses-token&tab_nonce=made-up-nonce-0000", `[data-testid=fragment-refused]`)
		Expect(eval[string](c, `localStorage.getItem("porter.token")`)).To(Equal(s.adminToken))
		screenshot(c, "fragment refused")
	}, SpecTimeout(specTimeout))
})

var _ = Describe("the build page", func() {
	It("settles its steps at the end, shows a get's version and metadata, links the job's other builds and has keys", func(ctx SpecContext) {
		name := pipelineName("shape")
		setPipeline(ctx, name, `resources:
- name: src
  type: mock
  source:
    initial_version: v1
    metadata: [{name: commit, value: abc123}]
jobs:
- name: shape
  plan:
  - get: src
  - task: flaky
    attempts: 3
    config: &true
      platform: linux
      image_resource: {type: registry-image, source: {repository: busybox}}
      run: {path: "true"}
  - task: fine
    config: *true
    on_failure:
      task: cleanup
      config: *true
`)
		succeed(ctx, s.adminFly, "unpause-pipeline", "-p", name)
		succeed(ctx, s.adminFly, "trigger-job", "-j", name+"/shape", "-w")
		succeed(ctx, s.adminFly, "trigger-job", "-j", name+"/shape", "-w")
		c := loggedIn()
		page := "/teams/main/pipelines/" + name + "/jobs/shape/builds/"
		open(c, page+"2", `[data-testid=build-end]`)
		steps := `[...document.querySelectorAll('[data-step]')].map(e => e.dataset.step + ':' + e.dataset.status)`
		// The retry's first attempt ran; the later ones and the hook did not,
		// and they are folded, with no intercept command.
		Eventually(evalEventually[[]string](c, steps)).Should(Equal([]string{"src:succeeded",
			"flaky:succeeded", "flaky:not run", "flaky:not run", "fine:succeeded", "cleanup:not run"}))
		Expect(eval[int](c, `document.querySelectorAll('[data-status="not run"] .step-body').length`)).To(Equal(0))
		// A get shows the version it fetched and its metadata.
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-step="src"] .step-head`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-step="src"] [data-testid=get-version]`)))).To(Succeed())
		Expect(eval[string](c, `document.querySelector('[data-step="src"] [data-testid=get-version]').innerText`)).
			To(And(MatchRegexp(`version\s+v1`), MatchRegexp(`commit\s+abc123`)))
		// The times in full on hover.
		Expect(eval[string](c, `document.querySelector('[data-testid=build-times]').title`)).To(MatchRegexp(`started .*\d{4}.*\n.*ended`))
		Expect(eval[string](c, `document.querySelector('[data-step="fine"] [data-testid=step-times]').title`)).To(MatchRegexp(`started .*\d{4}.*, ended`))
		// Build 1 is the previous one, and there is no next; buttons to
		// rerun and trigger sit in the header.
		Expect(eval[string](c, `document.querySelector('[data-testid=prev-build]').getAttribute('href')`)).To(Equal(page + "1"))
		// (Those come once the page knows the user may operate the job.)
		Eventually(evalEventually[bool](c, `!document.querySelector('[data-testid=next-build]') && !!document.querySelector('[data-testid=rerun-build]') && !!document.querySelector('[data-testid=trigger-build]')`)).Should(BeTrue())
		// ? shows the keys; h goes to the previous build, l back.
		Expect(chromedp.Do(c, chromedp.KeyEvent("?"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=shortcuts]`)))).To(Succeed())
		Expect(eval[string](c, `document.querySelector('[data-testid=shortcuts]').innerText`)).To(And(ContainSubstring("previous build"), ContainSubstring("abort")))
		screenshot(c, "build 2 with help")
		Expect(chromedp.Do(c, chromedp.KeyEvent("h"))).To(Succeed())
		Eventually(evalEventually[string](c, `location.pathname`)).Should(Equal(page + "1"))
		Eventually(evalEventually[string](c, `document.querySelector('[data-testid=next-build]')?.getAttribute('href') || ''`)).Should(Equal(page + "2"))
		Expect(eval[bool](c, `!document.querySelector('[data-testid=prev-build]')`)).To(BeTrue())
		Expect(chromedp.Do(c, chromedp.KeyEvent("l"))).To(Succeed())
		Eventually(evalEventually[string](c, `location.pathname`)).Should(Equal(page + "2"))
		// The header's trigger starts build 3 and opens it.
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-testid=trigger-build]`)))).To(Succeed())
		Eventually(evalEventually[string](c, `location.pathname`)).Should(Equal(page + "3"))
		Eventually(evalEventually[string](c, `document.querySelector('[data-testid=build-head]')?.dataset.status`)).WithTimeout(2 * time.Minute).Should(Equal("succeeded"))
		screenshot(c, "build 3")
	}, SpecTimeout(specTimeout))
})

var _ = Describe("instanced pipelines and the dashboard's address", func() {
	It("tells instances apart on the dashboard, opens the address fly prints, keeps ?search= and serves /dashboard and /favicon.ico", func(ctx SpecContext) {
		name := pipelineName("inst")
		yaml := writeFile("p.yml", chainYAML())
		out := succeed(ctx, s.adminFly, "set-pipeline", "-n", "-p", name, "-c", yaml, "-i", "branch=main").Stdout
		succeed(ctx, s.adminFly, "set-pipeline", "-n", "-p", name, "-c", yaml, "-i", "branch=dev")
		// fly prints the instance's address with its vars as the query.
		printed := regexp.MustCompile(`http://\S+/teams/main/pipelines/` + name + `\?\S+`).FindString(out)
		Expect(printed).To(ContainSubstring("vars.branch="), out)
		c := loggedIn()
		u, err := url.Parse(printed)
		Expect(err).NotTo(HaveOccurred())
		open(c, u.RequestURI(), `[data-testid=graph] [data-job="unit"]`)
		Expect(eval[bool](c, `!document.querySelector('[data-error]')`)).To(BeTrue())
		Expect(eval[string](c, `document.querySelector('.crumbs').textContent`)).To(ContainSubstring("branch:main"))
		// The graph's links keep the instance: the job's page opens.
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-job="unit"]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=job-title]`)))).To(Succeed())
		Expect(eval[string](c, `location.search`)).To(ContainSubstring("vars.branch="))
		Expect(eval[bool](c, `!document.querySelector('[data-error]')`)).To(BeTrue())

		// /dashboard is the dashboard; its filter comes from ?search= and
		// goes back there.
		open(c, "/dashboard?search="+name, fmt.Sprintf(`[data-pipeline="main/%s"]`, name))
		Expect(eval[string](c, `document.querySelector('[data-testid=filter]').value`)).To(Equal(name))
		cards := fmt.Sprintf(`[...document.querySelectorAll('[data-pipeline="main/%s"]')]`, name)
		Eventually(evalEventually[[]string](c, cards+`.map(e => e.dataset.instanceVars).sort()`)).Should(Equal([]string{"branch:dev", "branch:main"}))
		Expect(eval[[]string](c, cards+`.map(e => e.querySelector('[data-testid=instance-vars]').textContent).sort()`)).To(Equal([]string{"branch:dev", "branch:main"}))
		screenshot(c, "dashboard with instances")
		// Each card opens its own instance.
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-pipeline="main/%s"][data-instance-vars="branch:dev"] .card-head a`, name))),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=graph] [data-job="unit"]`)))).To(Succeed())
		Expect(eval[string](c, `document.querySelector('.crumbs').textContent`)).To(ContainSubstring("branch:dev"))
		screenshot(c, "dev instance")
		open(c, "/dashboard", `[data-testid=filter]`)
		entries := eval[int](c, `history.length`)
		Expect(chromedp.Do(c, chromedp.SendKeys(chromedp.CSS(`[data-testid=filter]`), "team:main"))).To(Succeed())
		Eventually(evalEventually[string](c, `new URLSearchParams(location.search).get('search')`)).Should(Equal("team:main"))
		Expect(eval[int](c, `history.length`)).To(Equal(entries), "no history entry per key")
		// The icon the browser asks for.
		icon, err := chromedp.Run(c, chromedp.Evaluate[[]string](`fetch('/favicon.ico').then(r => [String(r.status), r.headers.get('content-type')])`, chromedp.EvalAwaitPromise))
		Expect(err).NotTo(HaveOccurred())
		Expect(icon).To(Equal([]string{"200", "image/x-icon"}))
	}, SpecTimeout(specTimeout))
})

var _ = Describe("the resource page", func() {
	It("shows a version's metadata from the get that fetched it, and what a failed check said", func(ctx SpecContext) {
		name := pipelineName("meta")
		setPipeline(ctx, name, `resources:
- name: src
  type: mock
  source:
    initial_version: v1
    metadata: [{name: commit, value: abc123}]
- name: broken
  type: mock
  source: {check_failure: "the registry said no to us"}
jobs:
- name: use
  plan:
  - get: src
- name: never
  plan:
  - get: broken
`)
		succeed(ctx, s.adminFly, "unpause-pipeline", "-p", name)
		succeed(ctx, s.adminFly, "check-resource", "-r", name+"/src")
		c := loggedIn()
		page := "/teams/main/pipelines/" + name + "/resources/"
		open(c, page+"src", `[data-version]`)
		// A check reports no metadata: the version has none until a get.
		Expect(eval[string](c, `document.querySelector('[data-version] td:nth-child(2)').textContent`)).To(BeEmpty())
		succeed(ctx, s.adminFly, "trigger-job", "-j", name+"/use", "-w")
		var vs []concourse.ResourceVersion
		apiGet(ctx, "/api/v1/teams/main/pipelines/"+name+"/resources/src/versions", &vs)
		Expect(vs).To(HaveLen(1))
		Expect(vs[0].Metadata).To(ConsistOf(concourse.MetadataField{Name: "commit", Value: "abc123"}))
		Eventually(evalEventually[string](c, `document.querySelector('[data-version] td:nth-child(2)').textContent`)).
			WithTimeout(10 * time.Second).Should(Equal("commit: abc123"))
		screenshot(c, "metadata")

		// Paused, the pipeline runs no periodic checks that would replace
		// the one clicked here while the screenshot is taken.
		succeed(ctx, s.adminFly, "pause-pipeline", "-p", name)
		open(c, page+"broken", `[data-testid=check]`)
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-testid=check]`)))).To(Succeed())
		Eventually(evalEventually[string](c, `document.querySelector('[data-testid=check-error]')?.textContent || ''`)).
			WithTimeout(2 * time.Minute).Should(ContainSubstring("the registry said no to us"))
		screenshot(c, "check error")
		// The check's build page: its step ended failed, not "initializing".
		open(c, eval[string](c, `document.querySelector('[data-testid=last-check] a').getAttribute('href')`), `[data-testid=build-end]`)
		Eventually(evalEventually[[]string](c, `[...document.querySelectorAll('[data-step]')].map(e => e.dataset.status)`)).
			Should(Equal([]string{"failed"}))
		screenshot(c, "check build")
	}, SpecTimeout(specTimeout))
})

var _ = Describe("lists in pages", func() {
	It("pages a job's builds and a resource's versions with the API's Link headers", func(ctx SpecContext) {
		name := pipelineName("pages")
		setPipeline(ctx, name, `resources:
- name: r
  type: mock
  source: {versions: [a, b, c]}
jobs:
- name: j
  plan:
  - get: r
`)
		succeed(ctx, s.adminFly, "unpause-pipeline", "-p", name)
		// From a, the mock's check reports a, b and c.
		succeed(ctx, s.adminFly, "check-resource", "-r", name+"/r", "--from", "version:a")
		for range 3 {
			succeed(ctx, s.adminFly, "trigger-job", "-j", name+"/j", "-w")
		}
		c := loggedIn()
		job := "/teams/main/pipelines/" + name + "/jobs/j"
		builds := `[...document.querySelectorAll('[data-build]')].map(e => e.dataset.build)`
		// Two a page (limit= in the address; 100 by default, as Concourse).
		open(c, job+"?limit=2", `[data-testid=older]`)
		Eventually(evalEventually[[]string](c, builds)).Should(Equal([]string{"3", "2"}))
		Expect(eval[bool](c, `!document.querySelector('[data-testid=newer]')`)).To(BeTrue())
		screenshot(c, "job page 1")
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-testid=older]`)))).To(Succeed())
		Eventually(evalEventually[[]string](c, builds)).Should(Equal([]string{"1"}))
		Expect(eval[bool](c, `!document.querySelector('[data-testid=older]')`)).To(BeTrue())
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-testid=newer]`)))).To(Succeed())
		Eventually(evalEventually[[]string](c, builds)).Should(Equal([]string{"3", "2"}))

		versions := `[...document.querySelectorAll('[data-version] code')].map(e => e.textContent)`
		open(c, "/teams/main/pipelines/"+name+"/resources/r?limit=2", `[data-testid=older]`)
		Eventually(evalEventually[[]string](c, versions)).Should(Equal([]string{"version: c", "version: b"}))
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-testid=older]`)))).To(Succeed())
		Eventually(evalEventually[[]string](c, versions)).Should(Equal([]string{"version: a"}))
		Expect(eval[bool](c, `!!document.querySelector('[data-testid=newer]')`)).To(BeTrue())
		screenshot(c, "versions page 2")
	}, SpecTimeout(specTimeout))
})
