package observability_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/test/testenv"
)

var _ = Describe("observability", Ordered, func() {
	// The build every spec below looks at: a task with an input uploaded
	// by fly and an output fly downloads.
	var okBuild string

	BeforeAll(func(ctx SpecContext) {
		in := GinkgoT().TempDir()
		Expect(os.WriteFile(filepath.Join(in, "data"), []byte(strings.Repeat(rand.Text(), 20000)), 0o644)).To(Succeed())
		out := GinkgoT().TempDir()
		task := taskFile(`inputs: [{name: in}]
outputs: [{name: out}]
run: {path: sh, args: [-c, "cp in/data out/copy && echo copied"]}
`)
		res := run(ctx, "execute", "-c", task, "-i", "in="+in, "-o", "out="+out)
		Expect(res.ExitCode).To(Equal(0), res.String())
		okBuild = buildID(res.Stdout)
		Expect(filepath.Join(out, "copy")).To(BeAnExistingFile())
	})

	It("answers /livez and /readyz once serving", func(ctx SpecContext) {
		for _, path := range []string{"/livez", "/readyz"} {
			code, body := get(ctx, server.OpsURL()+path)
			Expect(code).To(Equal(http.StatusOK), "%s: %s", path, body)
		}
	})

	It("counts builds, step phases, artifact bytes, events and the worker's state in /metrics", func(ctx SpecContext) {
		// The pod phases are read from the pod's status, which the kubelet
		// may report after the step's end: they come within seconds.
		Eventually(func(g Gomega) {
			m := scrape(ctx)
			g.Expect(m.value("porter_builds_started_total", nil)).To(BeNumerically(">=", 1))
			g.Expect(m.value("porter_builds_finished_total", map[string]string{"status": "succeeded"})).To(BeNumerically(">=", 1))
			for _, phase := range []string{"scheduling", "image_pull", "inputs", "run", "outputs"} {
				g.Expect(m.value("porter_step_phase_seconds_count", map[string]string{"phase": phase})).To(BeNumerically(">=", 1), "phase %s", phase)
			}
			// The input went in and its copy came out (compressed: some hundred bytes each way).
			for _, dir := range []string{"download", "upload"} {
				g.Expect(m.value("porter_artifact_bytes_total", map[string]string{"direction": dir})).To(BeNumerically(">", 0), dir)
				g.Expect(m.value("porter_artifact_transfer_mbps_count", map[string]string{"direction": dir})).To(BeNumerically(">=", 1), dir)
			}
			g.Expect(m.value("porter_sidecar_events_total", nil)).To(BeNumerically(">", 0))
			g.Expect(m.value("porter_worker_state", map[string]string{"worker": "e2e", "state": "running"})).To(Equal(1.0))
			g.Expect(m.has("porter_sidecar_streams_connected")).To(BeTrue())
		}).WithContext(ctx).WithTimeout(15 * time.Second).Should(Succeed())
	})

	Context("a step whose image does not exist", Ordered, func() {
		var failed string
		BeforeAll(func(ctx SpecContext) {
			// Pinned by its digest: no check, the kubelet finds out.
			res := run(ctx, "execute", "-c", writeFile(`platform: linux
image_resource:
  type: registry-image
  source: {repository: porter.local/does-not-exist}
  version: {digest: "sha256:0000000000000000000000000000000000000000000000000000000000000000"}
run: {path: "true"}
`))
			Expect(res.ExitCode).NotTo(Equal(0), res.String())
			failed = buildID(res.Stdout)
		})

		It("is counted as a pod failure of kind Image", func(ctx SpecContext) {
			Expect(scrape(ctx).value("porter_pod_failures_total", map[string]string{"kind": "Image"})).To(BeNumerically(">=", 1))
		})

		It("leaves a Warning Event on its pod naming the build and the failure", func(ctx SpecContext) {
			var ev corev1.Event
			Eventually(func(g Gomega) {
				list, err := admin.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "reason=PorterStepFailed"})
				g.Expect(err).NotTo(HaveOccurred())
				found := false
				for _, e := range list.Items {
					if strings.Contains(e.Message, "build "+failed+" ") {
						ev, found = e, true
					}
				}
				g.Expect(found).To(BeTrue(), "no PorterStepFailed event for build %s among %d", failed, len(list.Items))
			}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
			Expect(ev.Type).To(Equal(corev1.EventTypeWarning))
			Expect(ev.InvolvedObject.Kind).To(Equal("Pod"))
			Expect(ev.InvolvedObject.Name).To(HavePrefix("porter-b" + failed + "-"))
			Expect(ev.InvolvedObject.UID).NotTo(BeEmpty())
			Expect(ev.Message).To(ContainSubstring("porter.local/does-not-exist"))
			Expect(ev.Message).To(ContainSubstring("(Image)"))
			Expect(ev.Source.Component).To(Equal("atc-porter-runtime"))
		})
	})

	It("exports one trace per build: build → step → pod phases and the sidecar's spans", func(ctx SpecContext) {
		var build, step span
		var spans []span
		Eventually(func(g Gomega) {
			spans = receiver.all()
			var ok bool
			build, ok = find(spans, func(s span) bool {
				return s.Service == "atc-porter-runtime" && s.Attrs["porter.build.id"] == okBuild && strings.HasPrefix(s.Name, "build ")
			})
			g.Expect(ok).To(BeTrue(), "no build span for build %s in %d spans", okBuild, len(spans))
			step, ok = find(spans, func(s span) bool { return s.Parent == build.SpanID && s.Attrs["porter.step.type"] == "task" })
			g.Expect(ok).To(BeTrue(), "no task span under the build span")
			for _, name := range []string{"inputs", "run", "outputs"} {
				_, ok := find(spans, func(s span) bool { return s.Service == "porter-sidecar" && s.Name == name && s.Parent == step.SpanID })
				g.Expect(ok).To(BeTrue(), "no sidecar span %q under the step span", name)
			}
			for _, name := range []string{"pod scheduling", "pod image pull"} {
				_, ok := find(spans, func(s span) bool {
					return s.Service == "atc-porter-runtime" && s.Name == name && s.Parent == step.SpanID
				})
				g.Expect(ok).To(BeTrue(), "no server span %q under the step span", name)
			}
		}).WithContext(ctx).WithTimeout(60 * time.Second).WithPolling(time.Second).Should(Succeed())
		for _, s := range spans {
			if s.TraceID == build.TraceID {
				GinkgoWriter.Printf("span %s/%s %q parent %s attrs %v\n", s.Service, s.SpanID, s.Name, s.Parent, s.Attrs)
			}
		}
		Expect(build.Parent).To(BeEmpty(), "the build span is a root")
		// The task's image check is a step of its own under the task's span,
		// with its pod's spans under it.
		check, ok := find(spans, func(s span) bool { return s.Name == "check image" && s.Parent == step.SpanID })
		Expect(ok).To(BeTrue(), "no span of the image check under the task's")
		// Its process: the sidecar's run span in a pod of its own, the
		// server's in a check pod (a session, which no sidecar span covers).
		_, ok = find(spans, func(s span) bool {
			return s.Parent == check.SpanID && (s.Service == "porter-sidecar" && s.Name == "run" || s.Service == "atc-porter-runtime" && s.Name == "run in check pod")
		})
		Expect(ok).To(BeTrue(), "no run span under the image check's")
		transfer, ok := find(spans, func(s span) bool { return s.Name == `transfer input "in"` && s.TraceID == build.TraceID })
		Expect(ok).To(BeTrue(), "no transfer span for input in")
		Expect(transfer.Attrs["porter.artifact.bytes"]).NotTo(Equal("0"))
		inputs, ok := find(spans, func(s span) bool { return s.SpanID == transfer.Parent })
		Expect(ok).To(BeTrue(), "the transfer's parent span was not exported")
		Expect(inputs.Name).To(Equal("inputs"))
		Expect(inputs.Service).To(Equal("porter-sidecar"))
		Expect(inputs.Parent).To(Equal(step.SpanID))
		for _, s := range spans {
			if s.Parent == step.SpanID || s.SpanID == step.SpanID || s.Parent == inputs.SpanID {
				Expect(s.TraceID).To(Equal(build.TraceID), "span %s (%s)", s.Name, s.Service)
			}
		}
	})

	It("writes JSON log lines, client-go's klog among them", func() {
		var lines, klogLines int
		sc := bufio.NewScanner(strings.NewReader(server.Log()))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "=== ") {
				continue // testenv's header of each run
			}
			var rec map[string]any
			Expect(json.Unmarshal([]byte(line), &rec)).To(Succeed(), "not JSON: %q", line)
			Expect(rec).To(HaveKey("time"))
			Expect(rec).To(HaveKey("level"))
			Expect(rec).To(HaveKey("msg"))
			lines++
			if rec["logger"] == "klog" {
				klogLines++
			}
		}
		Expect(lines).To(BeNumerically(">", 10))
		Expect(klogLines).To(BeNumerically(">", 0), "no klog line (logger=klog) in the server's log")
	})

	// Last: it cuts the database for a while.
	It("turns /readyz to 503 while the database is unreachable, and back to 200 after", func(ctx SpecContext) {
		dbProxy.Down()
		DeferCleanup(func() { Expect(dbProxy.Up()).To(Succeed()) })
		Eventually(func(g Gomega) {
			code, body := get(ctx, server.OpsURL()+"/readyz")
			g.Expect(code).To(Equal(http.StatusServiceUnavailable), body)
			g.Expect(body).To(ContainSubstring("database"))
		}).WithContext(ctx).WithTimeout(20 * time.Second).Should(Succeed())
		code, body := get(ctx, server.OpsURL()+"/livez")
		Expect(code).To(Equal(http.StatusOK), "the process is alive: %s", body)
		Expect(dbProxy.Up()).To(Succeed())
		Eventually(func(g Gomega) {
			code, body := get(ctx, server.OpsURL()+"/readyz")
			g.Expect(code).To(Equal(http.StatusOK), body)
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	})
})

// run runs fly and fails the spec on an error starting it.
func run(ctx context.Context, args ...string) testenv.FlyResult {
	GinkgoHelper()
	res, err := fly.Run(ctx, args...)
	Expect(err).NotTo(HaveOccurred())
	return res
}

var executingBuild = regexp.MustCompile(`executing build (\d+) at`)

func buildID(stdout string) string {
	GinkgoHelper()
	m := executingBuild.FindStringSubmatch(stdout)
	Expect(m).NotTo(BeNil(), "no 'executing build N' line in:\n%s", stdout)
	return m[1]
}

const busybox = `platform: linux
image_resource:
  type: registry-image
  source: {repository: busybox}
`

func taskFile(rest string) string { GinkgoHelper(); return writeFile(busybox + rest) }

func writeFile(body string) string {
	GinkgoHelper()
	path := filepath.Join(GinkgoT().TempDir(), "task.yml")
	Expect(os.WriteFile(path, []byte(body), 0o644)).To(Succeed())
	return path
}

func get(ctx context.Context, url string) (int, string) {
	GinkgoHelper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	Expect(err).NotTo(HaveOccurred())
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	return resp.StatusCode, string(body)
}

// metrics is a scrape in Prometheus' text format.
type metrics []sample

type sample struct {
	name   string
	labels map[string]string
	value  float64
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
var labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

func scrape(ctx context.Context) metrics {
	GinkgoHelper()
	code, body := get(ctx, server.OpsURL()+"/metrics")
	Expect(code).To(Equal(http.StatusOK), body)
	var m metrics
	for _, line := range strings.Split(body, "\n") {
		g := sampleLine.FindStringSubmatch(line)
		if g == nil {
			continue
		}
		v, err := strconv.ParseFloat(g[3], 64)
		Expect(err).NotTo(HaveOccurred(), line)
		labels := map[string]string{}
		for _, p := range labelPair.FindAllStringSubmatch(g[2], -1) {
			labels[p[1]] = p[2]
		}
		m = append(m, sample{name: g[1], labels: labels, value: v})
	}
	return m
}

// value is the sum of the samples of name whose labels include want.
func (m metrics) value(name string, want map[string]string) float64 {
	sum := 0.0
	for _, s := range m {
		if s.name != name {
			continue
		}
		match := true
		for k, v := range want {
			match = match && s.labels[k] == v
		}
		if match {
			sum += s.value
		}
	}
	return sum
}

func (m metrics) has(name string) bool {
	for _, s := range m {
		if s.name == name {
			return true
		}
	}
	return false
}

func find(spans []span, match func(span) bool) (span, bool) {
	for _, s := range spans {
		if match(s) {
			return s, true
		}
	}
	return span{}, false
}
