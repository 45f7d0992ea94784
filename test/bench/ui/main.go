// Command ui measures Porter's web UI in a real headless Chromium (issue
// 19, item 5) against a real atc-porter-runtime on the local cluster:
//
//   - the dashboard with -pipelines pipelines (1,000; 5 jobs each): first
//     contentful paint, and the time until every pipeline's card and job
//     strip is drawn (the page is usable: "interactive");
//   - the pipeline page of a 200-job pipeline (40 passed chains of 5): the
//     time until the graph shows every job;
//   - the build page of a finished 100,000-line build: the time until the
//     last line is on screen, and the page's JS heap then;
//   - the build page of a finished build whose log is -huge-log bytes (10
//     GiB): the same figures. Printing that through a pod takes too long
//     here: the log is seeded through the storage code the server writes
//     with (seedlog.Append: buildlog's segments in the server's
//     bucket, indexed in its database), after a real build's own events.
//
// Each figure is the median of -n page loads, each in a fresh browser
// context (no cache, no storage but the token). Goals: each time ≤ 1 s,
// heap ≤ 100 MB. It prints figures and never fails on timing.
//
//	go run ./test/bench/ui [-n 5] [-pipelines 1000] [-huge-log 10737418240]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/porter-ci/porter/test/bench/internal/benchstat"
	"github.com/porter-ci/porter/test/testenv"
	"github.com/porter-ci/porter/test/testenv/seedlog"
)

func main() {
	n := flag.Int("n", 5, "page loads of each case")
	pipelines := flag.Int("pipelines", 1000, "pipelines on the dashboard")
	huge := flag.Int64("huge-log", 10<<30, "bytes of the seeded huge build log (0: no such case)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, max(*n, 1), max(*pipelines, 1), max(*huge, 0)); err != nil {
		fmt.Fprintln(os.Stderr, "bench-ui:", err)
		os.Exit(1)
	}
}

func findChromium() (string, error) {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no chromium on PATH (apt-get install chromium)")
}

func run(ctx context.Context, n, pipelines int, huge int64) error {
	chromium, err := findChromium()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "bench-ui-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintln(os.Stderr, "starting a server on the local cluster...")
	b, err := testenv.StartBenchServer(ctx, dir, "porter-bench-ui-")
	if err != nil {
		return err
	}
	defer b.Close(context.WithoutCancel(ctx))
	token, err := b.Server.Login(ctx, "bench", "bench")
	if err != nil {
		return err
	}

	fmt.Fprintf(os.Stderr, "setting %d pipelines and a 200-job one...\n", pipelines)
	if err := setPipelines(ctx, b.Fly, dir, pipelines); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "running a build that prints 100,000 lines...")
	build, err := bigBuild(ctx, b.Fly, dir)
	if err != nil {
		return err
	}

	var hugeBuild int
	var hugeLast string
	var hugeSeed time.Duration
	var hugeBytes int64
	if huge > 0 {
		fmt.Fprintf(os.Stderr, "seeding a build log of %s through the server's storage code...\n", gib(huge))
		start := time.Now()
		if hugeBuild, hugeLast, hugeBytes, err = hugeLog(ctx, b, dir, huge); err != nil {
			return err
		}
		hugeSeed = time.Since(start)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.WindowSize(1400, 900), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("enable-precise-memory-info", true))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	if err := chromedp.Do(browser); err != nil {
		return fmt.Errorf("start chromium: %w", err)
	}

	type row struct {
		what string
		got  []time.Duration
		heap []float64
	}
	cases := []struct {
		what, path, ready string
		heap              bool
	}{
		{fmt.Sprintf("dashboard, %d pipelines: all cards drawn", pipelines), "/", fmt.Sprintf(`document.querySelectorAll('[data-pipeline] .seg').length >= %d`, pipelines*5), false},
		{"pipeline page, 200 jobs: graph drawn", "/teams/main/pipelines/twohundred", `document.querySelectorAll('[data-job]').length >= 200`, false},
		{"build page, 100,000 lines: last line shown", fmt.Sprintf("/builds/%d", build),
			`[...document.querySelectorAll('[data-testid=log] .txt')].some(e => e.textContent === 'line 100000')`, true},
	}
	if hugeBuild > 0 {
		cases = append(cases, struct {
			what, path, ready string
			heap              bool
		}{fmt.Sprintf("build page, %s log (seeded): last line shown", gib(hugeBytes)), fmt.Sprintf("/builds/%d", hugeBuild),
			fmt.Sprintf(`[...document.querySelectorAll('[data-testid=log] .txt')].some(e => e.textContent === %q)`, hugeLast), true})
	}
	var rows []row
	var fcp []time.Duration
	for _, c := range cases {
		r := row{what: c.what}
		for range n {
			m, err := measure(browser, b.Server.URL(), token, c.path, c.ready)
			if err != nil {
				return fmt.Errorf("%s: %w", c.what, err)
			}
			r.got = append(r.got, m.ready)
			r.heap = append(r.heap, m.heapMB)
			if c.path == "/" {
				fcp = append(fcp, m.fcp)
			}
		}
		rows = append(rows, r)
		if c.path == "/" {
			rows = append(rows, row{what: fmt.Sprintf("dashboard, %d pipelines: first contentful paint", pipelines), got: fcp})
		}
	}

	fmt.Printf("\nPorter's web UI in headless Chromium (%s), median of %d loads each, goals: ≤ 1 s, heap ≤ 100 MB\n\n", chromium, n)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "case\tmedian\tmax\tgoal\tJS heap\t")
	for _, r := range rows {
		heap := ""
		if r.heap != nil && r.what != "" && strings.HasPrefix(r.what, "build") {
			heap = fmt.Sprintf("%.1f MB (goal ≤ 100 MB: %s)", medianF(r.heap), okIf(medianF(r.heap) <= 100))
		}
		med := benchstat.Median(r.got)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", r.what, med.Round(time.Millisecond), maxD(r.got).Round(time.Millisecond), okIf(med <= time.Second), heap)
	}
	tw.Flush()
	if hugeBuild > 0 {
		fmt.Printf("\nThe %s build log (%d bytes of output) was not printed by a pod: it was seeded in %s through the storage code the server\n"+
			"writes with (seedlog.Append: buildlog's segments in the server's bucket, indexed in its database), after a real build's events.\n",
			gib(hugeBytes), hugeBytes, hugeSeed.Round(time.Second))
	}
	fmt.Println("\nConcourse's own UI was not measured: no Concourse server runs here to serve it.")
	return nil
}

type measurement struct {
	fcp, ready time.Duration
	heapMB     float64
}

// measure loads path in a fresh browser context holding token and waits
// until ready (a JS expression) holds; times are from the navigation's
// start, as the page's performance clock has them.
func measure(browser context.Context, base, token, path, ready string) (measurement, error) {
	var m measurement
	tab, cancel := chromedp.NewContext(browser, chromedp.WithNewBrowserContext())
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(tab, 2*time.Minute)
	defer cancelTimeout()
	if err := chromedp.Do(tab); err != nil {
		return m, err
	}
	setToken := chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool](fmt.Sprintf(`localStorage.setItem("porter.token", %q), true`, token))(ctx, t)
		return err
	})
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/login"), setToken, chromedp.Navigate(base+path)); err != nil {
		return m, err
	}
	for {
		at, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`(`+ready+`) ? performance.now() : -1`))
		if err != nil {
			return m, err
		}
		if at >= 0 {
			m.ready = time.Duration(at * float64(time.Millisecond))
			break
		}
		select {
		case <-ctx.Done():
			return m, fmt.Errorf("%s never became ready: %w", path, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	fcp, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`(performance.getEntriesByName('first-contentful-paint')[0] || {startTime: -1}).startTime`))
	if err != nil {
		return m, err
	}
	m.fcp = time.Duration(fcp * float64(time.Millisecond))
	heap, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`performance.memory ? performance.memory.usedJSHeapSize : -1`))
	if err != nil {
		return m, err
	}
	m.heapMB = heap / (1 << 20)
	return m, nil
}

// setPipelines sets pipelines p0000.. (5 jobs in a passed chain each) and
// "twohundred" (40 chains of 5 jobs), four fly processes at a time.
func setPipelines(ctx context.Context, fly *testenv.Fly, dir string, n int) error {
	small := filepath.Join(dir, "small.yml")
	if err := os.WriteFile(small, []byte(chains(1, 5)), 0o644); err != nil {
		return err
	}
	big := filepath.Join(dir, "twohundred.yml")
	if err := os.WriteFile(big, []byte(chains(40, 5)), 0o644); err != nil {
		return err
	}
	names := make(chan [2]string)
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for nc := range names {
				res, err := fly.Run(ctx, "set-pipeline", "-n", "-p", nc[0], "-c", nc[1])
				if err == nil && res.ExitCode != 0 {
					err = fmt.Errorf("set-pipeline %s: %s", nc[0], res)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var err error
feed:
	for i := range n + 1 {
		nc := [2]string{fmt.Sprintf("p%04d", i), small}
		if i == n {
			nc = [2]string{"twohundred", big}
		}
		select {
		case names <- nc:
		case err = <-errs:
			break feed
		}
	}
	close(names)
	wg.Wait()
	if err != nil {
		return err
	}
	select {
	case err = <-errs:
	default:
	}
	return err
}

// chains is a pipeline of n chains of length jobs, each fed by a mock
// resource and linked by passed constraints.
func chains(n, length int) string {
	var sb strings.Builder
	sb.WriteString("resources:\n")
	for c := range n {
		fmt.Fprintf(&sb, "- {name: src%d, type: mock, source: {initial_version: v1}}\n", c)
	}
	sb.WriteString("jobs:\n")
	for c := range n {
		for j := range length {
			fmt.Fprintf(&sb, "- name: c%d-job%d\n  plan:\n  - get: src%d\n", c, j, c)
			if j > 0 {
				fmt.Fprintf(&sb, "    passed: [c%d-job%d]\n", c, j-1)
			}
			sb.WriteString("  - task: t\n    config: {platform: linux, image_resource: {type: registry-image, source: {repository: busybox}}, run: {path: \"true\"}}\n")
		}
	}
	return sb.String()
}

// bigBuild runs a one-off build printing "line 1".."line 100000" and
// returns its id once it has finished.
func bigBuild(ctx context.Context, fly *testenv.Fly, dir string) (int, error) {
	task := filepath.Join(dir, "big.yml")
	if err := os.WriteFile(task, []byte(`platform: linux
image_resource: {type: registry-image, source: {repository: busybox}}
run: {path: sh, args: [-c, "seq 1 100000 | sed 's/^/line /'"]}
`), 0o644); err != nil {
		return 0, err
	}
	fly.Timeout = 5 * time.Minute
	res, err := fly.Run(ctx, "execute", "-c", task)
	if err != nil {
		return 0, err
	}
	if res.ExitCode != 0 {
		return 0, fmt.Errorf("fly execute: %s", res)
	}
	var id int
	for _, line := range strings.Split(res.Stdout, "\n") {
		if _, err := fmt.Sscanf(line, "executing build %d", &id); err == nil {
			return id, nil
		}
	}
	return 0, fmt.Errorf("no build id in fly's output")
}

// hugeLog runs a one-off build and seeds its stored log with about size
// bytes of output lines after its own; it returns the build, its last line
// and the bytes seeded.
func hugeLog(ctx context.Context, b *testenv.BenchServer, dir string, size int64) (int, string, int64, error) {
	task := filepath.Join(dir, "huge.yml")
	if err := os.WriteFile(task, []byte(`platform: linux
image_resource: {type: registry-image, source: {repository: busybox}}
run: {path: echo, args: [a huge log follows]}
`), 0o644); err != nil {
		return 0, "", 0, err
	}
	res, err := b.Fly.Run(ctx, "execute", "-c", task)
	if err != nil {
		return 0, "", 0, err
	}
	if res.ExitCode != 0 {
		return 0, "", 0, fmt.Errorf("fly execute: %s", res)
	}
	var id int
	for _, line := range strings.Split(res.Stdout, "\n") {
		if _, err := fmt.Sscanf(line, "executing build %d", &id); err == nil {
			break
		}
	}
	if id == 0 {
		return 0, "", 0, fmt.Errorf("no build id in fly's output")
	}
	// Lines as a long build prints them: alike but for their numbers.
	line := func(i int64) string {
		return "compiling unit " + strconv.FormatInt(i, 10) + " of the huge build: ok (" + strconv.FormatInt(i%977, 10) + " ms)"
	}
	n := size / int64(len(line(size/60))+1)
	seeded, err := seedlog.Append(ctx, b.Env, b.Server, int64(id), n, line)
	return id, line(n), seeded, err
}

// gib is a byte count in GiB (MiB under one GiB).
func gib(n int64) string {
	if n < 1<<30 {
		return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

func okIf(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

func maxD(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

func medianF(fs []float64) float64 {
	s := slices.Clone(fs)
	slices.Sort(s)
	return s[len(s)/2]
}
