package e2e_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/podwatch"
	"github.com/porter-ci/porter/test/testenv"
)

const (
	e2eWorker    = "e2e"
	busyboxImage = "busybox"
	// reportWithin is an upper bound for something Kubernetes knows within
	// seconds; generous because the machine is shared with other builds.
	reportWithin = 60 * time.Second
)

// specNamespace creates a namespace for one spec and deletes it afterwards.
func specNamespace(ctx context.Context, prefix string) string {
	ns, err := testenv.CreateNamespace(ctx, cluster.client, prefix)
	if ns != "" {
		DeferCleanup(func(ctx SpecContext) {
			err := cluster.client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				Fail(fmt.Sprintf("deleting namespace %s: %v", ns, err))
			}
		}, NodeTimeout(30*time.Second))
	}
	Expect(err).NotTo(HaveOccurred())
	return ns
}

// startWatcher runs a podwatch.Watcher for the e2e worker in ns until the
// spec ends.
func startWatcher(ctx context.Context, client kubernetes.Interface, ns string) *podwatch.Watcher {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	DeferCleanup(cancel)
	log := slog.New(slog.NewTextHandler(GinkgoWriter, &slog.HandlerOptions{Level: slog.LevelDebug}))
	w := podwatch.New(client, ns, e2eWorker, log)
	Expect(w.Run(ctx)).To(Succeed(), "starting the pod watcher")
	return w
}

// stepPod is a pod shaped like a step's as far as podwatch cares: podspec's
// name and labels and a main container called "step", running script in
// busybox.
func stepPod(ns, stepID, script string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      podspec.Name(stepID),
			Namespace: ns,
			Labels:    podspec.StepLabels(stepID, "build-1", "main", e2eWorker),
		},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			// The local cluster has no cluster DNS.
			DNSPolicy:                     corev1.DNSDefault,
			AutomountServiceAccountToken:  new(false),
			EnableServiceLinks:            new(false),
			TerminationGracePeriodSeconds: new(int64(5)),
			Containers: []corev1.Container{{
				Name:            podspec.StepContainerName,
				Image:           busyboxImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"sh", "-c", script},
			}},
		},
	}
}

func createPod(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod) {
	_, err := client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred(), "creating pod %s/%s", pod.Namespace, pod.Name)
}

func waitRunning(ctx context.Context, pod *corev1.Pod) {
	Eventually(func(g Gomega) {
		p, err := cluster.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
	}).WithContext(ctx).WithTimeout(reportWithin).Should(Succeed(), "pod %s/%s never ran", pod.Namespace, pod.Name)
}

// expectFailure waits for the tracker's failure and checks its kind.
func expectFailure(ctx context.Context, ns string, tr *podwatch.Tracker, kind podwatch.Kind) *podwatch.Failure {
	var err error
	Eventually(tr.Failed()).WithTimeout(reportWithin).Should(Receive(&err), func() string {
		return "no failure reported; " + describePod(ctx, ns, tr.Pod())
	})
	f, ok := podwatch.AsFailure(err)
	Expect(ok).To(BeTrue(), "failure %v is not a *podwatch.Failure", err)
	Expect(f.Kind).To(Equal(kind), "failure: %v", err)
	AddReportEntry("podwatch error", err.Error())
	return f
}

func expectEnd(ctx context.Context, ns string, tr *podwatch.Tracker) podwatch.PodEnd {
	var end podwatch.PodEnd
	Eventually(tr.Ended()).WithTimeout(reportWithin).Should(Receive(&end), func() string {
		return "no end reported; " + describePod(ctx, ns, tr.Pod())
	})
	return end
}

// describePod is the pod's state as the API server has it, for failure
// messages.
func describePod(ctx context.Context, ns, name string) string {
	p, err := cluster.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Sprintf("pod %s/%s: %v", ns, name, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pod %s/%s: phase=%s reason=%q", ns, name, p.Status.Phase, p.Status.Reason)
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			fmt.Fprintf(&b, " %s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	for _, s := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		switch {
		case s.State.Waiting != nil:
			fmt.Fprintf(&b, " %s=waiting(%s: %s)", s.Name, s.State.Waiting.Reason, s.State.Waiting.Message)
		case s.State.Running != nil:
			fmt.Fprintf(&b, " %s=running", s.Name)
		case s.State.Terminated != nil:
			t := s.State.Terminated
			fmt.Fprintf(&b, " %s=terminated(%d %s: %s)", s.Name, t.ExitCode, t.Reason, strings.TrimSpace(t.Message))
		}
	}
	return b.String()
}

var _ = Describe("podwatch on a real cluster", func() {
	var ns string

	BeforeEach(func(ctx SpecContext) {
		ns = specNamespace(ctx, "podwatch-")
	}, NodeTimeout(60*time.Second))

	It("reports a missing image (ErrImageNeverPull)", func(ctx SpecContext) {
		w := startWatcher(ctx, cluster.client, ns)
		tr := w.Track("missing-image")
		DeferCleanup(tr.Stop)

		pod := stepPod(ns, "missing-image", "true")
		pod.Spec.Containers[0].Image = "porter.local/no-such-image:dev"
		createPod(ctx, cluster.client, pod)

		f := expectFailure(ctx, ns, tr, podwatch.KindImage)
		Expect(f.Container).To(Equal(podspec.StepContainerName))
		Expect(f.Error()).To(And(
			HavePrefix("pod "+ns+"/"+pod.Name+": "),
			ContainSubstring(`image "porter.local/no-such-image:dev" of container "step" could not be pulled: ErrImageNeverPull`),
		))
	}, SpecTimeout(2*time.Minute))

	It("reports a pod that failed before Track was called, from its cache", func(ctx SpecContext) {
		pod := stepPod(ns, "failed-earlier", "true")
		pod.Spec.Containers[0].Image = "porter.local/no-such-image:dev"
		createPod(ctx, cluster.client, pod)
		Eventually(func(g Gomega) {
			p, err := cluster.client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(podwatch.Classify(p)).NotTo(BeNil())
		}).WithContext(ctx).WithTimeout(reportWithin).Should(Succeed())

		w := startWatcher(ctx, cluster.client, ns)
		tr := w.Track("failed-earlier")
		DeferCleanup(tr.Stop)
		// Already in the cache: no waiting for an event.
		Expect(tr.Failed()).To(Receive())
	}, SpecTimeout(2*time.Minute))

	It("reports an unschedulable pod with the scheduler's message, not as a failure", func(ctx SpecContext) {
		w := startWatcher(ctx, cluster.client, ns)
		tr := w.Track("unschedulable")
		DeferCleanup(tr.Stop)

		pod := stepPod(ns, "unschedulable", "true")
		pod.Spec.NodeSelector = map[string]string{"porter.dev/no-such-label": "anywhere"}
		createPod(ctx, cluster.client, pod)

		var msg string
		Eventually(tr.Unschedulable()).WithTimeout(reportWithin).Should(Receive(&msg))
		Expect(msg).To(And(ContainSubstring("0/1 nodes are available"), ContainSubstring("node affinity/selector")))
		// Capacity may free: whether it can ever fit is kuberuntime's call.
		Consistently(tr.Failed()).WithTimeout(time.Second).ShouldNot(Receive())
	}, SpecTimeout(2*time.Minute))

	It("reports a step container killed for exceeding its memory limit", func(ctx SpecContext) {
		w := startWatcher(ctx, cluster.client, ns)
		tr := w.Track("oom")
		DeferCleanup(tr.Stop)

		pod := stepPod(ns, "oom", "")
		// dd fills a 200M buffer, far past 16Mi. It starts a second late, as a
		// step's process does (after the inputs): this cluster's containerd
		// (1.6, cgroup v1) listens for OOM events only once the container has
		// started, and reports an OOM kill in the first moments as Error.
		pod.Spec.Containers[0].Command = []string{"sh", "-c",
			"sleep 1; exec dd if=/dev/zero of=/dev/null bs=200M count=1"}
		pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("16Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("16Mi")},
		}
		createPod(ctx, cluster.client, pod)

		f := expectFailure(ctx, ns, tr, podwatch.KindOOMKilled)
		Expect(f.Error()).To(Equal("pod " + ns + "/" + pod.Name +
			": step container was killed for exceeding its memory limit of 16Mi (OOMKilled)"))
		end := expectEnd(ctx, ns, tr)
		Expect(end.Phase).To(Equal(corev1.PodFailed))
		Expect(end.MainExited).To(BeTrue())
		Expect(end.ExitCode).To(BeEquivalentTo(137))
	}, SpecTimeout(2*time.Minute))

	It("reports a pod deleted before the step finished", func(ctx SpecContext) {
		w := startWatcher(ctx, cluster.client, ns)
		tr := w.Track("deleted")
		DeferCleanup(tr.Stop)

		pod := stepPod(ns, "deleted", "sleep 3600")
		createPod(ctx, cluster.client, pod)
		waitRunning(ctx, pod)
		Expect(tr.Failed()).NotTo(Receive(), "a running pod is no failure")

		Expect(cluster.client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{})).To(Succeed())
		f := expectFailure(ctx, ns, tr, podwatch.KindDeleted)
		Expect(f.Error()).To(Equal("pod " + ns + "/" + pod.Name + ": deleted before the step finished"))
	}, SpecTimeout(2*time.Minute))

	It("reports a pod force-deleted (grace period 0) before the step finished", func(ctx SpecContext) {
		w := startWatcher(ctx, cluster.client, ns)
		tr := w.Track("force-deleted")
		DeferCleanup(tr.Stop)

		pod := stepPod(ns, "force-deleted", "sleep 3600")
		createPod(ctx, cluster.client, pod)
		waitRunning(ctx, pod)

		// Removed from the API at once: the informer sees only the delete.
		Expect(cluster.client.CoreV1().Pods(ns).Delete(ctx, pod.Name,
			metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})).To(Succeed())
		expectFailure(ctx, ns, tr, podwatch.KindDeleted)
	}, SpecTimeout(2*time.Minute))

	It("reports activeDeadlineSeconds exceeded", func(ctx SpecContext) {
		w := startWatcher(ctx, cluster.client, ns)
		tr := w.Track("deadline")
		DeferCleanup(tr.Stop)

		pod := stepPod(ns, "deadline", "sleep 3600")
		pod.Spec.ActiveDeadlineSeconds = new(int64(3))
		createPod(ctx, cluster.client, pod)

		f := expectFailure(ctx, ns, tr, podwatch.KindDeadlineExceeded)
		Expect(f.Error()).To(HavePrefix("pod " + ns + "/" + pod.Name + ": activeDeadlineSeconds (3s) exceeded"))
		Expect(expectEnd(ctx, ns, tr).Phase).To(Equal(corev1.PodFailed))
	}, SpecTimeout(2*time.Minute))

	It("reports a healthy pod's end as Succeeded and no failure", func(ctx SpecContext) {
		w := startWatcher(ctx, cluster.client, ns)
		tr := w.Track("healthy")
		DeferCleanup(tr.Stop)

		createPod(ctx, cluster.client, stepPod(ns, "healthy", "echo hello"))
		end := expectEnd(ctx, ns, tr)
		Expect(end.Phase).To(Equal(corev1.PodSucceeded))
		Expect(end.MainExited).To(BeTrue())
		Expect(end.ExitCode).To(BeZero())
		Expect(tr.Failed()).NotTo(Receive())
	}, SpecTimeout(2*time.Minute))
})
