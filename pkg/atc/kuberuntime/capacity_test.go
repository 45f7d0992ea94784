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
	w := &Worker{cfg: worker.Config{Name: "w"}, kube: fake.NewClientset(node)}
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
		{"a selector no node has", pod("1", map[string]string{"zone": "b"}), "no node of worker w's cluster has the labels of its node selector zone=b"},
	} {
		f := neverFits(t.Context(), w, tc.pod)
		switch {
		case tc.want == "" && f != nil:
			t.Errorf("%s: never fits: %v", tc.name, f)
		case tc.want != "" && (f == nil || !strings.Contains(f.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.name, f, tc.want)
		}
	}
}
