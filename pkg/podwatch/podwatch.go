// Package podwatch is the ATC's view of a worker's step pods: one shared
// informer over the pods Porter created in the worker's namespace, and a
// Tracker per step that reports, as soon as Kubernetes knows it, that the step
// cannot succeed (unschedulable, image pull, OOM kill, eviction, deletion,
// deadline) and when its pod has ended. The sidecar reports the step's own
// result; this package covers what the sidecar cannot.
package podwatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/porter-ci/porter/pkg/podspec"
)

// PodEnd is how a step's pod ended.
type PodEnd struct {
	// Phase is Succeeded or Failed.
	Phase corev1.PodPhase
	// Reason and Message are the pod's, or else the main container's.
	Reason  string
	Message string
	// MainExited is false when the main container never ran to an end (e.g.
	// an init container failed); ExitCode is then meaningless.
	MainExited bool
	ExitCode   int32
}

// Watcher watches one worker's step pods.
type Watcher struct {
	client    kubernetes.Interface
	namespace string
	selector  string
	log       *slog.Logger
	factory   informers.SharedInformerFactory
	informer  cache.SharedIndexInformer
	lister    corelisters.PodLister
	// shutdown counts the goroutine that shuts the informer down once
	// Run's ctx ends; Wait waits for it.
	shutdown sync.WaitGroup

	mu sync.Mutex
	// trackers by pod name; a step may be tracked more than once.
	trackers map[string]map[*Tracker]struct{}
}

// New returns a Watcher over the pods of worker in namespace. Nothing talks
// to the API server until Run.
func New(client kubernetes.Interface, namespace, worker string, log *slog.Logger) *Watcher {
	if log == nil {
		log = slog.Default()
	}
	selector := podspec.WorkerSelector(worker)
	// The ATC's Role allows list/watch of pods in this namespace only, and the
	// label selector keeps the cache to Porter's own pods.
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }),
		informers.WithTransform(dropManagedFields),
	)
	pods := factory.Core().V1().Pods()
	w := &Watcher{
		client:    client,
		namespace: namespace,
		selector:  selector,
		log:       log.With("namespace", namespace, "worker", worker),
		factory:   factory,
		informer:  pods.Informer(),
		lister:    pods.Lister(),
		trackers:  map[string]map[*Tracker]struct{}{},
	}
	return w
}

// Run starts the informer and returns once its cache has synced, or with an
// error if ctx ends first. The informer keeps running until ctx is done.
// Call it once.
func (w *Watcher) Run(ctx context.Context) error {
	// The informer retries a forbidden list forever; one list up front turns
	// missing RBAC into an error the caller sees at once.
	if _, err := w.client.CoreV1().Pods(w.namespace).List(ctx, metav1.ListOptions{LabelSelector: w.selector, Limit: 1}); err != nil {
		return fmt.Errorf("watch step pods in %s: list pods: %w", w.namespace, err)
	}
	_, err := w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.observe(obj) },
		UpdateFunc: func(_, obj any) { w.observe(obj) },
		DeleteFunc: w.deleted,
	})
	if err != nil {
		return fmt.Errorf("watch step pods in %s: add event handler: %w", w.namespace, err)
	}
	if err := w.informer.SetWatchErrorHandlerWithContext(w.watchError); err != nil {
		return fmt.Errorf("watch step pods in %s: set watch error handler: %w", w.namespace, err)
	}
	w.factory.StartWithContext(ctx)
	w.shutdown.Add(1)
	go func() {
		defer w.shutdown.Done()
		<-ctx.Done()
		w.factory.Shutdown()
	}()
	if err := w.factory.WaitForCacheSyncWithContext(ctx).AsError(); err != nil {
		return fmt.Errorf("watch step pods in %s: wait for cache sync: %w", w.namespace, err)
	}
	w.log.Debug("step pod cache synced")
	return nil
}

// Wait returns once the informer Run started has shut down, after Run's
// ctx ended (at once if Run never started it).
func (w *Watcher) Wait() { w.shutdown.Wait() }

// Pods are the worker's step pods in the cache, false until it has synced.
// They are the cache's own objects: read only.
func (w *Watcher) Pods() ([]*corev1.Pod, bool) {
	if !w.informer.HasSynced() {
		return nil, false
	}
	pods, err := w.lister.Pods(w.namespace).List(labels.Everything())
	if err != nil {
		return nil, false
	}
	return pods, true
}

// watchError logs why listing or watching failed; the informer retries by
// itself with backoff. Forbidden usually means the Role is missing.
func (w *Watcher) watchError(_ context.Context, _ *cache.Reflector, err error) {
	switch {
	case errors.Is(err, io.EOF), apierrors.IsResourceExpired(err), apierrors.IsGone(err):
		// A watch that ended or expired normally; the informer relists.
		return
	case apierrors.IsForbidden(err):
		w.log.Error("watching step pods is forbidden; check the ATC's Role", "err", err)
		return
	}
	w.log.Warn("watching step pods failed; retrying", "err", err)
}

// Track starts following the pod of stepID. Call it before or right after
// creating the pod: a pod that already failed or ended is reported from the
// cache at once, but one that came and went before Track cannot be told apart
// from one that was never created.
func (w *Watcher) Track(stepID string) *Tracker {
	t := &Tracker{
		w:         w,
		pod:       podspec.Name(stepID),
		failed:    make(chan error, 1),
		ended:     make(chan PodEnd, 1),
		stepEnded: make(chan struct{}),
		unsched:   make(chan string, 1),
	}
	w.mu.Lock()
	set := w.trackers[t.pod]
	if set == nil {
		set = map[*Tracker]struct{}{}
		w.trackers[t.pod] = set
	}
	set[t] = struct{}{}
	w.mu.Unlock()

	// Registered first, so an event that arrives meanwhile is not lost; the
	// cache read then covers everything that happened before Track.
	pod, err := w.lister.Pods(w.namespace).Get(t.pod)
	if err == nil {
		t.observe(pod, w.log)
	} else if !apierrors.IsNotFound(err) {
		w.log.Warn("reading step pod from cache", "pod", t.pod, "err", err)
	}
	return t
}

func (w *Watcher) observe(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	for _, t := range w.trackersOf(pod.Name) {
		t.observe(pod, w.log)
	}
}

func (w *Watcher) deleted(obj any) {
	// When the watch missed the delete, the informer hands over the last
	// state it knew, wrapped.
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	for _, t := range w.trackersOf(pod.Name) {
		t.observeDeleted(pod, w.log)
	}
}

func (w *Watcher) trackersOf(pod string) []*Tracker {
	w.mu.Lock()
	defer w.mu.Unlock()
	set := w.trackers[pod]
	list := make([]*Tracker, 0, len(set))
	for t := range set {
		list = append(list, t)
	}
	return list
}

func (w *Watcher) untrack(t *Tracker) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.trackers[t.pod], t)
	if len(w.trackers[t.pod]) == 0 {
		delete(w.trackers, t.pod)
	}
}

// Tracker follows one step's pod.
type Tracker struct {
	w         *Watcher
	pod       string
	failed    chan error
	ended     chan PodEnd
	stepEnded chan struct{}
	unsched   chan string

	mu            sync.Mutex
	lastUnsched   string   // the scheduler's last message sent on unsched
	killed        *Failure // see Killed
	sentFailed    bool
	sentEnded     bool
	sentStepEnded bool
}

// Pod is the name of the tracked pod.
func (t *Tracker) Pod() string { return t.pod }

// Failed delivers at most one error, a *Failure, when Kubernetes knows the
// step cannot succeed. It may come together with Ended (e.g. OOMKilled).
// The channel is never closed.
func (t *Tracker) Failed() <-chan error { return t.failed }

// Ended delivers once, when the pod reaches Succeeded or Failed. The channel
// is never closed.
func (t *Tracker) Ended() <-chan PodEnd { return t.ended }

// StepEnded is closed once the pod's status shows the step container
// terminated (or the pod ended or went away). Kubernetes writes why it
// stopped a container (OOMKilled, Evicted) no later than that status, so a
// Failed that has not come by then is not coming for this container.
func (t *Tracker) StepEnded() <-chan struct{} { return t.stepEnded }

// Unschedulable delivers the scheduler's reason for not placing the pod
// yet, each time it changes (only the latest waits to be read). The
// channel is never closed.
func (t *Tracker) Unschedulable() <-chan string { return t.unsched }

// Stop ends tracking, e.g. before the ATC deletes the pod itself. Values
// already delivered stay readable.
func (t *Tracker) Stop() { t.w.untrack(t) }

func (t *Tracker) observe(pod *corev1.Pod, log *slog.Logger) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f := Classify(pod); f != nil {
		t.fail(f, log)
	}
	if msg, ok := Unschedulable(pod); ok && msg != t.lastUnsched {
		t.lastUnsched = msg
		select { // the latest reason replaces one not read yet
		case <-t.unsched:
		default:
		}
		t.unsched <- msg
	}
	if end, ok := End(pod); ok && !t.sentEnded {
		t.sentEnded = true
		t.ended <- end // buffered, sent once
		log.Debug("step pod ended", "pod", t.pod, "phase", end.Phase, "reason", end.Reason, "exit_code", end.ExitCode)
	}
	if t.sentEnded || terminatedState(pod.Status.ContainerStatuses, podspec.StepContainerName) != nil {
		if t.killed == nil {
			t.killed = SigkilledWithoutReason(pod)
		}
		t.closeStepEnded()
	}
}

// Killed is, once StepEnded is closed, the step container's SIGKILL that
// came without a reason (SigkilledWithoutReason), or nil.
func (t *Tracker) Killed() *Failure {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.killed
}

// closeStepEnded must be called with t.mu held.
func (t *Tracker) closeStepEnded() {
	if !t.sentStepEnded {
		t.sentStepEnded = true
		close(t.stepEnded)
	}
}

func (t *Tracker) observeDeleted(last *corev1.Pod, log *slog.Logger) {
	t.observe(last, log)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sentEnded {
		// Deleting a pod that has ended (GC) is not a failure.
		return
	}
	t.closeStepEnded()
	t.fail(&Failure{
		Kind:   KindDeleted,
		Pod:    last.Namespace + "/" + last.Name,
		Reason: "Deleted",
		Detail: "deleted before the step finished",
	}, log)
}

// fail must be called with t.mu held.
func (t *Tracker) fail(f *Failure, log *slog.Logger) {
	if t.sentFailed {
		return
	}
	t.sentFailed = true
	t.failed <- f // buffered, sent once
	log.Info("step pod cannot succeed", "pod", t.pod, "kind", f.Kind, "reason", f.Reason, "err", f.Error())
}

// dropManagedFields keeps the cache small: the watcher never reads them.
func dropManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.ObjectMetaAccessor); ok {
		m.GetObjectMeta().SetManagedFields(nil)
	}
	return obj, nil
}

// AsFailure returns the *Failure in err's chain, if any.
func AsFailure(err error) (*Failure, bool) {
	var f *Failure
	ok := errors.As(err, &f)
	return f, ok
}
