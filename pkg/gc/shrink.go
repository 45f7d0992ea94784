package gc

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/podspec"
)

// keptRequests are what a finished step's container still asks for: it
// only waits for an intercept session, so the pod reserves little more
// than its sidecar's own requests.
var keptRequests = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("1m"),
	corev1.ResourceMemory: resource.MustParse("1Mi"),
}

// shrink lowers the CPU and memory requests of a kept pod's step container
// in place (the pods/resize subresource, Kubernetes 1.33+), so that a pod
// kept for intercept does not keep the finished step's reservation and
// block scheduling. Only a running pod holds a reservation; limits stay,
// and so does the pod's QoS class (the sidecar has requests without
// limits, so the pod is Burstable either way). It reports whether it
// asked for a resize.
func shrink(ctx context.Context, w Worker, pod *corev1.Pod) (bool, error) {
	if pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil {
		return false, nil
	}
	i := containerIndex(pod.Spec.Containers, podspec.StepContainerName)
	if i < 0 {
		return false, nil
	}
	want := shrunk(pod.Spec.Containers[i].Resources.Requests)
	if want == nil {
		return false, nil
	}
	resized := pod.DeepCopy()
	resized.Spec.Containers[i].Resources.Requests = want
	if _, err := w.Kube.CoreV1().Pods(w.Namespace).UpdateResize(ctx, pod.Name, resized, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return false, nil // changed or gone since the cache saw it: the next pass sees it anew
		}
		return false, fmt.Errorf("resize pod %s/%s: %w", w.Namespace, pod.Name, err)
	}
	return true, nil
}

// shrunk is requests with CPU and memory lowered to keptRequests, or nil
// when they are no higher already.
func shrunk(requests corev1.ResourceList) corev1.ResourceList {
	var out corev1.ResourceList
	for name, floor := range keptRequests {
		q, ok := requests[name]
		if !ok || q.Cmp(floor) <= 0 {
			continue
		}
		if out == nil {
			out = requests.DeepCopy()
		}
		out[name] = floor.DeepCopy()
	}
	return out
}

func containerIndex(cs []corev1.Container, name string) int {
	for i := range cs {
		if cs[i].Name == name {
			return i
		}
	}
	return -1
}

// FreeWorker deletes the kept pods of the worker that still hold a pod
// slot (running out their keep-alive), except those with an intercept
// session open, and the pods declared ahead of their steps' turn: a step
// that finds no room on the worker comes first. A step whose pod declared
// ahead went declares one again at its turn. It returns how many went.
func (c *Collector) FreeWorker(ctx context.Context, worker string) (int, error) {
	var w *Worker
	for _, cand := range c.workers() {
		if cand.Name == worker {
			w = &cand
			break
		}
	}
	if w == nil {
		return 0, nil
	}
	finished, err := c.db.FinishedContainers(ctx, w.Name)
	if err != nil {
		return 0, err
	}
	list, err := w.pods(ctx)
	if err != nil {
		return 0, err
	}
	pods := byName(list)
	n := 0
	var errs []error
	for _, ct := range finished {
		if ct.InterceptSessions > 0 || (ct.Namespace != "" && ct.Namespace != w.Namespace) {
			continue
		}
		name := podName(ct.Container)
		pod := pods[name]
		if pod == nil || pod.DeletionTimestamp != nil || (pod.Status.Phase != corev1.PodRunning && pod.Status.Phase != corev1.PodPending) {
			continue // gone, going, or ended: it holds no slot
		}
		deleted, err := deletePod(ctx, *w, name, pod)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := c.db.DeleteContainer(ctx, ct.Handle); err != nil && !errors.Is(err, db.ErrNotFound) {
			errs = append(errs, err)
		}
		if deleted {
			n++
		}
	}
	ahead, err := c.freeAhead(ctx, *w, pods)
	n += ahead
	errs = append(errs, err)
	if n > 0 {
		c.log.Info("freed kept pods and pods declared ahead for a step that finds no room", "worker", w.Name, "pods", n, "ahead", ahead)
	}
	return n, errors.Join(errs...)
}

// freeAhead deletes the worker's pods declared ahead of their turn: their
// container records stay, for the builds that declared them to clean.
func (c *Collector) freeAhead(ctx context.Context, w Worker, pods map[string]*corev1.Pod) (int, error) {
	containers, err := c.db.Containers(ctx, db.ContainerFilter{Type: string(concourse.KindTask)})
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, ct := range containers {
		if ct.State != concourse.ContainerWaiting || ct.WorkerName != w.Name {
			continue
		}
		pod := pods[ct.PodName]
		if pod == nil || pod.DeletionTimestamp != nil {
			continue
		}
		// Its build may be giving it the go-ahead at this moment: the pod
		// goes only if this pass moves it out of waiting first.
		freed, err := c.db.MoveContainerState(ctx, ct.Handle, concourse.ContainerWaiting, concourse.ContainerDestroying)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !freed {
			continue
		}
		deleted, err := deletePod(ctx, w, ct.PodName, pod)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if deleted {
			n++
		}
	}
	return n, errors.Join(errs...)
}
