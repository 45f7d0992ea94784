package economy_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/test/testenv"
)

// checkingPipeline sets and unpauses a pipeline whose mock resource r is
// checked every 2 s, and destroys it when the spec ends.
func checkingPipeline(ctx context.Context, name string) string {
	GinkgoHelper()
	cfg := filepath.Join(GinkgoT().TempDir(), "pipeline.yml")
	Expect(os.WriteFile(cfg, []byte(`resources:
- name: r
  type: mock
  check_every: 2s
  source: {initial_version: v1}
jobs:
- name: j
  plan:
  - get: r
`), 0o644)).To(Succeed())
	run(ctx, "set-pipeline", "-n", "-p", name, "-c", cfg)
	run(ctx, "unpause-pipeline", "-p", name)
	DeferCleanup(func(ctx context.Context) { run(ctx, "destroy-pipeline", "-n", "-p", name) })
	return name
}

// resourceChecks counts the records of checks of resources named name.
func resourceChecks(cs []container, name string) int {
	n := 0
	for _, c := range cs {
		if c.Type == "check" && c.StepName == name {
			n++
		}
	}
	return n
}

var _ = Describe("kept pods", func() {
	It("runs a resource's checks in a check pod, keeps only the latest check's record, and fly intercept --check reaches the pod", func(ctx SpecContext) {
		pipeline := checkingPipeline(ctx, "checks-"+suffix())
		// Checks every 2 s, each a session in the team's check pod for the
		// mock type: only the latest finished check's record and the one
		// running may be there, and the check before for the second until
		// the pass that each build's end brings.
		deadline := time.Now().Add(20 * time.Second)
		var seen []int
		for time.Now().Before(deadline) {
			seen = append(seen, resourceChecks(flyContainers(ctx), "r"))
			time.Sleep(time.Second)
		}
		AddReportEntry("check records at each second", fmt.Sprint(seen))
		Expect(seen).To(HaveEach(BeNumerically("<=", 3)))
		Expect(slices.Max(seen)).To(BeNumerically(">=", 1))
		// The check pods themselves are what is kept, and why.
		Eventually(func() []string {
			var reasons []string
			for _, c := range flyContainers(ctx) {
				if c.Type == "check" && c.StepName == "checks" {
					reasons = append(reasons, c.ExpiresIn)
				}
			}
			return reasons
		}).WithTimeout(30 * time.Second).Should(And(Not(BeEmpty()), HaveEach("kept: check-pod")))

		// With checks stopped, the latest check's record is the one to
		// reach (fly would ask which one while another check runs).
		run(ctx, "pause-pipeline", "-p", pipeline)
		Eventually(func() int { return resourceChecks(flyContainers(ctx), "r") }).WithTimeout(30 * time.Second).Should(Equal(1))
		// The resource image has no shell: its own check answers.
		res, err := fly.Exec(ctx, testenv.FlyCmd{Args: []string{"intercept", "--check", pipeline + "/r", "--", "/opt/resource/check"},
			Stdin: strings.NewReader(`{"source":{"initial_version":"from-intercept"},"version":null}`)})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), res.String())
		Expect(res.Stdout).To(ContainSubstring("from-intercept"))
	})

	It("shrinks a kept pod's requests in place to what the sidecar needs", func(ctx SpecContext) {
		res := run(ctx, "execute", "-c", taskFile("container_limits: {cpu: 512, memory: 134217728}\n", "true"))
		id := buildID(res.Output())
		var pod corev1.Pod
		Eventually(func(g Gomega) {
			pods, err := env.Admin.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{LabelSelector: podspec.BuildSelector(workerName, id)})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pods.Items).To(HaveLen(1))
			pod = pods.Items[0]
			g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning), "kept alive for intercept")
			var step *corev1.ContainerStatus
			for i := range pod.Status.ContainerStatuses {
				if pod.Status.ContainerStatuses[i].Name == podspec.StepContainerName {
					step = &pod.Status.ContainerStatuses[i]
				}
			}
			g.Expect(step).NotTo(BeNil())
			g.Expect(step.Resources).NotTo(BeNil())
			// What the kubelet applied, not only what was asked.
			g.Expect(step.Resources.Requests.Cpu().MilliValue()).To(Equal(int64(1)))
			g.Expect(step.Resources.Requests.Memory().Value()).To(Equal(int64(1 << 20)))
		}).WithTimeout(60 * time.Second).WithPolling(time.Second).Should(Succeed())
		// The limit stays: an intercept session still runs within it.
		for _, c := range pod.Spec.Containers {
			if c.Name == podspec.StepContainerName {
				Expect(c.Resources.Limits.Memory().Value()).To(Equal(int64(134217728)))
			}
		}
	})
})

var _ = Describe("waiting for capacity", func() {
	It("fails at once, naming why, a step that can never fit", func(ctx SpecContext) {
		start := time.Now()
		// 64 CPUs: more than the node (2) can ever allocate.
		res, err := fly.Exec(ctx, testenv.FlyCmd{Args: []string{"execute", "-c", taskFile("container_limits: {cpu: 65536}\n", "true")}})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		Expect(res.Output()).To(And(ContainSubstring("can never be scheduled"), MatchRegexp(`requests \d+m cpu, more than any node`)), res.String())
		Expect(time.Since(start)).To(BeNumerically("<", 30*time.Second))
	})

	It("waits while no node has room, saying why, and runs once room frees", func(ctx SpecContext) {
		// A filler pod takes the node's free CPU but 100m; the step asks 500m.
		free, node := freeCPU(ctx)
		Expect(free).To(BeNumerically(">", 600), "the node needs some free CPU for this spec")
		filler := fillerPod("filler-"+suffix(), free-100)
		filler.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		_, err := env.Admin.CoreV1().Pods(ns.Name).Create(ctx, filler, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		removeFiller := func(ctx context.Context) {
			zero := int64(0)
			_ = env.Admin.CoreV1().Pods(ns.Name).Delete(ctx, filler.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}
		DeferCleanup(removeFiller)
		Eventually(func() string {
			p, err := env.Admin.CoreV1().Pods(ns.Name).Get(ctx, filler.Name, metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			return p.Spec.NodeName
		}).WithTimeout(20 * time.Second).ShouldNot(BeEmpty())

		p, err := fly.Start(testenv.FlyCmd{Args: []string{"execute", "-c", taskFile("container_limits: {cpu: 512}\n", "echo ran")}})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() string { return p.Stdout.String() + p.Stderr.String() }).WithTimeout(30 * time.Second).
			Should(MatchRegexp(`waiting for room on worker ` + workerName + `: 0/\d+ nodes are available: .*Insufficient cpu`))
		time.Sleep(3 * time.Second) // still waiting, not failed
		removeFiller(ctx)
		res, err := p.Wait(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), res.String())
		Expect(res.Stdout).To(ContainSubstring("ran"))
		// One line per reason: again only when the scheduler's reason changed
		// (nodes other suites add or remove change it).
		var lines []string
		for _, l := range strings.Split(res.Output(), "\n") {
			if strings.Contains(l, "waiting for room") {
				lines = append(lines, l)
			}
		}
		Expect(lines).NotTo(BeEmpty())
		for i := 1; i < len(lines); i++ {
			Expect(lines[i]).NotTo(Equal(lines[i-1]), "a line repeated without a change")
		}
	})

	It("deletes a pod declared ahead when a running step finds no room, and its task declares a pod again at its turn", func(ctx SpecContext) {
		image := "image_resource: {type: registry-image, source: {repository: busybox}}"
		cfg := filepath.Join(GinkgoT().TempDir(), "pipeline.yml")
		Expect(os.WriteFile(cfg, []byte(`jobs:
- name: j
  plan:
  - task: first
    config: {platform: linux, `+image+`, run: {path: sleep, args: ["25"]}}
  - task: second
    config: {platform: linux, `+image+`, container_limits: {cpu: 410}, run: {path: echo, args: [second-ran]}}
`), 0o644)).To(Succeed())
		pipeline := "squeeze-" + suffix()
		run(ctx, "set-pipeline", "-n", "-p", pipeline, "-c", cfg)
		run(ctx, "unpause-pipeline", "-p", pipeline)
		DeferCleanup(func(ctx context.Context) { run(ctx, "destroy-pipeline", "-n", "-p", pipeline) })
		job, err := fly.Start(testenv.FlyCmd{Args: []string{"trigger-job", "-j", pipeline + "/j", "-w"}})
		Expect(err).NotTo(HaveOccurred())

		// second's pod is declared ahead, gated, while first runs.
		var waiting string
		Eventually(func() string {
			for _, c := range flyContainers(ctx) {
				if c.StepName == "second" && c.State == "waiting" {
					for _, p := range workerPods(ctx) {
						if strings.Contains(p.Name, "-second-") && p.Status.Phase == corev1.PodRunning {
							waiting = p.Name
						}
					}
				}
			}
			return waiting
		}).WithTimeout(time.Minute).ShouldNot(BeEmpty())

		// A filler leaves 100m of the node's CPU; a step asking 400m finds
		// no room but what the waiting pod holds.
		free, node := freeCPU(ctx)
		filler := fillerPod("filler-"+suffix(), max(free-100, 1))
		filler.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		_, err = env.Admin.CoreV1().Pods(ns.Name).Create(ctx, filler, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		removeFiller := func(ctx context.Context) {
			zero := int64(0)
			_ = env.Admin.CoreV1().Pods(ns.Name).Delete(ctx, filler.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}
		DeferCleanup(removeFiller)
		res, err := fly.Exec(ctx, testenv.FlyCmd{Args: []string{"execute", "-c", taskFile("container_limits: {cpu: 410}\n", "echo squeezed-ran")}})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), res.String())
		Expect(res.Output()).To(And(ContainSubstring("squeezed-ran"), MatchRegexp(`freed [1-9]\d* pods`)))
		Expect(job.Stdout.String()).NotTo(ContainSubstring("second-ran"), "the running step went first; first still runs")
		_, err = env.Admin.CoreV1().Pods(ns.Name).Get(ctx, waiting, metav1.GetOptions{})
		Expect(err).To(Satisfy(apierrors.IsNotFound), "the pod declared ahead was deleted")

		removeFiller(ctx)
		out, err := job.Wait(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(out.ExitCode).To(Equal(0), out.String())
		Expect(regexp.MustCompile(`(?m)^second-ran$`).FindAllString(out.Stdout, -1)).To(HaveLen(1), out.String())
		Expect(out.Output()).NotTo(ContainSubstring("go-ahead"), "the pod stopped before its turn says nothing in the build")
		Expect(out.Output()).NotTo(ContainSubstring("lost"), "second declared its pod at its turn, not as a lost pod's replacement")
	})
})

// freeCPU is the real node's allocatable CPU (millicores) less the
// requests of the pods that hold it, and the node's name (other suites may
// add simulated nodes, tainted).
func freeCPU(ctx context.Context) (int64, string) {
	GinkgoHelper()
	nodes, err := env.Admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	var node *corev1.Node
	for i := range nodes.Items {
		if len(nodes.Items[i].Spec.Taints) == 0 {
			Expect(node).To(BeNil(), "one untainted node")
			node = &nodes.Items[i]
		}
	}
	Expect(node).NotTo(BeNil())
	free := node.Status.Allocatable.Cpu().MilliValue()
	pods, err := env.Admin.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	for _, p := range pods.Items {
		if p.Spec.NodeName != node.Name || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, c := range append(p.Spec.Containers, p.Spec.InitContainers...) {
			free -= c.Resources.Requests.Cpu().MilliValue()
		}
	}
	return free, node.Name
}

func fillerPod(name string, milliCPU int64) *corev1.Pod {
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{Name: "sleep", Image: "busybox", ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"sleep", "600"},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: *resource.NewMilliQuantity(milliCPU, resource.DecimalSI)}}}},
		},
	}
}

// manySteps is how many one-off builds the long spec runs
// (PORTER_ECONOMY_STEPS; default 40, about a minute: the 300 take
// about 7 minutes on the local cluster, so they are opt-in).
func manySteps() int {
	if n, err := strconv.Atoi(os.Getenv("PORTER_ECONOMY_STEPS")); err == nil && n > 0 {
		return n
	}
	return 40
}

var _ = Describe("many steps within one retention period", func() {
	It("runs every build to success with a resource checking every 2 s, kept pods never above the cap", func(ctx SpecContext) {
		checkingPipeline(ctx, "busy-"+suffix())
		const parallel = 6
		n := manySteps()
		task := taskFile("", "echo step")

		var mostKept, mostPods atomic.Int64
		sampling, stopSampling := context.WithCancel(ctx)
		sampled := make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(sampled)
			for sampling.Err() == nil {
				res, err := fly.Exec(sampling, testenv.FlyCmd{Args: []string{"containers", "--json"}})
				if err == nil && res.ExitCode == 0 {
					var cs []container
					if jsonErr := jsonUnmarshal(res.Stdout, &cs); jsonErr == nil {
						mostKept.Store(max(mostKept.Load(), int64(keptCount(cs))))
					}
				}
				if pods, err := env.Admin.CoreV1().Pods(ns.Name).List(sampling, metav1.ListOptions{LabelSelector: podspec.WorkerSelector(workerName)}); err == nil {
					holding := 0
					for _, p := range pods.Items {
						if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
							holding++
						}
					}
					mostPods.Store(max(mostPods.Load(), int64(holding)))
				}
				time.Sleep(500 * time.Millisecond)
			}
		}()

		start := time.Now()
		var failed []string
		var mu sync.Mutex
		work := make(chan int)
		var wg sync.WaitGroup
		for range parallel {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				for i := range work {
					res, err := fly.Exec(ctx, testenv.FlyCmd{Args: []string{"execute", "-c", task}})
					if err != nil || res.ExitCode != 0 {
						mu.Lock()
						failed = append(failed, fmt.Sprintf("build %d: %v\n%s", i, err, res.String()))
						mu.Unlock()
					}
				}
			}()
		}
		for i := range n {
			work <- i
		}
		close(work)
		wg.Wait()
		took := time.Since(start)
		stopSampling()
		<-sampled

		AddReportEntry("many steps", fmt.Sprintf("%d one-off builds (%d at once) in %s; most kept pods %d (cap %d); most slot-holding step pods %d",
			n, parallel, took.Round(time.Second), mostKept.Load(), maxKept, mostPods.Load()))
		Expect(failed).To(BeEmpty())
		Expect(mostKept.Load()).To(BeNumerically("<=", maxKept))
		// Running builds (a task's image check, then the task) and the
		// check come on top of the kept pods; a pass follows each build's
		// end within about a second.
		Expect(mostPods.Load()).To(BeNumerically("<=", maxKept+2*parallel+2))
		Eventually(func() int { return len(workerPods(ctx)) }).WithTimeout(30*time.Second).
			Should(BeNumerically("<=", maxKept+1), "kept pods plus the check running")
	}, SpecTimeout(30*time.Minute))
})
