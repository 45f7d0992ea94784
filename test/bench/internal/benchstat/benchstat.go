// Package benchstat is what the benchmarks measure with: the median of a
// series of runs, and pods on the local cluster timed without Porter (a bare
// pod, a pod watched until a condition holds).
package benchstat

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// RunBarePod is the baseline benchmarks compare a step with: a busybox pod
// running `true`, created and watched (from a list, so an already finished
// one counts) until it has succeeded.
func RunBarePod(ctx context.Context, kube kubernetes.Interface, ns, name string) error {
	no := false
	pods := kube.CoreV1().Pods(ns)
	if _, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: &no, EnableServiceLinks: &no, DNSPolicy: corev1.DNSDefault,
		Containers: []corev1.Container{{Name: "main", Image: "busybox", ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"true"}}},
	}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	return WaitForPod(ctx, kube, ns, name, 2*time.Minute, func(pod *corev1.Pod) (bool, error) {
		if pod.Status.Phase == corev1.PodFailed {
			return false, fmt.Errorf("pod %s failed", name)
		}
		return pod.Status.Phase == corev1.PodSucceeded, nil
	})
}

// WaitForPod watches pod ns/name until done says so (or fails), for at
// most timeout.
func WaitForPod(ctx context.Context, kube kubernetes.Interface, ns, name string, timeout time.Duration, done func(*corev1.Pod) (bool, error)) error {
	pods := kube.CoreV1().Pods(ns)
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return pods.List(ctx, o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return pods.Watch(ctx, o)
		},
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := watchtools.UntilWithSync(wctx, lw, &corev1.Pod{}, nil, func(ev watch.Event) (bool, error) {
		pod, ok := ev.Object.(*corev1.Pod)
		if !ok {
			return false, nil
		}
		return done(pod)
	})
	return err
}

// Median is the middle of ds (the upper one of an even count).
func Median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
