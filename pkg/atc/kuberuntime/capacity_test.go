package kuberuntime

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/porter-ci/porter/pkg/worker"
)

func TestNeverFits(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"zone": "a"}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourcePods: resource.MustParse("110")}}}
	fakeNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kwok", Labels: map[string]string{"zone": "b"}},
		Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: "kwok.x-k8s.io/node", Value: "fake", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}}}
	w := &Worker{cfg: worker.Config{Name: "w"}, kube: fake.NewClientset(node, fakeNode)}
	always := corev1.ContainerRestartPolicyAlways
	pod := func(cpu string, selector map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: corev1.PodSpec{
			NodeSelector: selector,
			InitContainers: []corev1.Container{{Name: "sidecar", RestartPolicy: &always, Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}}}},
			Containers: []corev1.Container{{Name: "step", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}},
		}}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want string // "" : may fit later
	}{
		{"fits the node", pod("1", nil), ""},
		{"all of the node's CPU with the sidecar's is more", pod("2", nil), "requests 2010m cpu, more than any node"},
		{"a selector the node has", pod("1", map[string]string{"zone": "a"}), ""},
		{"a selector only a tainted node has", pod("1", map[string]string{"zone": "b"}), "no node of worker w's cluster has the labels of its node selector (zone=b) without a taint"},
		{"a selector no node has", pod("1", map[string]string{"zone": "c"}), "no node of worker w's cluster has the labels of its node selector (zone=c)"},
	} {
		f := neverFits(t.Context(), w, tc.pod, "")
		switch {
		case tc.want == "" && f != nil:
			t.Errorf("%s: never fits: %v", tc.name, f)
		case tc.want != "" && (f == nil || !strings.Contains(f.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.name, f, tc.want)
		}
	}
}

func TestSchedulerSaysNever(t *testing.T) {
	for msg, want := range map[string]bool{
		"0/1 nodes are available: 1 Insufficient cpu. no new claims to deallocate, preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.":                    true,
		"0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.":                true,
		"0/1 nodes are available: 1 Too many pods. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.":                                                false,
		"0/6 nodes are available: 1 Insufficient cpu, 5 node(s) had untolerated taint(s). preemption: 0/6 nodes are available: 6 Preemption is not helpful for scheduling.":             false,
		"0/2 nodes are available: 1 Insufficient cpu, 1 node(s) were unschedulable. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.":                   false,
		"0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling.": false,
	} {
		if got := schedulerSaysNever(msg); got != want {
			t.Errorf("%q: %v, want %v", msg, got, want)
		}
	}
}
