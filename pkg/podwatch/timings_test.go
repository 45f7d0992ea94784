package podwatch

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodTimings(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) metav1.Time { return metav1.NewTime(t0.Add(time.Duration(s) * time.Second)) }
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{CreationTimestamp: at(0)},
		Status: corev1.PodStatus{
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: at(2)},
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: at(3)},
			},
			ContainerStatuses: []corev1.ContainerStatus{
				{Name: "porter-sidecar", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at(3)}}},
				{Name: "step", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{StartedAt: at(10)}}},
			},
		},
	}
	tm := PodTimings(pod)
	if got := tm.Scheduling(); got != 2*time.Second {
		t.Errorf("scheduling = %v, want 2s", got)
	}
	if got := tm.ImagePull(); got != 7*time.Second {
		t.Errorf("image pull = %v, want 7s", got)
	}
	// Not started yet: unknown, not negative.
	pod.Status.ContainerStatuses = pod.Status.ContainerStatuses[:1]
	if got := PodTimings(pod).ImagePull(); got != 0 {
		t.Errorf("image pull before the step started = %v, want 0", got)
	}
}
