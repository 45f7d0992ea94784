package kuberuntime

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/podwatch"
)

// A pod that goes away under its step is a loss (the step may start again
// in a new pod); a step that failed on its own, or a pod not yet placed, is
// not.
func TestPodLoss(t *testing.T) {
	now := metav1.Now()
	running := func(mod func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "porter-b1-x"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		mod(p)
		return p
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want podwatch.Kind // "": not a loss
	}{
		{"running", running(func(*corev1.Pod) {}), ""},
		{"deleted by someone", running(func(p *corev1.Pod) { p.DeletionTimestamp = &now }), podwatch.KindDeleted},
		{"evicted", running(func(p *corev1.Pod) {
			p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
		}), podwatch.KindEvicted},
		{"evicted for its own emptyDir's size limit", running(func(p *corev1.Pod) {
			p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "Evicted", `Usage of EmptyDir volume "workdir" exceeds the limit "32Mi". `
		}), ""},
		{"evicted for its container's ephemeral-storage limit", running(func(p *corev1.Pod) {
			p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "Evicted", `Container step exceeded its local ephemeral storage limit "1Gi". `
		}), ""},
		{"preempted, still stopping", running(func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "PreemptionByScheduler"}}
		}), podwatch.KindDisrupted},
		{"its node gone, ended", running(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodFailed
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByTaintManager"}}
		}), podwatch.KindDisrupted},
		{"out of memory", running(func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: podspec.StepContainerName,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}
		}), ""},
		{"unschedulable", running(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
		}), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := podLoss(tc.pod)
			switch {
			case tc.want == "" && f != nil:
				t.Errorf("a loss (%s: %s), want none", f.Kind, f.Error())
			case tc.want != "" && f == nil:
				t.Errorf("no loss, want %s", tc.want)
			case f != nil && f.Kind != tc.want:
				t.Errorf("loss %s, want %s", f.Kind, tc.want)
			}
		})
	}
}
