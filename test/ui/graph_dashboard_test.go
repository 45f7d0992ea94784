package ui_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// groupsYAML has a group "build" (unit puts image; never gets a resource
// whose check fails; slow sleeps), a group "ship" whose one job takes
// unit's versions (from outside its group), and "all". source has an icon
// and is pinned in the config.
func groupsYAML() string {
	return `groups:
- {name: build, jobs: [unit, never, slow]}
- {name: ship, jobs: [deploy]}
- {name: all, jobs: [unit, deploy, never, slow]}
resources:
- name: source
  type: mock
  icon: git
  version: {version: v1}
  source: {initial_version: v1}
- name: image
  type: mock
  icon: docker
  source: {initial_version: i1}
- name: broken
  type: mock
  source: {check_failure: "the registry said no to us"}
jobs:
- name: unit
  plan:
  - get: source
    trigger: true
  - put: image
    params: {version: i2}
- name: deploy
  plan:
  - get: source
    passed: [unit]
  - get: image
    passed: [unit]
    trigger: true
- name: never
  plan:
  - get: broken
- name: slow
  plan:
` + taskStep("sleep", "echo sleeping; sleep 300")
}

// edgesShown are the graph's edges as from->to:kind:trigger, sorted.
const edgesShown = `[...document.querySelectorAll('[data-edge]')].map(e => e.dataset.edge + ':' + e.dataset.kind + ':' + e.dataset.trigger).sort()`

var _ = Describe("the pipeline graph", func() {
	It("routes passed: through the resource, keeps other groups' inputs, draws puts solid, icons, pinned, running and check errors apart, and zooms and pans", func(ctx SpecContext) {
		name := pipelineName("graph")
		setPipeline(ctx, name, groupsYAML())
		succeed(ctx, s.adminFly, "unpause-pipeline", "-p", name)
		// The check fails: fly says so, and the resource's last check is a failed build.
		res, err := s.adminFly.Run(ctx, "check-resource", "-r", name+"/broken")
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		succeed(ctx, s.adminFly, "trigger-job", "-j", name+"/slow")
		c := loggedIn()
		page := "/teams/main/pipelines/" + name

		// "all": unit's versions reach deploy through the resources, image
		// from unit's put, source through a node of its own.
		open(c, page+"?group=all", `[data-testid=graph] [data-job="deploy"]`)
		Expect(eval[[]string](c, edgesShown)).To(Equal([]string{
			"broken->never:input:false",
			"image->deploy:passed:true",
			"source->deploy:passed:false",
			"source->unit:input:true",
			"unit->image:output:false",
			"unit->source:passed:false",
		}))
		Expect(eval[[]string](c, `[...document.querySelectorAll('[data-resource]')].map(e => e.dataset.resource + ':' + e.dataset.role).sort()`)).
			To(Equal([]string{"broken:input", "image:output", "source:constrained", "source:input"}))
		// Left to right: source, unit, image, deploy.
		xs := eval[[]float64](c, `['[data-resource="source"][data-role="input"]', '[data-job="unit"]', '[data-resource="image"]', '[data-job="deploy"]'].map(s => document.querySelector(s).getBoundingClientRect().x)`)
		Expect(xs[0]).To(BeNumerically("<", xs[1]))
		Expect(xs[1]).To(BeNumerically("<", xs[2]))
		Expect(xs[2]).To(BeNumerically("<", xs[3]))
		// A put and what a job passes on are drawn solid, an input without
		// trigger dashed (Concourse's).
		dash := func(edge string) string {
			return eval[string](c, fmt.Sprintf(`getComputedStyle(document.querySelector('[data-edge=%q]')).strokeDasharray`, edge))
		}
		Expect(dash("unit->image")).To(Equal("none"))
		Expect(dash("unit->source")).To(Equal("none"))
		Expect(dash("source->unit")).To(Equal("none"))
		Expect(dash("broken->never")).NotTo(Equal("none"))
		Expect(dash("source->deploy")).NotTo(Equal("none"))
		// Resource icons come from Material Design Icons, by the config's name.
		Eventually(evalEventually[[]string](c, `[...document.querySelectorAll('[data-resource] path.icon')].map(e => e.dataset.icon + ':' + (e.getAttribute('d').length > 20)).sort()`)).
			Should(Equal([]string{"docker:true", "git:true", "git:true"}))
		Expect(eval[bool](c, `!document.querySelector('[data-resource="broken"] path.icon')`)).To(BeTrue())
		// Pinned, running and a failed check each look their own.
		Eventually(evalEventually[bool](c, `!!document.querySelector('[data-job="slow"][data-running="true"] .running-ring')`)).
			WithTimeout(2 * time.Minute).Should(BeTrue())
		pinned := eval[[]string](c, `(() => { const r = getComputedStyle(document.querySelector('[data-resource="source"][data-role="input"] rect')); return [r.stroke, r.strokeDasharray, r.fill] })()`)
		ring := eval[[]string](c, `(() => { const r = getComputedStyle(document.querySelector('[data-job="slow"] .running-ring')); return [r.stroke, r.strokeDasharray, r.animationName] })()`)
		failed := eval[[]string](c, `(() => { const r = getComputedStyle(document.querySelector('[data-resource="broken"] rect')); return [r.stroke, r.strokeDasharray] })()`)
		plain := eval[[]string](c, `(() => { const r = getComputedStyle(document.querySelector('[data-resource="image"] rect')); return [r.stroke, r.fill] })()`)
		Expect(eval[string](c, `document.querySelector('[data-resource="source"][data-role="input"]').dataset.pinned`)).To(Equal("true"))
		Expect(pinned[1]).To(Equal("none"), "a pinned resource's outline is solid")
		Expect(ring[1]).NotTo(Equal("none"), "a running job's ring is dashed")
		Expect(ring[2]).To(Equal("march"))
		Expect(pinned[0]).NotTo(Equal(ring[0]))
		Expect(pinned[2]).NotTo(Equal(plain[1]), "a pinned resource is filled unlike an unpinned one")
		Expect(failed[0]).NotTo(Equal(pinned[0]))
		Expect(failed[0]).NotTo(Equal(plain[0]))
		Expect(eval[bool](c, `!!document.querySelector('[data-resource="broken"][data-check-failed="true"] [data-testid=check-error-mark]')`)).To(BeTrue())
		Expect(eval[string](c, `document.querySelector('[data-resource="broken"] title').textContent`)).To(ContainSubstring("check failed"))
		Expect(eval[string](c, `document.querySelector('[data-resource="source"][data-role="input"] title').textContent`)).To(ContainSubstring("pinned: version: v1"))
		screenshot(c, "all")

		// Zoom with the wheel around the pointer, pan by dragging, reset.
		viewport := `document.querySelector('[data-testid=viewport]').getAttribute('transform')`
		// This graph fits the window: it starts at its own size.
		home := eval[string](c, viewport)
		Expect(home).To(Equal("translate(0,0) scale(1)"))
		box := eval[[]float64](c, `(() => { const r = document.querySelector('[data-testid=graph]').getBoundingClientRect(); return [r.x, r.y, r.width, r.height] })()`)
		px, py := box[0]+box[2]/2, box[1]+box[3]/2
		// The protocol wants both deltas, and leaves a zero one out of its JSON.
		wheel := func(p *input.DispatchMouseEventParams) { p.DeltaX, p.DeltaY = 1e-6, -400 }
		Expect(chromedp.Do(c, chromedp.MouseEvent(chromedp.MouseWheel, px, py, wheel))).To(Succeed())
		Eventually(evalEventually[float64](c, `+document.querySelector('[data-testid=viewport]').dataset.zoom`)).Should(BeNumerically(">", 1.2))
		screenshot(c, "zoomed")
		before := eval[string](c, viewport)
		// From the drawing's bottom left corner, inside its margin: no node there.
		bx, by := box[0]+6, box[1]+box[3]-6
		held := func(buttons int64) chromedp.MouseOption {
			return func(p *input.DispatchMouseEventParams) {
				p.Button, p.Buttons, p.ClickCount = input.MouseButtonLeft, buttons, 1
			}
		}
		Expect(chromedp.Do(c,
			chromedp.MouseEvent(chromedp.MousePressed, bx, by, held(1)),
			chromedp.MouseEvent(chromedp.MouseMoved, bx+60, by-40, held(1)),
			chromedp.MouseEvent(chromedp.MouseMoved, bx+120, by-80, held(1)),
			chromedp.MouseEvent(chromedp.MouseReleased, bx+120, by-80, held(0)),
		)).To(Succeed())
		Eventually(evalEventually[string](c, viewport)).ShouldNot(Equal(before))
		Expect(eval[string](c, `location.pathname`)).To(Equal(page), "a drag is no click on a link")
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-testid=zoom-reset]`)))).To(Succeed())
		Eventually(evalEventually[string](c, viewport)).Should(Equal(home))

		// "ship": deploy's inputs come from unit, outside the group: they
		// are drawn, marked so, with no edge from the hidden job.
		open(c, page+"?group=ship", `[data-testid=graph] [data-job="deploy"]`)
		Expect(eval[[]string](c, edgesShown)).To(Equal([]string{"image->deploy:passed:true", "source->deploy:passed:false"}))
		Expect(eval[[]string](c, `[...document.querySelectorAll('[data-resource]')].map(e => e.dataset.resource + ':' + e.dataset.upstream + ':' + e.dataset.outside).sort()`)).
			To(Equal([]string{"image:unit:true", "source:unit:true"}))
		Expect(eval[bool](c, `!document.querySelector('[data-job="unit"]')`)).To(BeTrue())
		Expect(eval[string](c, `document.querySelector('[data-resource="image"] title').textContent`)).To(ContainSubstring("passed: unit (a job outside this group)"))
		screenshot(c, "other group")

		// The failed check's mark opens the resource, which says what the check said.
		open(c, page+"?group=build", `[data-resource="broken"] [data-testid=check-error-mark]`)
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-resource="broken"] [data-testid=check-error-mark]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=check-error]`)))).To(Succeed())
		Expect(eval[string](c, `location.pathname`)).To(Equal(page + "/resources/broken"))
		Eventually(evalEventually[string](c, `document.querySelector('[data-testid=check-error]').textContent`)).Should(ContainSubstring("the registry said no to us"))
		abortRunning(ctx, name, "slow")
	}, SpecTimeout(specTimeout))
})

// abortRunning aborts the job's first build, so it holds no pod after the spec.
func abortRunning(ctx context.Context, pipeline, job string) {
	GinkgoHelper()
	succeed(ctx, s.adminFly, "abort-build", "-j", pipeline+"/"+job, "-b", "1")
}

var _ = Describe("the dashboard", func() {
	It("previews each pipeline by stage, has an HD view, favourites, pause and expose on cards, a sidebar, empty teams and check-error markers", func(ctx SpecContext) {
		name := pipelineName("dash")
		// chainYAML and a job that gets a resource whose check fails.
		yaml := strings.Replace(chainYAML(), "resources:\n", "resources:\n- {name: broken, type: mock, source: {check_failure: no such registry}}\n", 1)
		setPipeline(ctx, name, yaml+"- name: never\n  plan:\n  - get: broken\n")
		empty := pipelineName("emptyteam")
		succeed(ctx, s.adminFly, "set-team", "-n", empty, "--local-user", adminUser, "--non-interactive")
		res, err := s.adminFly.Run(ctx, "check-resource", "-r", name+"/broken")
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		c := loggedIn()
		card := fmt.Sprintf(`document.querySelector('[data-team="main"] [data-pipeline="main/%s"]')`, name)
		open(c, "/?search="+name, fmt.Sprintf(`[data-pipeline="main/%s"] [data-testid=preview]`, name))
		// The preview: unit and never, then integration, then deploy.
		Expect(eval[[]string](c, card+`.querySelectorAll('.stage').length ? [...`+card+`.querySelectorAll('.stage')].map(s => [...s.querySelectorAll('[data-job]')].map(j => j.dataset.job).join(',')) : []`)).
			To(Equal([]string{"unit,never", "integration", "deploy"}))
		Eventually(evalEventually[string](c, card+`.querySelector('[data-testid=check-error-marker]')?.title || ''`)).
			Should(ContainSubstring("broken"))
		// Empty teams show only while the filter names no text: clear it.
		open(c, "/", fmt.Sprintf(`[data-team=%q] [data-testid=empty-team]`, empty))
		screenshot(c, "cards")

		// Favourites: a star puts the card in a section of its own, first,
		// and the browser keeps it.
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-team="main"] [data-pipeline="main/%s"] [data-testid=favorite]`, name))))).To(Succeed())
		favCard := fmt.Sprintf(`[data-testid=favorites] [data-pipeline="main/%s"]`, name)
		Eventually(evalEventually[bool](c, `!!document.querySelector('`+favCard+`')`)).Should(BeTrue())
		Expect(eval[bool](c, `document.querySelector('section').dataset.testid === 'favorites'`)).To(BeTrue())
		open(c, "/", favCard)
		Expect(eval[string](c, `localStorage.getItem('porter.favorites')`)).To(MatchRegexp(`^\[\d+\]$`))

		// Pause and expose from the card, as fly does.
		pipeline := func() (paused, public bool) {
			var p struct {
				Paused bool `json:"paused"`
				Public bool `json:"public"`
			}
			apiGet(ctx, "/api/v1/teams/main/pipelines/"+name, &p)
			return p.Paused, p.Public
		}
		Expect(pipeline()).To(BeTrue(), "a new pipeline is paused")
		mine := fmt.Sprintf(`[data-team="main"] [data-pipeline="main/%s"] `, name)
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(mine+`[data-testid=card-pause]`)))).To(Succeed())
		Eventually(func() bool { p, _ := pipeline(); return p }).Should(BeFalse())
		Eventually(evalEventually[string](c, `document.querySelector('`+mine+`[data-testid=card-pause]').title`)).Should(Equal("pause the pipeline"))
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(mine+`[data-testid=card-expose]`)))).To(Succeed())
		Eventually(func() bool { _, p := pipeline(); return p }).Should(BeTrue())
		Eventually(evalEventually[string](c, `document.querySelector('`+mine+`.markers').textContent`)).Should(ContainSubstring("exposed"))
		screenshot(c, "favourite exposed")
		// Anonymous visitors see the exposed card, without the buttons.
		anon := tab()
		open(anon, "/", fmt.Sprintf(`[data-pipeline="main/%s"] [data-testid=preview]`, name))
		Expect(eval[int](anon, `document.querySelectorAll('[data-testid=card-pause], [data-testid=card-expose]').length`)).To(Equal(0))
		Expect(eval[bool](anon, `!!document.querySelector('[data-testid=empty-team]')`)).To(BeFalse())
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(mine+`[data-testid=card-expose]`)))).To(Succeed())
		Eventually(func() bool { _, p := pipeline(); return p }).Should(BeFalse())
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(mine+`[data-testid=card-pause]`)))).To(Succeed())
		Eventually(func() bool { p, _ := pipeline(); return p }).Should(BeTrue())

		// The sidebar lists teams (the empty one too) and their pipelines, and opens one.
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-testid=sidebar-toggle]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=sidebar]`)))).To(Succeed())
		Expect(eval[[]string](c, `[...document.querySelectorAll('[data-testid=sidebar] [data-team]')].map(e => e.dataset.team)`)).To(ContainElements("main", empty))
		screenshot(c, "sidebar")
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-testid=sidebar] [data-pipeline="main/%s"]`, name))),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=graph] [data-job="deploy"]`)))).To(Succeed())

		// HD: many small tiles, no previews, the status in the colour.
		open(c, "/hd", fmt.Sprintf(`[data-team="main"] .card.hd[data-pipeline="main/%s"]`, name))
		Expect(eval[int](c, `document.querySelectorAll('[data-testid=preview]').length`)).To(Equal(0))
		Expect(eval[string](c, card+`.dataset.status`)).To(Equal("paused"))
		// The checks are read once the cards are drawn.
		Eventually(evalEventually[bool](c, card+`.querySelector('[data-testid=check-error-marker]') !== null`)).Should(BeTrue())
		screenshot(c, "hd")
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-testid=hd-toggle]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=preview]`)))).To(Succeed())
		Expect(eval[string](c, `location.pathname`)).To(Equal("/"))
	}, SpecTimeout(specTimeout))
})
