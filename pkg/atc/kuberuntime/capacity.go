package kuberuntime

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/porter-ci/porter/pkg/podwatch"
)

// neverFits says why the pod can never be placed on the worker's nodes as
// they are: its node selector matches no node, or it requests more of a
// resource than any matching node can allocate. Anything else the
// scheduler complains about (a full node, pods to finish, an autoscaler to
// add a node) may pass, and the step waits. Without the right to list
// nodes (a worker confined to its namespace) nothing is known to never
// fit (deploy/atc/node-reader.yaml grants it), the scheduler's message
// decides, and only when no taint, which might pass, is among its reasons.
func neverFits(ctx context.Context, w *Worker, pod *corev1.Pod, reason string) *podwatch.Failure {
	fail := func(format string, args ...any) *podwatch.Failure {
		return &podwatch.Failure{Kind: podwatch.KindUnschedulable, Pod: pod.Namespace + "/" + pod.Name, Reason: corev1.PodReasonUnschedulable,
			Detail: "can never be scheduled: " + fmt.Sprintf(format, args...)}
	}
	nodes, err := w.Kube().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		if schedulerSaysNever(reason) {
			return fail("%s", reason)
		}
		return nil
	}
	selector := labels.SelectorFromSet(pod.Spec.NodeSelector)
	var matching []corev1.Node
	for _, n := range nodes.Items {
		if selector.Matches(labels.Set(n.Labels)) && tolerated(pod, &n) {
			matching = append(matching, n)
		}
	}
	if len(matching) == 0 {
		return fail("no node of worker %s's cluster has the labels of its node selector (%s) without a taint it does not tolerate (%d nodes)",
			w.Name(), selector, len(nodes.Items))
	}
	requests := podRequests(pod)
	names := make([]corev1.ResourceName, 0, len(requests))
	for name := range requests {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		want := requests[name]
		var largest resource.Quantity
		for _, n := range matching {
			if q, ok := n.Status.Allocatable[name]; ok && q.Cmp(largest) > 0 {
				largest = q
			}
		}
		if want.Cmp(largest) > 0 {
			return fail("it requests %s %s, more than any node of worker %s's cluster can allocate (at most %s)",
				want.String(), name, w.Name(), largest.String())
		}
	}
	return nil
}

// unhelpful is the scheduler's word that no node could take the pod even
// with every other pod gone ("preemption: 0/3 nodes are available: 3
// Preemption is not helpful for scheduling").
var unhelpful = regexp.MustCompile(`preemption: 0/(\d+) nodes are available: (\d+) Preemption is not helpful for scheduling`)

// schedulerSaysNever reads the scheduler's message: every node is ruled
// out for good (a request above its allocatable, a selector or affinity it
// does not match), and none only for a taint or a cordon, which may pass.
func schedulerSaysNever(msg string) bool {
	m := unhelpful.FindStringSubmatch(msg)
	if m == nil || m[1] != m[2] {
		return false
	}
	lower := strings.ToLower(msg)
	return !strings.Contains(lower, "taint") && !strings.Contains(lower, "unschedulable")
}

// tolerated: the pod tolerates the node's lasting taints. Kubernetes' own
// node.kubernetes.io/ taints (not ready, cordoned, under pressure) pass and
// go, so they never rule a node out.
func tolerated(pod *corev1.Pod, n *corev1.Node) bool {
	for i := range n.Spec.Taints {
		t := &n.Spec.Taints[i]
		if t.Effect == corev1.TaintEffectPreferNoSchedule || strings.HasPrefix(t.Key, "node.kubernetes.io/") {
			continue
		}
		if !slices.ContainsFunc(pod.Spec.Tolerations, func(tol corev1.Toleration) bool { return tol.ToleratesTaint(klog.Background(), t, true) }) {
			return false
		}
	}
	return true
}

// podRequests is what the scheduler reserves for the pod: its containers
// and native sidecars together, or its largest plain init container if
// that is more, plus the pod overhead.
func podRequests(pod *corev1.Pod) corev1.ResourceList {
	add := func(into corev1.ResourceList, rl corev1.ResourceList) {
		for name, q := range rl {
			cur := into[name]
			cur.Add(q)
			into[name] = cur
		}
	}
	atLeast := func(into corev1.ResourceList, rl corev1.ResourceList) {
		for name, q := range rl {
			if cur := into[name]; q.Cmp(cur) > 0 {
				into[name] = q.DeepCopy()
			}
		}
	}
	running, sidecars, initPeak := corev1.ResourceList{}, corev1.ResourceList{}, corev1.ResourceList{}
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			add(sidecars, c.Resources.Requests)
			continue
		}
		// A plain init container runs with the sidecars started before it.
		alone := sidecars.DeepCopy()
		add(alone, c.Resources.Requests)
		atLeast(initPeak, alone)
	}
	for _, c := range pod.Spec.Containers {
		add(running, c.Resources.Requests)
	}
	add(running, sidecars)
	atLeast(running, initPeak)
	add(running, pod.Spec.Overhead)
	for name, q := range running {
		if q.IsZero() {
			delete(running, name)
		}
	}
	return running
}

// waitingMessage is the build log's line for a step that waits for room.
func waitingMessage(w *Worker, reason string) string {
	return fmt.Sprintf("waiting for room on worker %s: %s", w.Name(), strings.TrimSpace(reason))
}
