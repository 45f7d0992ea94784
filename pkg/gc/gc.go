// Package gc is Porter's garbage collector: one pass removes the pods of
// finished steps, orphan step pods, staging leftovers and unreferenced
// artifacts; Run repeats it on an interval while holding the GC lock, so
// among servers sharing a database only one collects at a time.
package gc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/podspec"
)

// Store is the database as the collector needs it (*db.DB).
type Store interface {
	TryLock(ctx context.Context, id db.LockID) (release func(), ok bool, err error)
	Containers(ctx context.Context, f db.ContainerFilter) ([]db.Container, error)
	FinishedContainers(ctx context.Context, worker string) ([]db.FinishedContainer, error)
	SetKeptReason(ctx context.Context, handle, reason string) error
	DeleteContainer(ctx context.Context, handle string) error
	MoveContainerState(ctx context.Context, handle string, from, to concourse.ContainerState) (bool, error)
	DeleteExpiredResourceCaches(ctx context.Context, cutoff time.Time) (int64, error)
	ExpiredArtifacts(ctx context.Context, cutoff time.Time) ([]db.Artifact, error)
	DeleteExpiredArtifact(ctx context.Context, id int64, cutoff time.Time) (deleted, keyReferenced bool, err error)
	ArtifactKeyReferenced(ctx context.Context, key string, cutoff time.Time) (bool, error)
	ReferencedArtifactKeys(ctx context.Context, cutoff time.Time) (map[string]bool, error)
	UnreferencedEventObjects(ctx context.Context, limit int) ([]string, error)
	ForgetEventObject(ctx context.Context, key string) error
	LogStore
}

// Blobs lists, reads and deletes blobstore objects (a blobstore.Store is
// one).
type Blobs interface {
	List(ctx context.Context, prefix string) ([]blobstore.ObjectInfo, error)
	Get(ctx context.Context, key string) (io.ReadCloser, blobstore.ObjectInfo, error)
	Delete(ctx context.Context, key string) error
}

// Worker is one worker's namespace and the client that reaches it.
type Worker struct {
	Name      string
	Namespace string
	Kube      kubernetes.Interface
	// Pods returns the worker's step pods from a watch's cache, false
	// while it has not synced; nil lists them from the API instead. A pass
	// nudged by every finished build (checks end several times a second)
	// then costs the API server nothing. The pods are the cache's: read
	// only.
	Pods func() ([]*corev1.Pod, bool)
}

// pods lists the worker's step pods, from its cache if it has one.
func (w Worker) pods(ctx context.Context) ([]*corev1.Pod, error) {
	if w.Pods != nil {
		if pods, ok := w.Pods(); ok {
			return pods, nil
		}
	}
	list, err := w.Kube.CoreV1().Pods(w.Namespace).List(ctx, metav1.ListOptions{LabelSelector: podspec.WorkerSelector(w.Name)})
	if err != nil {
		return nil, fmt.Errorf("worker %s: list step pods in %s: %w", w.Name, w.Namespace, err)
	}
	pods := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	return pods, nil
}

// Config holds the collector's thresholds; zero values take the defaults.
type Config struct {
	// Retention says which finished steps' pods stay (zero fields: none
	// but the latest check of each resource and the latest failed build
	// of each job, without a cap).
	Retention Retention
	// OrphanGrace is the age an orphan pod must reach: a pod whose
	// container record is being written is never taken.
	OrphanGrace time.Duration
	// StagingAge is the age of a staging/ object left by an interrupted upload.
	StagingAge time.Duration
	// ArtifactRetention is how long an artifact stays after its build
	// finished (or, for an upload, after it was made) and after nothing
	// references it any more.
	ArtifactRetention time.Duration
	// LogRetention is how many builds' logs each job keeps (default: all).
	LogRetention LogRetentionLimits
}

// Defaults.
const (
	DefaultOrphanGrace       = time.Minute
	DefaultStagingAge        = time.Hour
	DefaultArtifactRetention = 24 * time.Hour
)

// Result counts what one pass reclaimed (for logs and metrics).
type Result struct {
	Pods              int            // pods of finished steps
	Evicted           int            // of those, pods that went only because of the per-worker cap
	Resized           int            // kept pods shrunk to the sidecar's requests
	Kept              map[string]int // kept pods by reason (Kept*), over every worker
	KeptByWorker      map[string]int
	OrphanPods        int
	Containers        int // container records removed
	StagingObjects    int
	StagingBytes      int64
	ResourceCaches    int // resource cache records removed (unused for the retention, not pinned)
	ArtifactRecords   int // artifact records (`fly volumes`) removed
	ArtifactBlobs     int
	ArtifactBytes     int64
	ArtifactManifests int // manifests whose blob was collected
	BuildLogObjects   int // build log chunks and segments no build names any more
	ReapedBuildLogs   int // builds whose logs went by their job's build log retention
	Duration          time.Duration
	SkippedNotLeader  bool // another server holds the GC lock
}

func (r Result) logAttrs() []any {
	return []any{"pods", r.Pods, "evicted", r.Evicted, "resized", r.Resized, "kept", r.Kept, "orphan_pods", r.OrphanPods, "containers", r.Containers, "resource_caches", r.ResourceCaches,
		"staging_objects", r.StagingObjects, "staging_bytes", r.StagingBytes,
		"artifact_records", r.ArtifactRecords, "artifact_blobs", r.ArtifactBlobs, "artifact_bytes", r.ArtifactBytes, "artifact_manifests", r.ArtifactManifests,
		"build_log_objects", r.BuildLogObjects, "reaped_build_logs", r.ReapedBuildLogs,
		"duration", r.Duration}
}

// Collector runs garbage-collection passes.
type Collector struct {
	cfg     Config
	db      Store
	blobs   Blobs
	workers func() []Worker
	log     *slog.Logger
	// Now is the clock (tests move it forward instead of waiting an hour).
	Now func() time.Time
	// OnPass, when set, sees every pass's result (metrics).
	OnPass func(Result, error)
	// wake asks Run for a pass over the pods now (Nudge).
	wake chan struct{}
	// resizeWarned: the workers whose kept pods could not be shrunk,
	// already logged (passes run one at a time).
	resizeWarned map[string]bool
	// Switch, when set, can pause Run's passes (`fly pause-component
	// collector`) and hears of each one.
	Switch Switch
}

// Component is the collector's name among the servers' periodic loops.
const Component = "collector"

// Switch pauses and records the servers' periodic loops (a *db.DB is one).
type Switch interface {
	ComponentPaused(ctx context.Context, name string) (bool, error)
	ComponentRan(ctx context.Context, name string, interval time.Duration, at time.Time) error
}

// New returns a collector of the pods of the workers that workers returns
// at each pass (those registered then; nil: none) and the blobstore's
// objects.
func New(cfg Config, store Store, blobs Blobs, workers func() []Worker, log *slog.Logger) *Collector {
	if workers == nil {
		workers = func() []Worker { return nil }
	}
	if cfg.OrphanGrace <= 0 {
		cfg.OrphanGrace = DefaultOrphanGrace
	}
	if cfg.StagingAge <= 0 {
		cfg.StagingAge = DefaultStagingAge
	}
	if cfg.ArtifactRetention <= 0 {
		cfg.ArtifactRetention = DefaultArtifactRetention
	}
	if log == nil {
		log = slog.Default()
	}
	return &Collector{cfg: cfg, db: store, blobs: blobs, workers: workers, log: log, Now: time.Now, wake: make(chan struct{}, 1), resizeWarned: map[string]bool{}}
}

// Nudge asks Run for a pass over the workers' pods soon, e.g. because a
// build finished: kept pods stay within the rules and the cap between full
// passes. Nudges coalesce.
func (c *Collector) Nudge() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// nudgeSpacing bounds the passes nudges cause to one a second.
const nudgeSpacing = time.Second

// Run collects every interval until ctx ends, each pass only while this
// server holds the GC lock (another server holding it means skip). The
// workers' pods have a loop (and lock) of their own, so that a slow pass
// over the blobstore never holds up the retention; a Nudge runs a pass over
// the pods at once.
func (c *Collector) Run(ctx context.Context, interval time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.runPods(ctx, interval)
	}()
	defer func() { <-done }()
	c.loop(ctx, interval, nil, func(ctx context.Context) (Result, error) {
		return c.locked(ctx, db.LockGC, c.collectStore)
	})
}

func (c *Collector) runPods(ctx context.Context, interval time.Duration) {
	c.loop(ctx, interval, c.wake, func(ctx context.Context) (Result, error) {
		return c.locked(ctx, db.LockGCPods, c.CollectPods)
	})
}

// loop runs pass every interval and, when wake is not nil, on each wake
// (at most one a nudgeSpacing).
func (c *Collector) loop(ctx context.Context, interval time.Duration, wake <-chan struct{}, pass func(context.Context) (Result, error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	nudged := false
	for {
		if c.paused(ctx) {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				continue
			}
		}
		res, err := pass(ctx)
		if ctx.Err() != nil {
			return
		}
		if c.Switch != nil && !res.SkippedNotLeader {
			if err := c.Switch.ComponentRan(ctx, Component, interval, time.Now()); err != nil {
				c.log.Warn("recording a gc pass", "err", err)
			}
		}
		if c.OnPass != nil {
			c.OnPass(res, err)
		}
		switch {
		case err != nil:
			c.log.Warn("gc pass", append(res.logAttrs(), "err", err)...)
		case res.SkippedNotLeader:
			c.log.Debug("gc pass skipped: another server holds the lock")
		case nudged && res.Pods == 0 && res.Resized == 0:
			// Nudged passes that found nothing to do stay out of the log.
		default:
			c.log.Info("gc pass", res.logAttrs()...)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			nudged = false
		case <-wake:
			nudged = true
			select {
			case <-ctx.Done():
				return
			case <-time.After(nudgeSpacing):
			}
		}
	}
}

// paused says whether the collector is paused; a failure to tell is
// logged and taken as not paused.
func (c *Collector) paused(ctx context.Context) bool {
	if c.Switch == nil {
		return false
	}
	p, err := c.Switch.ComponentPaused(ctx, Component)
	if err != nil {
		c.log.Warn("is the collector paused", "err", err)
		return false
	}
	return p
}

// CollectLocked runs one whole pass if the GC locks are free.
func (c *Collector) CollectLocked(ctx context.Context) (Result, error) {
	pods, err := c.locked(ctx, db.LockGCPods, c.CollectPods)
	if err != nil || pods.SkippedNotLeader {
		return pods, err
	}
	res, err := c.locked(ctx, db.LockGC, func(ctx context.Context) (Result, error) {
		res := pods
		err := c.storePass(ctx, &res)
		return res, err
	})
	return res, err
}

// locked runs pass if lock is free.
func (c *Collector) locked(ctx context.Context, lock db.LockID, pass func(context.Context) (Result, error)) (Result, error) {
	release, ok, err := c.db.TryLock(ctx, lock)
	if err != nil {
		return Result{}, fmt.Errorf("take the gc lock: %w", err)
	}
	if !ok {
		return Result{SkippedNotLeader: true}, nil
	}
	defer release()
	return pass(ctx)
}

// Collect runs one whole pass, without the locks. The failure of one item
// does not stop the pass: the errors are joined.
func (c *Collector) Collect(ctx context.Context) (Result, error) {
	start := time.Now()
	res, err := c.CollectPods(ctx)
	err = errors.Join(err, c.storePass(ctx, &res))
	res.Duration = time.Since(start)
	return res, err
}

// collectStore runs the part of a pass that looks after the blobstore.
func (c *Collector) collectStore(ctx context.Context) (Result, error) {
	start := time.Now()
	var res Result
	err := c.storePass(ctx, &res)
	res.Duration = time.Since(start)
	return res, err
}

func (c *Collector) storePass(ctx context.Context, res *Result) error {
	// Logs are reaped before the objects no log names are collected: a
	// reaped log's objects go in the same pass.
	return errors.Join(c.staging(ctx, res), c.artifacts(ctx, res), c.reapBuildLogs(ctx, res), c.buildLogs(ctx, res))
}

// CollectPods runs the part of a pass that looks after the workers' pods.
func (c *Collector) CollectPods(ctx context.Context) (Result, error) {
	start := time.Now()
	res := Result{Kept: map[string]int{}, KeptByWorker: map[string]int{}}
	for _, r := range KeptReasons {
		res.Kept[r] = 0
	}
	var errs []error
	for _, w := range c.workers() {
		errs = append(errs, c.workerPods(ctx, w, &res))
	}
	res.Duration = time.Since(start)
	return res, errors.Join(errs...)
}

// workerPods applies the retention to one worker's pods and removes its
// orphans, from one listing of its step pods.
func (c *Collector) workerPods(ctx context.Context, w Worker, res *Result) error {
	list, err := w.pods(ctx)
	if err != nil {
		return err
	}
	// The list was taken before this pass deleted anything: a pod that
	// finishedPods deletes (and whose record it drops) is still in it,
	// looking like an orphan, so orphanPods is told which ones went.
	gone := map[string]bool{}
	return errors.Join(c.finishedPods(ctx, w, byName(list), gone, res), c.orphanPods(ctx, w, list, gone, res))
}

// byName indexes pods by name.
func byName(pods []*corev1.Pod) map[string]*corev1.Pod {
	m := make(map[string]*corev1.Pod, len(pods))
	for _, p := range pods {
		m[p.Name] = p
	}
	return m
}

// podName is the name of a container record's pod ("" for none).
func podName(ct db.Container) string {
	if ct.PodName == "" && ct.StepID != "" {
		return podspec.Name(ct.StepID)
	}
	return ct.PodName
}

// finishedPods applies the retention (Retention) to the worker's pods of
// finished steps: a pod no rule keeps, or beyond the cap, goes, and then
// its container record (so a failed delete is retried next pass); a kept
// pod still running (its keep-alive) shrinks to the sidecar's requests.
// podEnded: the pod and all its containers have ended.
func podEnded(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

func (c *Collector) finishedPods(ctx context.Context, w Worker, pods map[string]*corev1.Pod, gone map[string]bool, res *Result) error {
	finished, err := c.db.FinishedContainers(ctx, w.Name)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range c.cfg.Retention.decide(finished, c.Now()) {
		ct := d.c
		if ct.Namespace != "" && ct.Namespace != w.Namespace {
			continue // recorded in a namespace this worker no longer has
		}
		name := podName(ct.Container)
		// A pod whose containers have all ended has nothing left to
		// intercept (its keep-alive is over, or it was aborted): keeping it
		// would only keep an API object.
		if pod := pods[name]; d.reason != "" && pod != nil && podEnded(pod) {
			d.reason, d.why = "", "ended: nothing left to intercept"
		}
		if onCheckPod(ct) {
			// A check's record on a check pod: the pod is not its to delete.
			if err := c.checkOnCheckPod(ctx, ct, d.reason); err != nil {
				errs = append(errs, err)
			} else if d.reason == "" {
				res.Containers++
			}
			continue
		}
		if d.reason != "" {
			res.Kept[d.reason]++
			res.KeptByWorker[w.Name]++
			if ct.KeptReason != d.reason {
				if err := c.db.SetKeptReason(ctx, ct.Handle, d.reason); err != nil {
					errs = append(errs, err)
				}
			}
			// A check pod is at work, not kept idle: it keeps its requests.
			if pod := pods[name]; pod != nil && ct.PlanID != podspec.CheckPodPlanID {
				resized, err := shrink(ctx, w, pod)
				if err != nil {
					// Not fatal: the pod keeps its requests until its keep-alive
					// ends. Said once per worker (a missing right would repeat).
					if !c.resizeWarned[w.Name] {
						c.resizeWarned[w.Name] = true
						c.log.Warn("cannot shrink kept pods (kept pods keep their requests; see deploy/atc/rbac.yaml)", "worker", w.Name, "pod", name, "err", err)
					}
				} else if resized {
					res.Resized++
				}
			}
			continue
		}
		if name != "" {
			deleted, err := deletePod(ctx, w, name, pods[name])
			if err != nil {
				errs = append(errs, fmt.Errorf("worker %s: container %s: %w", w.Name, ct.Handle, err))
				continue
			}
			gone[name] = true
			if deleted {
				res.Pods++
				if d.why == evictedOverCap {
					res.Evicted++
				}
				c.log.Debug("deleted a finished step's pod", "worker", w.Name, "pod", name, "build", ct.BuildID, "why", d.why)
			}
		}
		if err := c.db.DeleteContainer(ctx, ct.Handle); err != nil && !errors.Is(err, db.ErrNotFound) {
			errs = append(errs, err)
			continue
		}
		res.Containers++
	}
	return errors.Join(errs...)
}

// checkOnCheckPod applies reason to the record of a check run in a check
// pod: it stays (keeping no pod of its own, it is no kept pod), or goes
// alone.
func (c *Collector) checkOnCheckPod(ctx context.Context, ct db.FinishedContainer, reason string) error {
	if reason != "" {
		return nil
	}
	if err := c.db.DeleteContainer(ctx, ct.Handle); err != nil && !errors.Is(err, db.ErrNotFound) {
		return err
	}
	return nil
}

// orphanPods removes the pods with Porter's labels for this worker that no
// container record knows, once older than the grace period. Pods are
// listed by Porter's labels: a pod without them is never looked at. The
// pods are listed before the records, and a step's record is written
// before its pod, so a pod in the list has its record in the later read.
func (c *Collector) orphanPods(ctx context.Context, w Worker, pods []*corev1.Pod, gone map[string]bool, res *Result) error {
	containers, err := c.db.Containers(ctx, db.ContainerFilter{})
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, ct := range containers {
		if ct.WorkerName == w.Name {
			known[ct.PodName] = true
			if ct.StepID != "" {
				known[podspec.Name(ct.StepID)] = true
			}
		}
	}
	var errs []error
	now := c.Now()
	for _, pod := range pods {
		// A terminating pod is already going, as is one finishedPods just
		// deleted (the list does not show that yet).
		if known[pod.Name] || gone[pod.Name] || !porterPod(pod, w.Name) || pod.DeletionTimestamp != nil ||
			now.Sub(pod.CreationTimestamp.Time) < c.cfg.OrphanGrace {
			continue
		}
		deleted, err := deletePod(ctx, w, pod.Name, pod)
		if err != nil {
			errs = append(errs, fmt.Errorf("worker %s: orphan pod: %w", w.Name, err))
			continue
		}
		if deleted {
			c.log.Info("deleted an orphan step pod", "worker", w.Name, "namespace", w.Namespace, "pod", pod.Name)
			res.OrphanPods++
		}
	}
	return errors.Join(errs...)
}

// porterPod checks the labels again, whatever the API server's selector did.
func porterPod(pod *corev1.Pod, worker string) bool {
	return pod.Labels[podspec.LabelManagedBy] == podspec.ManagedByPorter && pod.Labels[podspec.LabelWorker] == podspec.LabelValue(worker)
}

// deletePod deletes a step pod and its Secrets (owned by the pod, but
// removed here too so nothing waits on the cluster's own collector). When
// the pod is known (listed), its registry login Secret is deleted only if
// it has one: a request fewer for most pods, checks' included.
func deletePod(ctx context.Context, w Worker, name string, known *corev1.Pod) (bool, error) {
	grace := int64(0)
	err := w.Kube.CoreV1().Pods(w.Namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	deleted := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("delete pod %s/%s: %w", w.Namespace, name, err)
	}
	secrets := []string{name, name + "-pull"}
	if known != nil && !slices.ContainsFunc(known.Spec.ImagePullSecrets, func(r corev1.LocalObjectReference) bool { return r.Name == name+"-pull" }) {
		secrets = secrets[:1]
	}
	var errs []error
	for _, secret := range secrets {
		if err := w.Kube.CoreV1().Secrets(w.Namespace).Delete(ctx, secret, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete secret %s/%s: %w", w.Namespace, secret, err))
		}
	}
	return deleted, errors.Join(errs...)
}

// staging removes staging/ objects older than StagingAge: an upload
// promotes and deletes its staging object within minutes.
func (c *Collector) staging(ctx context.Context, res *Result) error {
	objs, err := c.blobs.List(ctx, stagingPrefix)
	if err != nil {
		return fmt.Errorf("list staging objects: %w", err)
	}
	cutoff := c.Now().Add(-c.cfg.StagingAge)
	var errs []error
	for _, o := range objs {
		if !o.LastModified.Before(cutoff) {
			continue
		}
		if err := c.blobs.Delete(ctx, o.Key); err != nil {
			errs = append(errs, fmt.Errorf("delete staging object %s: %w", o.Key, err))
			continue
		}
		res.StagingObjects++
		res.StagingBytes += o.Size
	}
	return errors.Join(errs...)
}

// buildLogObjectsPerPass bounds one pass's deletes; the rest wait for
// the next pass.
const buildLogObjectsPerPass = 1000

// buildLogs deletes the build log objects that no index row names any
// more, e.g. those of a destroyed pipeline's builds. A segment shared with
// a build that still exists stays until that build goes too.
func (c *Collector) buildLogs(ctx context.Context, res *Result) error {
	keys, err := c.db.UnreferencedEventObjects(ctx, buildLogObjectsPerPass)
	if err != nil {
		return err
	}
	var errs []error
	for _, key := range keys {
		if err := c.blobs.Delete(ctx, key); err != nil {
			errs = append(errs, fmt.Errorf("delete build log object %s: %w", key, err))
			continue
		}
		if err := c.db.ForgetEventObject(ctx, key); err != nil {
			errs = append(errs, err)
			continue
		}
		res.BuildLogObjects++
	}
	return errors.Join(errs...)
}

// artifacts removes the resource caches unused for the retention (a
// pinned version's stays) and the expired artifact records, then the
// artifacts/ blobs nothing references, older than the retention. A blob is
// checked again just before it goes; the window left is a byte-identical
// output being recorded in the milliseconds between that check and the
// delete, for a blob unreferenced for the whole retention.
func (c *Collector) artifacts(ctx context.Context, res *Result) error {
	cutoff := c.Now().Add(-c.cfg.ArtifactRetention)
	var errs []error
	// Caches first, so that their blobs go in this same pass.
	if n, err := c.db.DeleteExpiredResourceCaches(ctx, cutoff); err != nil {
		errs = append(errs, err)
	} else {
		res.ResourceCaches = int(n)
	}
	expired, err := c.db.ExpiredArtifacts(ctx, cutoff)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, a := range expired {
		deleted, _, err := c.db.DeleteExpiredArtifact(ctx, a.ID, cutoff)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if deleted {
			res.ArtifactRecords++
		}
	}
	// The blobs: one sweep covers the records just removed and the step
	// outputs that never had a record (aborted, or deduplicated away).
	var objs []blobstore.ObjectInfo
	for _, prefix := range []string{blobPrefix, artifactPrefix} {
		o, err := c.blobs.List(ctx, prefix)
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("list %s: %w", prefix, err))...)
		}
		objs = append(objs, o...)
	}
	refs, err := c.db.ReferencedArtifactKeys(ctx, cutoff)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	live := map[string]bool{}
	var manifests []blobstore.ObjectInfo
	for _, o := range objs {
		if blobstore.IsManifestKey(o.Key) {
			manifests = append(manifests, o)
			continue
		}
		if refs[o.Key] || !o.LastModified.Before(cutoff) {
			live[o.Key] = true
			continue
		}
		if used, err := c.db.ArtifactKeyReferenced(ctx, o.Key, cutoff); err != nil || used {
			errs = append(errs, err)
			live[o.Key] = true
			continue
		}
		if err := c.blobs.Delete(ctx, o.Key); err != nil {
			errs = append(errs, fmt.Errorf("delete artifact %s: %w", o.Key, err))
			live[o.Key] = true
			continue
		}
		res.ArtifactBlobs++
		res.ArtifactBytes += o.Size
	}
	// A manifest goes with its blob. It is written just after its blob,
	// so only one as old as the retention can name a collected blob.
	for _, o := range manifests {
		if !o.LastModified.Before(cutoff) {
			continue
		}
		m, err := blobstore.ReadManifest(ctx, c.blobs, o.Key)
		if err == nil && live[m.Key] {
			continue
		}
		if err != nil && errors.Is(err, blobstore.ErrNotFound) {
			continue
		}
		// Unreadable or dangling: either way it must not be followed.
		if err := c.blobs.Delete(ctx, o.Key); err != nil {
			errs = append(errs, fmt.Errorf("delete artifact manifest %s: %w", o.Key, err))
			continue
		}
		res.ArtifactManifests++
	}
	return errors.Join(errs...)
}

// The prefixes of pkg/blobstore's layout that GC sweeps.
const (
	blobPrefix     = "blobs/"
	artifactPrefix = "artifacts/" // manifests, and blobs of older versions
	stagingPrefix  = "staging/"   // left by older versions' uploads
)
