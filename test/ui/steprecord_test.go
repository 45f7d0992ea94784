package ui_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/pkg/api"
)

// What only Porter can show of a step: its timeline from the pod's status
// and the sidecar's phases, its container's peak memory and CPU time, its
// declared pod spec, and its outputs as downloads.
var _ = Describe("a step's record on the build page", func() {
	It("shows its timeline in order, its peak memory and CPU time, its pod spec, and downloads its output", func(ctx SpecContext) {
		name := pipelineName("record")
		// dd holds one 64 MiB block in memory (busybox dd allocates bs and
		// fills it from /dev/zero); the sleep makes the run measurable.
		setPipeline(ctx, name, `jobs:
- name: j
  plan:
  - task: alloc
    config:
      platform: linux
      image_resource: {type: registry-image, source: {repository: busybox}}
      outputs: [{name: out}]
      run: {path: sh, args: [-c, 'dd if=/dev/zero of=/dev/null bs=64M count=1 && echo made-by-alloc > out/hello.txt && sleep 2']}
`)
		succeed(ctx, s.adminFly, "unpause-pipeline", "-p", name)
		succeed(ctx, s.adminFly, "trigger-job", "-j", name+"/j", "-w")
		var builds []struct {
			ID int `json:"id"`
		}
		apiGet(ctx, "/api/v1/teams/main/pipelines/"+name+"/jobs/j/builds", &builds)
		Expect(builds).To(HaveLen(1))
		id := builds[0].ID
		// The ATC writes the pod's timeline once the kubelet reports the
		// step container's start (at most 10 s after the step's end).
		Eventually(func() int {
			var au api.Audit
			apiGet(ctx, fmt.Sprintf("/api/v1/builds/%d/audit", id), &au)
			return len(au.Timelines)
		}).WithTimeout(30 * time.Second).Should(Equal(1))

		c := loggedIn()
		open(c, "/teams/main/pipelines/"+name+"/jobs/j/builds/1", `[data-testid=build-end]`)
		// A build's only step is open already.
		Expect(chromedp.Do(c, chromedp.WaitVisible(chromedp.CSS(`[data-step="alloc"] [data-testid=audit-toggle]`)),
			chromedp.Click(chromedp.CSS(`[data-step="alloc"] [data-testid=audit-toggle]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-step="alloc"] [data-testid=timeline] [data-moment="ended"]`)))).To(Succeed())

		By("the timeline: every moment, in an order that could have happened, at plausible times")
		at := map[string]time.Time{}
		var shown []string
		for _, kv := range eval[[][]string](c, `[...document.querySelectorAll('[data-step="alloc"] [data-testid=timeline] [data-moment]')].map(e => [e.dataset.moment, e.dataset.at])`) {
			ms, err := strconv.ParseInt(kv[1], 10, 64)
			Expect(err).NotTo(HaveOccurred(), kv[1])
			at[kv[0]] = time.UnixMilli(ms)
			shown = append(shown, kv[0])
		}
		// The page lists them in the order they happened, so what must come
		// first does.
		Expect(shown).To(HaveLen(len(at)), "a moment shown twice")
		for _, seq := range [][]string{{"queued", "pod_created", "scheduled", "sidecar_started", "inputs_fetched", "running", "process_exited", "outputs_uploaded", "ended"},
			{"scheduled", "image_pulled", "running"}} {
			var idx []int
			for _, m := range seq {
				idx = append(idx, slices.Index(shown, m))
			}
			Expect(slices.IsSorted(idx)).To(BeTrue(), "the page's order %v, want %v in that order", shown, seq)
		}
		Expect(at).To(HaveKey("queued"))
		for _, m := range []string{"pod_created", "scheduled", "sidecar_started", "image_pulled", "inputs_fetched", "running", "process_exited", "outputs_uploaded", "ended"} {
			Expect(at).To(HaveKey(m), "moment %s", m)
		}
		// The kubelet's times are whole seconds: they may read up to 1 s early.
		const second = time.Second
		notBefore := func(later, earlier string, slack time.Duration) {
			GinkgoHelper()
			Expect(at[later].Add(slack)).NotTo(BeTemporally("<", at[earlier]), "%s (%s) before %s (%s)", later, at[later], earlier, at[earlier])
		}
		notBefore("pod_created", "queued", second)
		notBefore("scheduled", "pod_created", 0)
		notBefore("sidecar_started", "scheduled", 0)
		notBefore("running", "image_pulled", 0)
		notBefore("running", "inputs_fetched", 0)
		notBefore("inputs_fetched", "sidecar_started", 0)
		notBefore("outputs_uploaded", "process_exited", 0)
		notBefore("ended", "outputs_uploaded", 0)
		Expect(at["process_exited"].Sub(at["running"])).To(BeNumerically(">=", 2*time.Second), "the task sleeps 2 s")
		Expect(at["process_exited"].Sub(at["running"])).To(BeNumerically("<", time.Minute))
		Expect(at["ended"].Sub(at["queued"])).To(BeNumerically("<", 2*time.Minute))

		By("peak memory and CPU time of the step's container")
		peak := eval[string](c, `document.querySelector('[data-step="alloc"] [data-testid=usage]').dataset.memoryPeak`)
		Expect(strconv.ParseInt(peak, 10, 64)).To(BeNumerically(">=", 64<<20))
		cpu := eval[string](c, `document.querySelector('[data-step="alloc"] [data-testid=usage]').dataset.cpuSeconds`)
		Expect(strconv.ParseFloat(cpu, 64)).To(BeNumerically(">", 0))
		Expect(eval[string](c, `document.querySelector('[data-step="alloc"] [data-testid=usage]').textContent`)).
			To(MatchRegexp(`peak memory \d+ MiB · CPU time \d+\.\d+ s`))

		By("the declared pod spec, with the step's image")
		image := eval[string](c, `[...document.querySelectorAll('[data-step="alloc"] [data-testid=audit] code')].map(e => e.textContent).find(t => t.includes('busybox'))`)
		Expect(image).To(ContainSubstring("busybox@sha256:"))
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-step="alloc"] [data-testid=pod-spec-toggle]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-step="alloc"] [data-testid=pod-spec]`)))).To(Succeed())
		spec := eval[string](c, `document.querySelector('[data-step="alloc"] [data-testid=pod-spec]').textContent`)
		Expect(spec).To(ContainSubstring("name: porter-"))
		Expect(spec).To(ContainSubstring("containers:"))
		Expect(spec).To(ContainSubstring("image: " + image))
		screenshot(c, "step record")

		By("the output, downloaded by clicking its link")
		dir := GinkgoT().TempDir()
		bctx := chromedp.FromContext(c).BrowserContextID
		_, err := chromedp.CallBrowser(c, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
			Behavior: browser.SetDownloadBehaviorBehaviorAllow, BrowserContextID: bctx, DownloadPath: dir})
		Expect(err).NotTo(HaveOccurred())
		Expect(chromedp.Do(c, chromedp.Click(chromedp.CSS(`[data-step="alloc"] [data-testid=output-download][data-output="out"]`)))).To(Succeed())
		file := filepath.Join(dir, fmt.Sprintf("build-%d-out.tar", id))
		Eventually(func() error { _, err := os.Stat(file); return err }).WithTimeout(30 * time.Second).Should(Succeed())
		var saved []byte
		Eventually(func() (string, error) {
			var err error
			saved, err = os.ReadFile(file)
			return tarFile(saved, "hello.txt"), err
		}).Should(Equal("made-by-alloc\n"))

		By("the same link read with the page's token: a tar, named, with the file the task wrote")
		href := eval[string](c, `document.querySelector('[data-step="alloc"] [data-testid=output-download][data-output="out"]').href`)
		res := getWith(ctx, href, s.adminToken)
		Expect(res.status).To(Equal(http.StatusOK), res.body)
		Expect(res.header.Get("Content-Type")).To(Equal("application/x-tar"))
		Expect(res.header.Get("Content-Disposition")).To(Equal(fmt.Sprintf(`attachment; filename="build-%d-out.tar"`, id)))
		Expect(tarFile([]byte(res.body), "hello.txt")).To(Equal("made-by-alloc\n"))
		// A private job's output is not for anonymous visitors.
		Expect(getWith(ctx, href, "").status).To(Equal(http.StatusUnauthorized))
	}, SpecTimeout(specTimeout))
})

// tarFile is the content of the regular file name in a tar ("" if absent
// or not a tar).
func tarFile(b []byte, name string) string {
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err != nil {
			return ""
		}
		if filepath.Clean(h.Name) == name {
			body, err := io.ReadAll(tr)
			if err != nil {
				return ""
			}
			return string(body)
		}
	}
}

type got struct {
	status int
	header http.Header
	body   string
}

// getWith reads url with token ("": anonymously).
func getWith(ctx context.Context, url, token string) got {
	GinkgoHelper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	Expect(err).NotTo(HaveOccurred())
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	Expect(err).NotTo(HaveOccurred())
	return got{status: res.StatusCode, header: res.Header, body: string(body)}
}
