// Package kuberuntime is the ATC's Kubernetes runtime: the workers steps run
// on (registration, heartbeat, placement, team namespaces), each step's pod
// and Secrets (declared by pkg/podspec, with the step's own blobstore
// credentials), and the supervision of a running step's pod until it ends.
//
// It knows nothing of builds or plans: the ATC's executor places and runs
// pods through it, as Concourse's engine does through its worker runtime.
package kuberuntime

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/porter-ci/porter/pkg/auditseal"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/podwatch"
	"github.com/porter-ci/porter/pkg/stepcreds"
	"github.com/porter-ci/porter/pkg/worker"
)

// DefaultHeartbeat is how often a worker's API server is probed.
const DefaultHeartbeat = 30 * time.Second

// Config is what the runtime runs steps with.
type Config struct {
	// Workers are the workers steps run on (validated by the caller).
	Workers []worker.Config
	// Pod is what every worker's pods share; its Name, Namespace and
	// platform are each worker's.
	Pod podspec.Worker
	// Heartbeat is how often each worker's API server is probed.
	Heartbeat time.Duration
	// Placement chooses each step's worker.
	Placement worker.Placer
	// Insecure: step pods reach the ATC without TLS (tests only).
	Insecure bool
	// Started is when the server started (its workers' start time).
	Started time.Time
	// Shutdown is the context cause of a server that stops: a step being
	// supervised is then left running for the next server.
	Shutdown error
}

// Store is what the runtime records of its workers.
type Store interface {
	Workers(ctx context.Context) ([]db.Worker, error)
	WorkerLoads(ctx context.Context) (map[string]db.WorkerLoad, error)
	HeartbeatWorker(ctx context.Context, w db.Worker) (concourse.WorkerState, error)
	SetWorkerState(ctx context.Context, name string, from, to concourse.WorkerState) (bool, error)
	BuildsOnWorker(ctx context.Context, name string) (int, error)
	DeleteWorker(ctx context.Context, name string) error
}

// Metrics are told each worker's state (nil-safe *metrics.Metrics).
type Metrics interface {
	WorkerState(worker string, state concourse.WorkerState)
}

// Tokens mint a step's token (*steptoken.Keyring).
type Tokens interface {
	Mint(stepID string, ttl time.Duration) (string, error)
}

// AuditStore keeps the audit trail (a blobstore.Store).
type AuditStore interface {
	Put(ctx context.Context, key string, body io.Reader, size int64, opts blobstore.PutOptions) (blobstore.ObjectInfo, error)
}

// AuditSealer seals what a step staged for its audit record into the
// audit trail (auditseal.Sealer).
type AuditSealer interface {
	Seal(ctx context.Context, stepID string) (auditseal.Sealed, error)
}

// Deps are what the runtime is given.
type Deps struct {
	Store   Store
	Metrics Metrics
	Log     *slog.Logger
	// Client is a worker's API client.
	Client func(worker.Config) (kubernetes.Interface, error)
	Tokens Tokens
	// Credentials mint each step's blobstore credentials.
	Credentials stepcreds.Issuer
	// Audit is the audit trail's store (the pod as declared).
	Audit AuditStore
	// Sealer seals a step's staged audit record once the step has ended
	// (nil: nothing is sealed).
	Sealer AuditSealer
	// CA is the ATC's gRPC CA as step pods trust it (nil before the
	// server serves, or without TLS).
	CA func() []byte
}

// Runtime runs steps as pods on its workers.
type Runtime struct {
	cfg     Config
	store   Store
	metrics Metrics
	log     *slog.Logger
	tokens  Tokens
	creds   stepcreds.Issuer
	audit   AuditStore
	sealer  AuditSealer
	ca      func() []byte

	workers []*Worker
	byName  map[string]*Worker
}

// New prepares the runtime's workers; nothing talks to an API server yet.
func New(cfg Config, deps Deps) (*Runtime, error) {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	if deps.CA == nil {
		deps.CA = func() []byte { return nil }
	}
	r := &Runtime{cfg: cfg, store: deps.Store, metrics: deps.Metrics, log: deps.Log, tokens: deps.Tokens,
		creds: deps.Credentials, audit: deps.Audit, sealer: deps.Sealer, ca: deps.CA, byName: map[string]*Worker{}}
	for _, c := range cfg.Workers {
		kube, err := deps.Client(c)
		if err != nil {
			return nil, fmt.Errorf("worker %s: %w", c.Name, err)
		}
		spec := cfg.Pod
		spec.Name, spec.Namespace, spec.Platform = c.Name, c.Namespace, c.Platform
		spec.ImagePullSecrets = c.ImagePullSecrets
		spec.AllowPrivileged = c.AllowsPrivileged()
		for tag, p := range c.TagPlacement {
			if spec.TagPlacement == nil {
				spec.TagPlacement = map[string]podspec.Placement{}
			}
			spec.TagPlacement[tag] = podspec.Placement{NodeSelector: p.NodeSelector, Tolerations: p.Tolerations}
		}
		if err := spec.Validate(); err != nil {
			return nil, err
		}
		w := &Worker{cfg: c, kube: kube, spec: spec,
			pods: podwatch.New(kube, c.Namespace, c.Name, deps.Log.With("component", "podwatch", "worker", c.Name))}
		r.workers = append(r.workers, w)
		r.byName[c.Name] = w
	}
	return r, nil
}

// Worker is one worker the runtime runs steps on: its API client, the
// watch over its step pods and what its pods are declared with.
type Worker struct {
	cfg  worker.Config
	kube kubernetes.Interface
	pods *podwatch.Watcher
	spec podspec.Worker

	mu sync.Mutex
	// registered: the access check passed and the pod watch runs.
	registered bool
	// retired: the worker left after `fly retire-worker`; it takes no
	// steps until the server restarts.
	retired bool
	// lastErr is why the worker is not registered, or stalled.
	lastErr string
}

// Name is the worker's name.
func (w *Worker) Name() string { return w.cfg.Name }

// Namespace is where the worker's step pods run.
func (w *Worker) Namespace() string { return w.cfg.Namespace }

// Config is the worker's configuration.
func (w *Worker) Config() worker.Config { return w.cfg }

// BaseResourceType is the worker's own image of a base resource type.
func (w *Worker) BaseResourceType(name string) (string, bool) {
	image, ok := w.cfg.BaseResourceTypes[name]
	return image, ok
}

// Kube is the worker's API client.
func (w *Worker) Kube() kubernetes.Interface { return w.kube }

// Pods are the worker's step pods as its watch last saw them, false until
// the watch has synced. Read only.
func (w *Worker) Pods() ([]*corev1.Pod, bool) { return w.pods.Pods() }

// Pod is the step's pod as the worker's watch last saw it.
func (w *Worker) Pod(stepID string) (*corev1.Pod, bool) { return w.pods.Pod(stepID) }

// Usable reports whether the worker is registered and not retired.
func (w *Worker) Usable() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.registered && !w.retired
}

// Workers are the runtime's workers, in configuration order.
func (r *Runtime) Workers() []*Worker { return r.workers }

// Lookup returns the worker of that name.
func (r *Runtime) Lookup(name string) (*Worker, bool) {
	w, ok := r.byName[name]
	return w, ok
}

// Worker returns a worker by name; "" is the first (records from before
// there were several).
func (r *Runtime) Worker(name string) (*Worker, error) {
	if name == "" {
		return r.workers[0], nil
	}
	w, ok := r.byName[name]
	if !ok {
		return nil, fmt.Errorf("worker %q is not one of this server's workers", name)
	}
	return w, nil
}

// interrupted is the error of a context that ended, by its cause.
func interrupted(ctx context.Context) error {
	if cause := context.Cause(ctx); cause != nil {
		return cause
	}
	return ctx.Err()
}
