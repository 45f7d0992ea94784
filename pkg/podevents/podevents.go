// Package podevents records Kubernetes Events on step pods, so that
// `kubectl describe pod` and `kubectl get events` say why Porter gave up on
// a step, next to the kubelet's own events.
package podevents

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// ReasonStepFailed is the reason of the Event on a step pod that made its
// step fail.
const ReasonStepFailed = "PorterStepFailed"

// Component is the Event's source.
const Component = "atc-porter-runtime"

// Pod names the pod an Event is about. UID may be empty (a pod already
// gone); the Event is then matched by name only.
type Pod struct {
	Namespace, Name string
	UID             types.UID
}

// Recorder creates Events with one worker's client (the namespace's Role
// must allow create on events).
type Recorder struct {
	Client kubernetes.Interface
	// Host is reported as the Event's source host (the server's ID).
	Host string
}

// Warning records a Warning Event with reason and message on pod.
func (r Recorder) Warning(ctx context.Context, pod Pod, reason, message string) error {
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: pod.Name + ".",
			Namespace:    pod.Namespace,
		},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: "v1", Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
		},
		Reason:              reason,
		Message:             message,
		Type:                corev1.EventTypeWarning,
		Source:              corev1.EventSource{Component: Component, Host: r.Host},
		ReportingController: "porter-ci.io/" + Component,
		ReportingInstance:   r.Host,
		Action:              "StepFailed",
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
	}
	if _, err := r.Client.CoreV1().Events(pod.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("record event %s on pod %s/%s: %w", reason, pod.Namespace, pod.Name, err)
	}
	return nil
}
