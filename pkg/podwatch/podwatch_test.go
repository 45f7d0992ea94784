package podwatch

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// waitFor bounds how long a test waits for something the informer delivers
// at once; it is generous because CI machines are shared.
const waitFor = 10 * time.Second

// startWatcher runs a Watcher on a fake clientset holding objects and waits
// until the informer's watch is open, so later changes are not missed.
func startWatcher(t *testing.T, objects ...runtime.Object) (*Watcher, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(objects...)
	watching := make(chan struct{})
	var once sync.Once
	client.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		once.Do(func() { close(watching) })
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := New(client, "ns", "w1", slog.New(slog.DiscardHandler))
	if err := w.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	select {
	case <-watching:
	case <-time.After(waitFor):
		t.Fatal("the informer never started watching")
	}
	return w, client
}

func expectFailure(t *testing.T, tr *Tracker, kind Kind) *Failure {
	t.Helper()
	select {
	case err := <-tr.Failed():
		f, ok := AsFailure(err)
		if !ok {
			t.Fatalf("Failed delivered %T %v, want *Failure", err, err)
		}
		if f.Kind != kind {
			t.Fatalf("Failed delivered %s (%v), want %s", f.Kind, f, kind)
		}
		return f
	case <-time.After(waitFor):
		t.Fatalf("no %s failure delivered", kind)
		return nil
	}
}

func expectEnd(t *testing.T, tr *Tracker) PodEnd {
	t.Helper()
	select {
	case end := <-tr.Ended():
		return end
	case <-time.After(waitFor):
		t.Fatal("no end delivered")
		return PodEnd{}
	}
}

// expectQuiet checks nothing else is delivered; the short wait only gives a
// wrong delivery the chance to show.
func expectQuiet(t *testing.T, tr *Tracker) {
	t.Helper()
	select {
	case err := <-tr.Failed():
		t.Fatalf("unexpected failure: %v", err)
	case end := <-tr.Ended():
		t.Fatalf("unexpected end: %+v", end)
	case <-time.After(200 * time.Millisecond):
	}
}

// trackRunning tracks step s1, whose pod runs.
func trackRunning(t *testing.T) (*Tracker, *fake.Clientset, *corev1.Pod) {
	t.Helper()
	pod := stepPod("s1")
	pod.Status.Phase = corev1.PodRunning
	w, client := startWatcher(t, pod)
	tr := w.Track("s1")
	t.Cleanup(tr.Stop)
	return tr, client, pod
}

func expectStepEnded(t *testing.T, tr *Tracker) {
	t.Helper()
	select {
	case <-tr.StepEnded():
	case <-time.After(waitFor):
		t.Fatal("StepEnded not closed after the step container terminated")
	}
}

func updateStatus(t *testing.T, client *fake.Clientset, pod *corev1.Pod) {
	t.Helper()
	if _, err := client.CoreV1().Pods(pod.Namespace).UpdateStatus(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update pod status: %v", err)
	}
}

func TestTrackerReportsImageFailureAfterTrack(t *testing.T) {
	w, client := startWatcher(t)
	tr := w.Track("s1")
	defer tr.Stop()

	pod := stepPod("s1")
	if _, err := client.CoreV1().Pods("ns").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectQuiet(t, tr)

	pod.Spec.Containers[0].Image = "busybox:missing"
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("step", "ErrImageNeverPull", "not present")}
	if _, err := client.CoreV1().Pods("ns").Update(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f := expectFailure(t, tr, KindImage)
	if !strings.Contains(f.Error(), `image "busybox:missing"`) {
		t.Errorf("error %q does not name the image", f)
	}

	// Only one failure, however often the pod changes.
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("step", "ImagePullBackOff", "back-off")}
	updateStatus(t, client, pod)
	expectQuiet(t, tr)
}

func TestTrackerReportsFromCache(t *testing.T) {
	pod := stepPod("s1")
	pod.Status.Phase = corev1.PodFailed
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{terminatedStatus("step", 137, "OOMKilled", "")}
	w, _ := startWatcher(t, pod)

	tr := w.Track("s1")
	defer tr.Stop()
	expectFailure(t, tr, KindOOMKilled)
	end := expectEnd(t, tr)
	if end.Phase != corev1.PodFailed || end.ExitCode != 137 || end.Reason != "OOMKilled" {
		t.Errorf("end = %+v", end)
	}
}

func TestTrackerSucceeded(t *testing.T) {
	pod := stepPod("s1")
	w, client := startWatcher(t, pod)
	tr := w.Track("s1")
	defer tr.Stop()

	pod.Status.Phase = corev1.PodSucceeded
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{terminatedStatus("step", 0, "Completed", "")}
	updateStatus(t, client, pod)
	end := expectEnd(t, tr)
	if end.Phase != corev1.PodSucceeded || !end.MainExited || end.ExitCode != 0 {
		t.Errorf("end = %+v", end)
	}

	// GC deleting an ended pod is not a failure.
	if err := client.CoreV1().Pods("ns").Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expectQuiet(t, tr)
}

func TestTrackerReportsDeletion(t *testing.T) {
	tr, client, pod := trackRunning(t)

	if err := client.CoreV1().Pods("ns").Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f := expectFailure(t, tr, KindDeleted)
	if f.Error() != "pod ns/porter-s1: deleted before the step finished" {
		t.Errorf("error = %q", f)
	}
}

func TestTrackerReportsTombstone(t *testing.T) {
	pod := stepPod("s1")
	pod.Status.Phase = corev1.PodRunning
	w, _ := startWatcher(t)
	tr := w.Track("s1")
	defer tr.Stop()

	// What the informer hands over when the watch missed the delete.
	w.deleted(cache.DeletedFinalStateUnknown{Key: "ns/" + pod.Name, Obj: pod})
	expectFailure(t, tr, KindDeleted)
}

func TestTrackerOnlySeesItsOwnStep(t *testing.T) {
	w, client := startWatcher(t)
	tr := w.Track("s1")
	defer tr.Stop()

	other := stepPod("s2")
	other.Status.Phase = corev1.PodFailed
	other.Status.Reason = "Evicted"
	if _, err := client.CoreV1().Pods("ns").Create(context.Background(), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectQuiet(t, tr)
}

func TestStoppedTrackerGetsNothing(t *testing.T) {
	pod := stepPod("s1")
	w, client := startWatcher(t, pod)
	tr := w.Track("s1")
	tr.Stop()

	pod.Status.Phase = corev1.PodFailed
	pod.Status.Reason = "Evicted"
	updateStatus(t, client, pod)
	expectQuiet(t, tr)
}

func TestRunFailsWhenPodsCannotBeListed(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("pods"), "", errors.New("no RBAC"))
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	w := New(client, "ns", "w1", slog.New(slog.DiscardHandler))
	err := w.Run(ctx)
	if !apierrors.IsForbidden(err) {
		t.Fatalf("Run = %v, want a Forbidden error", err)
	}
	if !strings.Contains(err.Error(), "watch step pods in ns") {
		t.Errorf("error %q does not say what failed", err)
	}
}

func TestTrackerStepEndedOnlyWhenTheStepContainerTerminated(t *testing.T) {
	tr, client, pod := trackRunning(t)

	// The sidecar ending is not the step's end.
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{terminatedStatus("porter-sidecar", 1, "Error", "")}
	updateStatus(t, client, pod)
	select {
	case <-tr.StepEnded():
		t.Fatal("StepEnded closed while the step container runs")
	case <-time.After(200 * time.Millisecond):
	}

	pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, terminatedStatus("step", 137, "Error", ""))
	updateStatus(t, client, pod)
	expectStepEnded(t, tr)
	expectQuiet(t, tr)
}

func TestTrackerDeliversEvictionNoLaterThanStepEnded(t *testing.T) {
	tr, client, pod := trackRunning(t)

	pod.Status.Phase, pod.Status.Reason, pod.Status.Message = corev1.PodFailed, "Evicted", `volume "workdir" exceeds the limit`
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{terminatedStatus("step", 137, "Error", "")}
	updateStatus(t, client, pod)
	expectStepEnded(t, tr)
	select {
	case err := <-tr.Failed():
		if f, _ := AsFailure(err); f == nil || f.Kind != KindEvicted {
			t.Fatalf("Failed delivered %v, want Evicted", err)
		}
	default:
		t.Fatal("StepEnded closed before the eviction in the same status was delivered")
	}
}

func TestTrackerReportsUnschedulableOnEachNewReasonNotAsFailure(t *testing.T) {
	tr, client, pod := trackRunning(t)
	pod.Status.Phase = corev1.PodPending
	unschedulable := func(msg string) {
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: msg}}
		updateStatus(t, client, pod)
	}
	next := func() string {
		t.Helper()
		select {
		case msg := <-tr.Unschedulable():
			return msg
		case <-time.After(waitFor):
			t.Fatal("no unschedulable reason delivered")
			return ""
		}
	}
	unschedulable("0/1 nodes are available: 1 Too many pods.")
	if got := next(); got != "0/1 nodes are available: 1 Too many pods." {
		t.Errorf("reason %q", got)
	}
	expectQuiet(t, tr)
	unschedulable("0/1 nodes are available: 1 Too many pods.") // the same again: nothing new
	select {
	case msg := <-tr.Unschedulable():
		t.Fatalf("the same reason delivered again: %q", msg)
	case <-time.After(200 * time.Millisecond):
	}
	unschedulable("0/1 nodes are available: 1 Insufficient cpu.")
	if got := next(); got != "0/1 nodes are available: 1 Insufficient cpu." {
		t.Errorf("changed reason %q", got)
	}
}
