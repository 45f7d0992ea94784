package podwatch

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/porter-ci/porter/pkg/podspec"
)

// Kind says which way Kubernetes found that a step cannot succeed.
type Kind string

const (
	KindUnschedulable    Kind = "Unschedulable"
	KindImage            Kind = "Image"
	KindCreateContainer  Kind = "CreateContainer"
	KindInitFailed       Kind = "InitFailed"
	KindOOMKilled        Kind = "OOMKilled"
	KindEvicted          Kind = "Evicted"
	KindDisrupted        Kind = "Disrupted"
	KindDeleted          Kind = "Deleted"
	KindDeadlineExceeded Kind = "DeadlineExceeded"
)

// Failure is what a Tracker reports: the step's pod cannot succeed. Its
// Error text is meant for people and names the pod and the problem.
type Failure struct {
	Kind Kind
	// Pod is namespace/name.
	Pod string
	// Container is set when one container is the cause.
	Container string
	// Reason is Kubernetes' reason (e.g. ErrImageNeverPull, Evicted).
	Reason string
	// Detail is the human part of the message, without the pod's name.
	Detail string
}

func (f *Failure) Error() string {
	return "pod " + f.Pod + ": " + f.Detail
}

// Pod status reasons Kubernetes sets that the watcher recognizes. The API
// package has no constants for them.
const (
	reasonEvicted          = "Evicted"
	reasonDeadlineExceeded = "DeadlineExceeded"
	reasonOOMKilled        = "OOMKilled"
)

// imageReasons are the waiting reasons for an image that will not come: with
// nothing else changing, the kubelet only backs off and retries.
var imageReasons = map[string]bool{
	"ErrImagePull":        true,
	"ImagePullBackOff":    true,
	"ErrImageNeverPull":   true,
	"InvalidImageName":    true,
	"ImageInspectError":   true,
	"RegistryUnavailable": true,
}

// createReasons are waiting reasons for a container the kubelet cannot create.
var createReasons = map[string]bool{
	"CreateContainerConfigError": true,
	"CreateContainerError":       true,
}

// transientCreate reports whether a container-creation error is the
// kubelet's Secret or ConfigMap cache not being in sync yet ("failed to
// sync secret cache: timed out waiting for the condition"), which happens
// when a pod's first container needs a Secret created just before it: the
// kubelet retries, unlike a missing Secret or key.
func transientCreate(msg string) bool {
	return strings.Contains(msg, "failed to sync secret cache") || strings.Contains(msg, "failed to sync configmap cache")
}

// Classify returns why the pod cannot succeed, or nil while it still can.
// It only reads the pod; deletion seen by the informer is reported by the
// Watcher itself.
func Classify(pod *corev1.Pod) *Failure {
	fail := func(kind Kind, container, reason, format string, args ...any) *Failure {
		return &Failure{
			Kind:      kind,
			Pod:       pod.Namespace + "/" + pod.Name,
			Container: container,
			Reason:    reason,
			Detail:    fmt.Sprintf(format, args...),
		}
	}

	// The pod's own reason is the most specific account once it has failed.
	switch pod.Status.Reason {
	case reasonEvicted:
		return fail(KindEvicted, "", reasonEvicted, "evicted%s", suffix(pod.Status.Message))
	case reasonDeadlineExceeded:
		return fail(KindDeadlineExceeded, "", reasonDeadlineExceeded,
			"activeDeadlineSeconds%s exceeded%s", deadline(pod), suffix(pod.Status.Message))
	}

	// The main container's own end comes before anything about deletion:
	// an OOM kill is the cause even if the pod is then cleaned up.
	if t := terminatedState(pod.Status.ContainerStatuses, podspec.StepContainerName); t != nil && t.Reason == reasonOOMKilled {
		return fail(KindOOMKilled, podspec.StepContainerName, reasonOOMKilled,
			"step container was killed for exceeding its memory limit%s (OOMKilled)", memoryLimit(pod))
	}

	if c := condition(pod, corev1.DisruptionTarget); c != nil && c.Status == corev1.ConditionTrue && !ended(pod) {
		return fail(KindDisrupted, "", c.Reason, "stopped by Kubernetes (%s)%s", c.Reason, suffix(c.Message))
	}
	if pod.DeletionTimestamp != nil && !ended(pod) {
		return fail(KindDeleted, "", "Deleted", "deleted before the step finished")
	}

	// Unschedulable is not a failure: capacity frees, an autoscaler adds a
	// node. The tracker reports it apart (Tracker.Unschedulable) and
	// kuberuntime decides whether the pod can ever fit.

	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, s := range statuses {
			w := s.State.Waiting
			if w == nil {
				continue
			}
			switch {
			case imageReasons[w.Reason]:
				return fail(KindImage, s.Name, w.Reason, "image %q of container %q could not be pulled: %s%s",
					containerImage(pod, s), s.Name, w.Reason, suffix(w.Message))
			case createReasons[w.Reason] && transientCreate(w.Message):
				// The kubelet retries; the container starts once its cache has the Secret.
			case createReasons[w.Reason]:
				return fail(KindCreateContainer, s.Name, w.Reason, "container %q could not be created: %s%s",
					s.Name, w.Reason, suffix(w.Message))
			}
		}
	}

	// A run-once init container that fails ends the pod before the step
	// starts (pods declared by older ATCs had an install init container);
	// restartable ones (the native sidecar) are restarted.
	for _, s := range pod.Status.InitContainerStatuses {
		t := s.State.Terminated
		if t == nil || t.ExitCode == 0 || restartable(pod, s.Name) {
			continue
		}
		return fail(KindInitFailed, s.Name, t.Reason, "init container %q failed with exit code %d%s%s",
			s.Name, t.ExitCode, reasonText(t.Reason), suffix(strings.TrimSpace(t.Message)))
	}
	return nil
}

// End returns how the pod ended, and false while it has not.
func End(pod *corev1.Pod) (PodEnd, bool) {
	if !ended(pod) {
		return PodEnd{}, false
	}
	e := PodEnd{Phase: pod.Status.Phase, Reason: pod.Status.Reason, Message: pod.Status.Message}
	if t := terminatedState(pod.Status.ContainerStatuses, podspec.StepContainerName); t != nil {
		e.MainExited = true
		e.ExitCode = t.ExitCode
		if e.Reason == "" {
			e.Reason = t.Reason
		}
		if e.Message == "" {
			e.Message = strings.TrimSpace(t.Message)
		}
	}
	return e, true
}

// Unschedulable is the scheduler's reason for not placing the pod yet
// ("0/1 nodes are available: 1 Too many pods. ..."), when it has none.
func Unschedulable(pod *corev1.Pod) (string, bool) {
	c := condition(pod, corev1.PodScheduled)
	if c == nil || c.Status != corev1.ConditionFalse || c.Reason != corev1.PodReasonUnschedulable || ended(pod) || pod.DeletionTimestamp != nil {
		return "", false
	}
	msg := c.Message
	if msg == "" {
		msg = "no node can take it"
	}
	return msg, true
}

func ended(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

func suffix(msg string) string {
	if msg == "" {
		return ""
	}
	return ": " + msg
}

func reasonText(reason string) string {
	if reason == "" || reason == "Error" {
		return ""
	}
	return " (" + reason + ")"
}

func condition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// SigkilledWithoutReason is the failure of a step container that the
// pod's status shows killed by SIGKILL (exit 137) with no reason given, nil
// otherwise. The runtime may write the container's end before it has seen
// the kernel's OOM event, so OOMKilled can be missing; when the step's own
// wrapper went with it (the whole container was killed, not a process in
// it), an OOM kill is by far the likeliest cause.
func SigkilledWithoutReason(pod *corev1.Pod) *Failure {
	t := terminatedState(pod.Status.ContainerStatuses, podspec.StepContainerName)
	if t == nil || t.ExitCode != 137 || t.Reason == reasonOOMKilled || pod.DeletionTimestamp != nil {
		return nil
	}
	return &Failure{Kind: KindOOMKilled, Pod: pod.Namespace + "/" + pod.Name, Container: podspec.StepContainerName,
		Reason: t.Reason, Detail: fmt.Sprintf(
			"step container was killed (SIGKILL, exit 137) with no reason from the kubelet: most likely for exceeding its memory limit%s",
			memoryLimit(pod))}
}

func terminatedState(statuses []corev1.ContainerStatus, name string) *corev1.ContainerStateTerminated {
	for _, s := range statuses {
		if s.Name == name {
			return s.State.Terminated
		}
	}
	return nil
}

// containerImage prefers the spec's image: the status may hold a resolved
// or empty one while the pull fails.
func containerImage(pod *corev1.Pod, s corev1.ContainerStatus) string {
	if c := specContainer(pod, s.Name); c != nil && c.Image != "" {
		return c.Image
	}
	return s.Image
}

func specContainer(pod *corev1.Pod, name string) *corev1.Container {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

func restartable(pod *corev1.Pod, name string) bool {
	c := specContainer(pod, name)
	return c != nil && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

func memoryLimit(pod *corev1.Pod) string {
	c := specContainer(pod, podspec.StepContainerName)
	if c == nil {
		return ""
	}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		return " of " + q.String()
	}
	return ""
}

func deadline(pod *corev1.Pod) string {
	if pod.Spec.ActiveDeadlineSeconds == nil {
		return ""
	}
	return fmt.Sprintf(" (%ds)", *pod.Spec.ActiveDeadlineSeconds)
}
