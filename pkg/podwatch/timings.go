package podwatch

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/porter-ci/porter/pkg/podspec"
)

// Timings are the moments of a step pod's start, as its status records them
// (second resolution). A zero time is one that has not happened (yet).
type Timings struct {
	Created time.Time
	// Scheduled is when the pod was bound to a node.
	Scheduled time.Time
	// Initialized is when the init containers (the native sidecar) were done
	// or running: from here the kubelet pulls the step's image.
	Initialized time.Time
	// StepStarted is when the step container started.
	StepStarted time.Time
}

// PodTimings reads a pod's start from its status.
func PodTimings(pod *corev1.Pod) Timings {
	t := Timings{Created: pod.CreationTimestamp.Time}
	if c := condition(pod, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionTrue {
		t.Scheduled = c.LastTransitionTime.Time
	}
	if c := condition(pod, corev1.PodInitialized); c != nil && c.Status == corev1.ConditionTrue {
		t.Initialized = c.LastTransitionTime.Time
	}
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name != podspec.StepContainerName {
			continue
		}
		switch {
		case s.State.Running != nil:
			t.StepStarted = s.State.Running.StartedAt.Time
		case s.State.Terminated != nil:
			t.StepStarted = s.State.Terminated.StartedAt.Time
		}
	}
	return t
}

// Scheduling is how long the pod waited for a node (0 if unknown).
func (t Timings) Scheduling() time.Duration { return between(t.Created, t.Scheduled) }

// ImagePull is how long the step container took to start once the pod was
// initialized: pulling its image and creating it (0 if unknown).
func (t Timings) ImagePull() time.Duration {
	return between(later(t.Initialized, t.Scheduled), t.StepStarted)
}

func between(from, to time.Time) time.Duration {
	if from.IsZero() || to.IsZero() || to.Before(from) {
		return 0
	}
	return to.Sub(from)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Pod returns the step's pod as the watcher's cache has it.
func (w *Watcher) Pod(stepID string) (*corev1.Pod, bool) {
	pod, err := w.lister.Pods(w.namespace).Get(podspec.Name(stepID))
	if err != nil {
		return nil, false
	}
	return pod, true
}
