package ui_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/test/testenv/seedlog"
)

// bigLines is the seeded build's output: far more than the page holds.
const bigLines = 300_000

// bigLine is line i of the seeded build: numbered, with a hash so it
// compresses as real output does; line 1234 holds a needle, the last one is
// long enough to wrap.
func bigLine(i int64) string {
	switch i {
	case 1234:
		return fmt.Sprintf("seed line %07d holds The Needle far from the end", i)
	case bigLines:
		return fmt.Sprintf("seed line %07d ", i) + strings.Repeat("a long last line that wraps when asked ", 30)
	}
	return fmt.Sprintf("seed line %07d %016x", i, uint64(i)*0x9E3779B97F4A7C15)
}

// JS: the text of the last line wholly in the log's view, and the lines'
// elements by their text's start.
const (
	lastShown = `(() => { const l = document.querySelector('[data-testid=log]'); if (!l) return '';
		const r = l.getBoundingClientRect();
		const ls = [...l.querySelectorAll('.line')].filter(e => { const b = e.getBoundingClientRect(); return b.top >= r.top - 1 && b.bottom <= r.bottom + 1; })
			.sort((a, b) => a.getBoundingClientRect().top - b.getBoundingClientRect().top);
		return ls.length ? ls[ls.length - 1].querySelector('.txt').textContent : ''; })()`
	firstShown = `(() => { const l = document.querySelector('[data-testid=log]'); const r = l.getBoundingClientRect();
		const ls = [...l.querySelectorAll('.line')].filter(e => { const b = e.getBoundingClientRect(); return b.top >= r.top - 1 && b.bottom <= r.bottom + 1; })
			.sort((a, b) => a.getBoundingClientRect().top - b.getBoundingClientRect().top);
		return ls.length ? ls[0].querySelector('.txt').textContent : ''; })()`
	logFrom  = `+document.querySelector('[data-testid=log]').dataset.from`
	logLines = `+document.querySelector('[data-testid=log]').dataset.lines`
)

func lineHeight(prefix string) string {
	return fmt.Sprintf(`(() => { const e = [...document.querySelectorAll('[data-testid=log] .line')].find(e => e.querySelector('.txt').textContent.startsWith(%q));
		return e ? e.getBoundingClientRect().height : -1; })()`, prefix)
}

var _ = Describe("the build page of a huge log", Ordered, func() {
	var page string
	BeforeAll(func(ctx SpecContext) {
		res := succeed(ctx, s.adminFly, "execute", "-c", writeFile("task.yml", `platform: linux
image_resource: {type: registry-image, source: {repository: busybox}}
run: {path: echo, args: [before the seeded lines]}
`))
		m := regexp.MustCompile(`executing build (\d+)`).FindStringSubmatch(res.Stdout)
		Expect(m).NotTo(BeNil(), res.Stdout)
		id, err := strconv.ParseInt(m[1], 10, 64)
		Expect(err).NotTo(HaveOccurred())
		start := time.Now()
		n, err := seedlog.Append(ctx, s.env, s.server, id, bigLines, bigLine)
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Printf("seeded build %d with %d lines (%d bytes) in %s\n", id, bigLines, n, time.Since(start))
		page = fmt.Sprintf("/builds/%d", id)
	}, NodeTimeout(specTimeout))

	It("opens at its last line, holding a window of it, and pages backwards as it is scrolled up", func(ctx SpecContext) {
		c := loggedIn()
		open(c, page, `[data-testid=log]`)
		Expect(eval[string](c, `document.querySelector('[data-testid=steps]').dataset.ranged`)).To(Equal("true"))
		Eventually(evalEventually[string](c, lastShown)).Should(HavePrefix(fmt.Sprintf("seed line %07d a long", bigLines)))
		held := eval[int](c, logLines)
		Expect(held).To(And(BeNumerically(">=", 500), BeNumerically("<", 5000)), "a window of the log, not all of it")
		screenshot(c, "at its end")

		// Scrolled to the top, the page before comes in front, and the view
		// stays on the lines it showed.
		from := eval[int](c, logFrom)
		eval[string](c, `(() => { document.querySelector('[data-testid=log]').scrollTop = 0; return '' })()`)
		Eventually(evalEventually[int](c, logFrom)).Should(BeNumerically("<", from))
		Eventually(evalEventually[int](c, logLines)).Should(BeNumerically(">", held))
		// The list draws the lines it now holds a frame later.
		var shown string
		Eventually(func() string { shown = eval[string](c, firstShown); return shown }).Should(MatchRegexp(`^seed line \d{7} `))
		// Earlier lines than the first page held are on screen.
		firstHeld, err := strconv.Atoi(regexp.MustCompile(`\d{7}`).FindString(shown))
		Expect(err).NotTo(HaveOccurred())
		Expect(firstHeld).To(BeNumerically("<", bigLines-held+100))
		// Again, twice: the window grows backwards, in order.
		for range 2 {
			f := eval[int](c, logFrom)
			eval[string](c, `(() => { document.querySelector('[data-testid=log]').scrollTop = 0; return '' })()`)
			Eventually(evalEventually[int](c, logFrom)).Should(BeNumerically("<", f))
		}
		texts := eval[[]string](c, `[...document.querySelectorAll('[data-testid=log] .line .txt')].map(e => e.textContent).slice(0, 5)`)
		var prev int
		for i, t := range texts {
			n, err := strconv.Atoi(regexp.MustCompile(`\d{7}`).FindString(t))
			Expect(err).NotTo(HaveOccurred(), t)
			if i > 0 {
				Expect(n).To(Equal(prev+1), "lines in order: %v", texts)
			}
			prev = n
		}
		screenshot(c, "paged back")
	}, SpecTimeout(specTimeout))

	It("searches the whole log on the server and jumps to a hit far from the end", func(ctx SpecContext) {
		c := loggedIn()
		open(c, page, `[data-testid=log]`)
		Eventually(evalEventually[string](c, lastShown)).Should(HavePrefix(fmt.Sprintf("seed line %07d", bigLines)))
		endFrom := eval[int](c, logFrom)
		Expect(chromedp.Do(c, chromedp.SendKeys(chromedp.CSS(`[data-testid=log-search-input]`), "the needle"+kb.Enter),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=search-hit]`)))).To(Succeed())
		Expect(eval[int](c, `document.querySelectorAll('[data-testid=search-hit]').length`)).To(Equal(1))
		Expect(eval[string](c, `document.querySelector('[data-testid=search-hit]').textContent`)).To(ContainSubstring("seed line 0001234 holds The Needle"))
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-testid=search-hit]`)))).To(Succeed())
		hit := `(() => { const e = document.querySelector('[data-testid=log] .line.hit'); if (!e) return '';
			const r = document.querySelector('[data-testid=log]').getBoundingClientRect(), b = e.getBoundingClientRect();
			return b.top >= r.top && b.bottom <= r.bottom ? e.querySelector('.txt').textContent : 'not in view'; })()`
		Eventually(evalEventually[string](c, hit)).Should(Equal("seed line 0001234 holds The Needle far from the end"))
		Expect(eval[int](c, logFrom)).To(BeNumerically("<", endFrom), "the page of the hit, not the end's, is held")
		Expect(eval[string](c, `document.querySelector('[data-testid=log]').dataset.end`)).To(Equal("false"))
		screenshot(c, "at the hit")
	}, SpecTimeout(specTimeout))

	It("focuses the server's search with Ctrl-F, as its key help says", func(ctx SpecContext) {
		c := loggedIn()
		open(c, page, `[data-testid=log]`)
		Expect(eval[string](c, `document.activeElement?.dataset?.testid || ''`)).NotTo(Equal("log-search-input"))
		Expect(chromedp.Do(c, chromedp.KeyEvent("f", chromedp.KeyModifiers(chromedp.ModifierCtrl)))).To(Succeed())
		Eventually(evalEventually[string](c, `document.activeElement?.dataset?.testid || ''`)).Should(Equal("log-search-input"))
		Expect(chromedp.Do(c, chromedp.KeyEvent(kb.Escape))).To(Succeed())
		Eventually(evalEventually[string](c, `document.activeElement?.dataset?.testid || ''`)).ShouldNot(Equal("log-search-input"))
		Expect(chromedp.Do(c, chromedp.KeyEvent("?"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=shortcuts]`)))).To(Succeed())
		Expect(eval[string](c, `document.querySelector('[data-testid=shortcuts]').innerText`)).To(MatchRegexp(`Ctrl-F\s+search the whole log`))
		screenshot(c, "ctrl-f and help")
	}, SpecTimeout(specTimeout))

	It("wraps long lines when asked, and remembers it", func(ctx SpecContext) {
		c := loggedIn()
		open(c, page, `[data-testid=log]`)
		last := fmt.Sprintf("seed line %07d a long", bigLines)
		Eventually(evalEventually[float64](c, lineHeight(last))).Should(Equal(18.0))
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-testid=wrap-toggle]`)))).To(Succeed())
		Eventually(evalEventually[float64](c, lineHeight(last))).Should(BeNumerically(">", 3*18))
		Expect(eval[string](c, `localStorage.getItem('porter.wrap')`)).To(Equal("1"))
		// Wrapped, the last line is still the last on screen, whole.
		Eventually(evalEventually[string](c, lastShown)).Should(HavePrefix(last))
		screenshot(c, "wrapped")
		open(c, page, `[data-testid=log]`)
		Expect(eval[string](c, `document.querySelector('[data-testid=wrap-toggle]').getAttribute('aria-pressed')`)).To(Equal("true"))
		Eventually(evalEventually[float64](c, lineHeight(last))).Should(BeNumerically(">", 3*18))
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-testid=wrap-toggle]`)))).To(Succeed())
		Eventually(evalEventually[float64](c, lineHeight(last))).Should(Equal(18.0))
		Expect(eval[string](c, `localStorage.getItem('porter.wrap')`)).To(Equal("0"))
	}, SpecTimeout(specTimeout))
})
