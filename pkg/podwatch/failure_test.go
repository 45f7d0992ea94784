package podwatch

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/pkg/podspec"
)

// stepPod is a pod shaped like podspec's: install, native sidecar, step.
func stepPod(stepID string) *corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      podspec.Name(stepID),
			Namespace: "ns",
			Labels:    podspec.StepLabels(stepID, "b1", "main", "w1"),
		},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			InitContainers: []corev1.Container{
				{Name: "install", Image: "porter.local/porter:dev"}, // as declared before porter was installed by a postStart hook
				{Name: podspec.SidecarContainerName, Image: "porter.local/porter:dev", RestartPolicy: &always},
			},
			Containers: []corev1.Container{{
				Name:  podspec.StepContainerName,
				Image: "busybox",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					corev1.ResourceMemory: resource.MustParse("16Mi"),
				}},
			}},
		},
	}
}

func waiting(name, reason, message string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message},
	}}
}

func terminatedStatus(name string, code int32, reason, message string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: message},
	}}
}

func TestClassify(t *testing.T) {
	now := metav1.Now()
	tests := []struct {
		name   string
		modify func(*corev1.Pod)
		kind   Kind // empty: no failure
		want   []string
	}{
		{
			name:   "pending pod without news",
			modify: func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending },
		},
		{
			name: "running pod",
			modify: func(p *corev1.Pod) {
				p.Status.Phase = corev1.PodRunning
				p.Status.InitContainerStatuses = []corev1.ContainerStatus{terminatedStatus("install", 0, "Completed", "")}
			},
		},
		{
			name: "step exited non-zero is the step's own result",
			modify: func(p *corev1.Pod) {
				p.Status.Phase = corev1.PodFailed
				p.Status.ContainerStatuses = []corev1.ContainerStatus{terminatedStatus("step", 1, "Error", "")}
			},
		},
		{
			name: "unschedulable",
			modify: func(p *corev1.Pod) {
				p.Status.Phase = corev1.PodPending
				p.Status.Conditions = []corev1.PodCondition{{
					Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
					Message: "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.",
				}}
			},
			// Not a failure: Tracker.Unschedulable reports it, and
			// kuberuntime waits unless the pod can never fit.
		},
		{
			name: "image never pulled in the step container",
			modify: func(p *corev1.Pod) {
				p.Spec.Containers[0].Image = "busybox:missing"
				p.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("step", "ErrImageNeverPull",
					`Container image "busybox:missing" is not present with pull policy of Never`)}
			},
			kind: KindImage,
			want: []string{`pod ns/porter-s1: image "busybox:missing" of container "step" could not be pulled: ErrImageNeverPull: Container image`},
		},
		{
			name: "image pull back-off in an init container",
			modify: func(p *corev1.Pod) {
				p.Status.InitContainerStatuses = []corev1.ContainerStatus{waiting("install", "ImagePullBackOff", "Back-off pulling image")}
			},
			kind: KindImage,
			want: []string{`image "porter.local/porter:dev" of container "install" could not be pulled: ImagePullBackOff: Back-off`},
		},
		{
			name: "err image pull",
			modify: func(p *corev1.Pod) {
				p.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("step", "ErrImagePull", "dial tcp: no route")}
			},
			kind: KindImage,
			want: []string{"ErrImagePull: dial tcp: no route"},
		},
		{
			name: "invalid image name",
			modify: func(p *corev1.Pod) {
				p.Spec.Containers[0].Image = "Bad Name"
				p.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("step", "InvalidImageName", "couldn't parse image name")}
			},
			kind: KindImage,
			want: []string{`image "Bad Name"`, "InvalidImageName"},
		},
		{
			name: "create container config error",
			modify: func(p *corev1.Pod) {
				p.Status.InitContainerStatuses = []corev1.ContainerStatus{
					terminatedStatus("install", 0, "Completed", ""),
					waiting("porter-sidecar", "CreateContainerConfigError", `secret "porter-s1" not found`),
				}
			},
			kind: KindCreateContainer,
			want: []string{`container "porter-sidecar" could not be created: CreateContainerConfigError: secret "porter-s1" not found`},
		},
		{
			// The kubelet's Secret cache lags a Secret created just before the
			// pod; it retries, so this is no failure yet.
			name: "secret cache not yet in sync",
			modify: func(p *corev1.Pod) {
				p.Status.InitContainerStatuses = []corev1.ContainerStatus{
					waiting("porter-sidecar", "CreateContainerConfigError", "failed to sync secret cache: timed out waiting for the condition"),
				}
			},
		},
		{
			name: "create container error",
			modify: func(p *corev1.Pod) {
				p.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("step", "CreateContainerError", "no such file")}
			},
			kind: KindCreateContainer,
			want: []string{"CreateContainerError: no such file"},
		},
		{
			name: "OOMKilled step container",
			modify: func(p *corev1.Pod) {
				p.Status.Phase = corev1.PodFailed
				p.Status.ContainerStatuses = []corev1.ContainerStatus{terminatedStatus("step", 137, "OOMKilled", "")}
			},
			kind: KindOOMKilled,
			want: []string{"pod ns/porter-s1: step container was killed for exceeding its memory limit of 16Mi (OOMKilled)"},
		},
		{
			name: "OOMKilled wins over the deletion that followed",
			modify: func(p *corev1.Pod) {
				p.DeletionTimestamp = &now
				p.Status.Phase = corev1.PodFailed
				p.Status.ContainerStatuses = []corev1.ContainerStatus{terminatedStatus("step", 137, "OOMKilled", "")}
			},
			kind: KindOOMKilled,
		},
		{
			name: "evicted",
			modify: func(p *corev1.Pod) {
				p.Status.Phase = corev1.PodFailed
				p.Status.Reason = "Evicted"
				p.Status.Message = "The node was low on resource: ephemeral-storage."
			},
			kind: KindEvicted,
			want: []string{"pod ns/porter-s1: evicted: The node was low on resource: ephemeral-storage."},
		},
		{
			name: "deadline exceeded",
			modify: func(p *corev1.Pod) {
				p.Spec.ActiveDeadlineSeconds = new(int64(5))
				p.Status.Phase = corev1.PodFailed
				p.Status.Reason = "DeadlineExceeded"
				p.Status.Message = "Pod was active on the node longer than the specified deadline"
			},
			kind: KindDeadlineExceeded,
			want: []string{"pod ns/porter-s1: activeDeadlineSeconds (5s) exceeded: Pod was active on the node longer"},
		},
		{
			name: "disrupted by an API eviction",
			modify: func(p *corev1.Pod) {
				p.DeletionTimestamp = &now
				p.Status.Phase = corev1.PodRunning
				p.Status.Conditions = []corev1.PodCondition{{
					Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
					Reason: "EvictionByEvictionAPI", Message: "Eviction API: evicting",
				}}
			},
			kind: KindDisrupted,
			want: []string{"stopped by Kubernetes (EvictionByEvictionAPI): Eviction API: evicting"},
		},
		{
			name: "being deleted while running",
			modify: func(p *corev1.Pod) {
				p.DeletionTimestamp = &now
				p.Status.Phase = corev1.PodRunning
			},
			kind: KindDeleted,
			want: []string{"pod ns/porter-s1: deleted before the step finished"},
		},
		{
			name: "deleted after it succeeded is no failure",
			modify: func(p *corev1.Pod) {
				p.DeletionTimestamp = &now
				p.Status.Phase = corev1.PodSucceeded
			},
		},
		{
			name: "install init container failed",
			modify: func(p *corev1.Pod) {
				p.Status.Phase = corev1.PodFailed
				p.Status.InitContainerStatuses = []corev1.ContainerStatus{terminatedStatus("install", 2, "Error", "no space left on device\n")}
			},
			kind: KindInitFailed,
			want: []string{`init container "install" failed with exit code 2: no space left on device`},
		},
		{
			name: "a restarting native sidecar is not an init failure",
			modify: func(p *corev1.Pod) {
				p.Status.Phase = corev1.PodRunning
				p.Status.InitContainerStatuses = []corev1.ContainerStatus{
					terminatedStatus("install", 0, "Completed", ""),
					terminatedStatus("porter-sidecar", 1, "Error", ""),
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := stepPod("s1")
			tt.modify(pod)
			f := Classify(pod)
			if tt.kind == "" {
				if f != nil {
					t.Fatalf("Classify = %v, want no failure", f)
				}
				return
			}
			if f == nil {
				t.Fatalf("Classify = nil, want %s", tt.kind)
			}
			if f.Kind != tt.kind {
				t.Errorf("Kind = %s, want %s (%v)", f.Kind, tt.kind, f)
			}
			if f.Pod != "ns/porter-s1" {
				t.Errorf("Pod = %q", f.Pod)
			}
			for _, w := range tt.want {
				if !strings.Contains(f.Error(), w) {
					t.Errorf("error %q does not contain %q", f.Error(), w)
				}
			}
		})
	}
}

func TestEnd(t *testing.T) {
	pod := stepPod("s1")
	pod.Status.Phase = corev1.PodRunning
	if _, ok := End(pod); ok {
		t.Fatal("End of a running pod reported an end")
	}

	pod.Status.Phase = corev1.PodSucceeded
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{terminatedStatus("step", 0, "Completed", "")}
	end, ok := End(pod)
	if !ok || end.Phase != corev1.PodSucceeded || !end.MainExited || end.ExitCode != 0 || end.Reason != "Completed" {
		t.Errorf("End = %+v, %v", end, ok)
	}

	pod.Status.Phase = corev1.PodFailed
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{terminatedStatus("step", 3, "Error", "boom\n")}
	end, _ = End(pod)
	if end.ExitCode != 3 || end.Message != "boom" || !end.MainExited {
		t.Errorf("End = %+v", end)
	}

	pod.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("step", "PodInitializing", "")}
	end, _ = End(pod)
	if end.MainExited {
		t.Errorf("End = %+v, want MainExited false", end)
	}
}

func TestSigkilledWithoutReason(t *testing.T) {
	for _, c := range []struct {
		name   string
		status corev1.ContainerStatus
		delete bool
		want   bool
	}{
		{"SIGKILL with no reason", terminatedStatus("step", 137, "Error", ""), false, true},
		{"the kubelet said OOMKilled", terminatedStatus("step", 137, "OOMKilled", ""), false, false},
		{"another exit code", terminatedStatus("step", 1, "Error", ""), false, false},
		{"killed while being deleted", terminatedStatus("step", 137, "Error", ""), true, false},
		{"still running", corev1.ContainerStatus{Name: "step"}, false, false},
	} {
		pod := stepPod("s1")
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{c.status}
		if c.delete {
			now := metav1.Now()
			pod.DeletionTimestamp = &now
		}
		f := SigkilledWithoutReason(pod)
		if (f != nil) != c.want {
			t.Errorf("%s: %v, want a failure: %v", c.name, f, c.want)
		}
		if f != nil && (f.Kind != KindOOMKilled || !strings.Contains(f.Error(), "exit 137")) {
			t.Errorf("%s: %v", c.name, f)
		}
	}
}
