package atc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/porter-ci/porter/pkg/atc/buildlog"
	"github.com/porter-ci/porter/pkg/atc/exec"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/atc/kuberuntime"
	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/creds"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/gc"
	"github.com/porter-ci/porter/pkg/metrics"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/resource"
	"github.com/porter-ci/porter/pkg/scheduler"
	"github.com/porter-ci/porter/pkg/stepcreds"
	"github.com/porter-ci/porter/pkg/stepserver"
	"github.com/porter-ci/porter/pkg/steptoken"
	"github.com/porter-ci/porter/pkg/worker"
)

// Config is the server's configuration (see the serve flags).
type Config struct {
	// OIDC is the single sign-on connector (nil: none); its ExternalURL
	// defaults to the server's. The API's, which the composition root
	// (cmd/atc-porter-runtime) builds.
	OIDC *auth.OIDCConfig
	// Namespace is the server's own (its signing key Secret); with no
	// Workers it is also the one worker's, named Worker and tagged
	// WorkerTags.
	Namespace  string
	Worker     string
	WorkerTags []string
	// Workers are the workers the server runs steps on (nil: the one of
	// Namespace, Worker and WorkerTags).
	Workers []worker.Config
	// Kubeconfig is the server's own kubeconfig ("": in-cluster), the
	// workers' unless they name theirs.
	Kubeconfig string
	// WorkerHeartbeat is how often each worker's API server is probed.
	WorkerHeartbeat time.Duration
	// Placement chooses each step's worker.
	Placement worker.Placer
	// GRPCListen is where sidecars connect; GRPCAdvertise is the address
	// written into step pods (defaults to GRPCListen).
	GRPCListen    string
	GRPCAdvertise string
	HTTPListen    string
	// ExternalURL is how people reach the HTTP API (tokens' issuer, CSRF
	// origin); default http://<HTTPListen>.
	ExternalURL string
	ClusterName string
	// StateDir keeps the step token key, the gRPC CA and the token signing
	// key across restarts.
	StateDir string
	// Insecure serves gRPC without TLS (tests only).
	Insecure    bool
	PorterImage string
	// WindowsPorterImage holds porter.exe for windows workers.
	WindowsPorterImage string
	NativeSidecars     bool
	StepBounds         podspec.Bounds // step pods' resource bounds (serve's --step-* flags)
	DNSPolicy          corev1.DNSPolicy
	ImagePullPolicy    corev1.PullPolicy
	// KeepAlive is how long a finished step stays interceptible.
	KeepAlive time.Duration
	// PodRetention is how long a finished step's pod is kept (for kubectl
	// logs and post-mortems) before it is deleted.
	PodRetention time.Duration
	// CheckPodLifetime is how long a check pod lives, running the checks
	// of its team, worker and resource type image as sessions; 0 gives
	// each check a pod of its own.
	CheckPodLifetime time.Duration
	// CheckPodMaxChecks bounds the checks one check pod runs at once.
	CheckPodMaxChecks int
	// Lookahead is how many tasks and puts of a serial sequence have their pods
	// declared ahead of their turn (0: none).
	Lookahead int
	// VarSourceAllowedNetworks may be reached by pipelines' var_sources
	// although their kind of address is refused (netguard).
	VarSourceAllowedNetworks []netip.Prefix
	GC                       GCConfig // the garbage collector (gc.go)
	// Blobstore is the ATC's own access; PodBlobstoreEndpoint, when set, is
	// the endpoint step pods use instead (a different network view).
	Blobstore            blobstore.Config
	PodBlobstoreEndpoint string
	// StepCredentials says how step pods get their blobstore credentials.
	StepCredentials StepCredentialsConfig
	// AuditBucket holds the audit trail under Object Lock (empty: the
	// blobstore's bucket, as in tests without Deps.Audit); AuditRetention is
	// its default retention.
	AuditBucket    string
	AuditRetention time.Duration
	// MaxBuildLogBytes caps the output a build's log keeps (0: no cap).
	MaxBuildLogBytes int64
	// TokenTTL is how long a login lasts.
	TokenTTL time.Duration
	// ServerID names this server in the builds it runs, so that with
	// several servers each resumes only its own builds.
	ServerID string
	// BaseResourceTypes are the images of the base resource types by name
	// (nil: DefaultBaseResourceTypes).
	BaseResourceTypes map[string]string
	// BaseResourceTypeDefaults are source defaults by base type name,
	// merged under the source of every resource and image_resource of the
	// type (serve --base-resource-type-defaults).
	BaseResourceTypeDefaults map[string]map[string]any
	// CredentialNamespacePrefix names the namespace of a team's
	// credentials: prefix + team (empty: creds.DefaultNamespacePrefix).
	CredentialNamespacePrefix string
	// Vault, when set, is the credential manager instead of Kubernetes
	// Secrets (one at a time, as in Concourse).
	Vault *creds.VaultConfig
	// InClusterConfig: keys in Secrets, leader election (incluster.go).
	InClusterConfig
	// OpsListen serves /metrics, /livez and /readyz ("": not served).
	OpsListen string
	// PodOTLPEndpoint is where step pods export their spans ("": none).
	PodOTLPEndpoint string
	// Limits bound request bodies, slow HTTP clients and sidecar streams.
	Limits LimitsConfig
}

// Deps are what the server is given rather than opening itself (the
// composition root, cmd/atc-porter-runtime, opens them).
type Deps struct {
	Kube  kubernetes.Interface
	DB    *db.DB
	Store blobstore.Store
	Log   *slog.Logger
	// Vault is the credential manager, given when Config.Vault is set
	// (nil: Kubernetes Secrets).
	Vault *creds.Vault
	// WorkerKube is the API client of a worker (nil: from its kubeconfig,
	// or Kube for a worker that names none).
	WorkerKube func(worker.Config) (kubernetes.Interface, error)
	// Planner plans job builds and checks (nil: pkg/pipeline's).
	Planner scheduler.Planner
	// Metrics and Tracing are the server's (nil: none).
	Metrics *metrics.Metrics
	Tracing trace.TracerProvider
	// StepCredentials mints each step's blobstore credentials
	// (Config.StepCredentials.Issuer).
	StepCredentials stepcreds.Issuer
	// Audit is the audit bucket (nil: Store).
	Audit blobstore.Store
}

// Server is a running ATC runtime.
type Server struct {
	cfg   Config
	log   *slog.Logger
	db    *db.DB
	store blobstore.Store
	// audit is the audit bucket (nil: store).
	audit blobstore.Store
	// kube is the server's own API client (credentials, its Secrets).
	kube kubernetes.Interface
	// vault is the credential manager when --vault-url is set.
	vault   *creds.Vault
	streams *stepserver.Server
	keys    *steptoken.Keyring
	// podWorker is what every worker's pods share (its Name and
	// Namespace are each worker's).
	podWorker podspec.Worker
	// runtime runs steps as pods on the workers; steps reach it through
	// pods.
	runtime *kuberuntime.Runtime
	pods    stepRuntime
	// grpcTLS serves the sidecars (nil: Config.Insecure); caPEM is its CA,
	// which step pods trust.
	grpcTLS *tls.Config
	caPEM   []byte
	sch     *scheduling
	// logs are the builds' logs; events follows them for the API.
	logs   *buildlog.Logs
	events *buildlog.Follower
	// exec runs the builds' plans.
	exec *exec.Runner
	obs  observability
	// collector is the garbage collector (nil: GC off), nudged when a
	// build finishes (gc.go).
	collector *gc.Collector

	started time.Time

	// base ends when Run does (stopBase): builds stop, to be resumed, with
	// it.
	base     context.Context
	stopBase context.CancelCauseFunc

	// listenerDied receives the error of each listener that stops serving
	// (Run's; buffered for all of them).
	listenerDied chan error

	mu     sync.Mutex
	builds map[int64]*buildstate.Build // builds this server is running
	// buildStarted is closed, and replaced, whenever a build joins builds:
	// followers waiting for a build to start here look again at once.
	buildStarted chan struct{}
	steps        map[string]*exec.StepState // by step ID (the pod's)
	// queued is when each step of steps was registered, about to have its
	// pod declared (the start of its timeline).
	queued map[string]time.Time
	runs   sync.WaitGroup
}

// WithDefaults is the configuration with what is unset defaulted, as New
// uses it (the composition root builds the API from the same).
func (cfg Config) WithDefaults() Config {
	if cfg.GRPCAdvertise == "" {
		cfg.GRPCAdvertise = cfg.GRPCListen
	}
	if cfg.ExternalURL == "" {
		cfg.ExternalURL = "http://" + cfg.HTTPListen
	}
	cfg.ExternalURL = strings.TrimRight(cfg.ExternalURL, "/")
	if cfg.TokenTTL <= 0 {
		cfg.TokenTTL = 24 * time.Hour
	}
	if cfg.ServerID == "" {
		cfg.ServerID = cfg.Worker
	}
	if cfg.WorkerHeartbeat <= 0 {
		cfg.WorkerHeartbeat = DefaultWorkerHeartbeat
	}
	cfg.Limits = cfg.Limits.withDefaults()
	if len(cfg.Workers) == 0 {
		cfg.Workers = []worker.Config{{Name: cfg.Worker, Namespace: cfg.Namespace, Tags: cfg.WorkerTags}}
	}
	return cfg
}

// New builds the engine complete from its configuration and the
// subsystems it is given: the runtime, the executor, the scheduler, the
// stream server and the gRPC TLS are its own, as they call back into it.
// Nothing talks to a worker until Run.
func New(ctx context.Context, cfg Config, deps Deps) (*Server, error) {
	log := deps.Log
	if log == nil {
		log = slog.Default()
	}
	if deps.StepCredentials == nil {
		return nil, errors.New("no step credentials issuer (Config.StepCredentials.Issuer makes one)")
	}
	if cfg.Vault != nil && deps.Vault == nil {
		return nil, errors.New("Vault is configured (--vault-url) but no Vault client was given")
	}
	cfg = cfg.WithDefaults()
	if err := worker.ValidateAll(cfg.Workers); err != nil {
		return nil, err
	}
	key, err := stepTokenKey(ctx, cfg, deps.Kube)
	if err != nil {
		return nil, err
	}
	keys, err := steptoken.NewKeyring(key)
	if err != nil {
		return nil, err
	}
	logs, err := buildlog.New(buildlog.Config{Store: deps.Store, Index: deps.DB, Log: log, MaxBytes: cfg.MaxBuildLogBytes})
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: log, db: deps.DB, store: deps.Store, kube: deps.Kube, keys: keys, logs: logs, vault: deps.Vault,
		builds: map[int64]*buildstate.Build{}, buildStarted: make(chan struct{}), steps: map[string]*exec.StepState{}, queued: map[string]time.Time{}, started: time.Now(),
		audit: deps.Audit, listenerDied: make(chan error, 3)} // gRPC, API, ops
	// Not ctx's end: builds stop when Run ends, whatever built the server.
	s.base, s.stopBase = context.WithCancelCause(context.WithoutCancel(ctx))
	s.events = buildlog.NewFollower(logs, followedBuilds{s})
	if !cfg.Insecure {
		host, _, err := net.SplitHostPort(cfg.GRPCAdvertise)
		if err != nil {
			return nil, fmt.Errorf("grpc advertise address %q: %w", cfg.GRPCAdvertise, err)
		}
		if s.grpcTLS, s.caPEM, err = s.newGRPCTLS(ctx, host); err != nil {
			return nil, err
		}
	}
	planner := deps.Planner
	if planner == nil {
		planner = pipelinePlanner{baseTypes: s.baseTypeNames()}
	}
	s.sch = newScheduling(s, planner)
	s.streams = stepserver.New(s, keys, log.With("component", "stepserver")).WithLimits(cfg.Limits.GRPC)
	s.observe(deps)
	podEndpoint := cfg.PodBlobstoreEndpoint
	if podEndpoint == "" {
		podEndpoint = cfg.Blobstore.Endpoint
	}
	s.podWorker = podspec.Worker{
		PorterImage: cfg.PorterImage, WindowsPorterImage: cfg.WindowsPorterImage,
		ATCAddress: cfg.GRPCAdvertise, BlobstoreEndpoint: podEndpoint, BlobstoreBucket: cfg.Blobstore.Bucket,
		BlobstoreRegion: cfg.Blobstore.Region, BlobstoreSecure: cfg.Blobstore.Secure,
		ImagePullPolicy: cfg.ImagePullPolicy, NativeSidecars: cfg.NativeSidecars, DNSPolicy: cfg.DNSPolicy,
		Bounds: cfg.StepBounds,
	}
	client := deps.WorkerKube
	if client == nil {
		client = func(c worker.Config) (kubernetes.Interface, error) {
			if c.Kubeconfig == "" && c.Context == "" && !c.InCluster {
				return deps.Kube, nil
			}
			rc, err := c.RESTConfig(cfg.Kubeconfig)
			if err != nil {
				return nil, err
			}
			return kubernetes.NewForConfig(rc)
		}
	}
	if s.runtime, err = s.newRuntime(client, deps.StepCredentials); err != nil {
		return nil, err
	}
	s.pods = execRuntime{s.runtime}
	s.exec = s.newExec()
	if cfg.GC.Interval > 0 {
		s.collector = s.newCollector()
	}
	return s, nil
}

// API is the engine as the HTTP API's handlers reach it (apiserver.Engine).
func (s *Server) API() APIEngine { return APIEngine{s} }

// Credentials is the credential manager the builds look vars up in, for
// the API's set-pipeline --check-creds.
func (s *Server) Credentials() creds.Manager { return s.credentials() }

// Logs are the builds' logs, read by range for the API.
func (s *Server) Logs() *buildlog.Logs { return s.logs }

// BuildEvents follows the builds' logs for the API.
func (s *Server) BuildEvents() *buildlog.Follower { return s.events }

// BaseTypes are the names of the resource types the workers provide.
func (s *Server) BaseTypes() []string { return s.baseTypeNames() }

// ArtifactWorker is the worker uploaded artifacts are recorded on.
func (s *Server) ArtifactWorker() string { return s.artifactWorker() }

// Run serves gRPC, and HTTP with api (the API and the web UI, which the
// composition root builds over API), until ctx ends or a listener dies (an
// error). Either way it returns within seconds: running builds stop where they are
// (their pods go on) for the next server to resume, and every goroutine Run
// started has ended.
func (s *Server) Run(parent context.Context, api http.Handler) error {
	// ctx ends with parent or with the first listener to die: builds and
	// loops stop on it either way.
	ctx, stop := context.WithCancelCause(parent)
	defer stop(nil)
	// Builds stop with Run, with its cause.
	defer func() { s.stopBase(context.Cause(ctx)) }()
	errc := s.listenerDied
	stopOps, err := s.startOps(ctx)
	if err != nil {
		return err
	}
	defer stopOps()
	opts := s.streams.ServerOptions()
	if s.grpcTLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.grpcTLS)))
	}
	// A resource step's response (up to resource.MaxResponse) arrives in one message.
	opts = append(opts, grpc.MaxRecvMsgSize(resource.MaxResponse+1<<20))
	gs := grpc.NewServer(opts...)
	s.streams.Register(gs)
	gln, err := net.Listen("tcp", s.cfg.GRPCListen)
	if err != nil {
		return fmt.Errorf("listen for sidecars on %s: %w", s.cfg.GRPCListen, err)
	}
	hln, err := net.Listen("tcp", s.cfg.HTTPListen)
	if err != nil {
		gln.Close()
		return fmt.Errorf("listen for the API on %s: %w", s.cfg.HTTPListen, err)
	}
	// Requests end with the server, not only when their client leaves: a
	// fly following a build's events must not hold the shutdown.
	reqCtx, endRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer endRequests()
	hs := s.apiServer(reqCtx, api)

	workersCtx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	workersDone := s.runtime.Start(workersCtx)
	if err := s.resume(ctx); err != nil {
		gln.Close()
		hln.Close()
		stopWorkers()
		<-workersDone
		return err
	}
	s.setReady()
	s.log.Info("serving", "grpc", gln.Addr().String(), "advertised", s.cfg.GRPCAdvertise, "http", hln.Addr().String(),
		"external_url", s.cfg.ExternalURL, "workers", len(s.runtime.Workers()), "tls", !s.cfg.Insecure)
	var serving sync.WaitGroup
	serving.Add(2)
	go func() {
		defer serving.Done()
		if err := gs.Serve(gln); err != nil {
			errc <- fmt.Errorf("serve sidecars on %s: %w", gln.Addr(), err)
		}
	}()
	go func() {
		defer serving.Done()
		if err := hs.Serve(hln); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("serve the API on %s: %w", hln.Addr(), err)
		}
	}()
	heartbeatDone := make(chan struct{})
	go func() { defer close(heartbeatDone); s.heartbeat(ctx) }()
	schedDone := make(chan struct{})
	go func() { defer close(schedDone); s.runScheduling(ctx) }()
	gcDone := s.runGC(ctx)

	var runErr error
	select {
	case <-ctx.Done():
		s.log.Info("server stopping: builds are left running for the next server")
	case runErr = <-errc:
		s.log.Error("server stopped: a listener died", "err", runErr)
	}
	stop(runErr)                   // loops and workers stop
	s.stopBase(context.Cause(ctx)) // builds stop
	<-heartbeatDone
	<-schedDone
	<-gcDone
	stopWorkers()
	<-workersDone
	endRequests()
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutdown); err != nil {
		s.log.Warn("API requests still running at shutdown: closed", "err", err)
		_ = hs.Close()
	}
	gs.Stop()
	serving.Wait()
	s.runs.Wait()
	return runErr
}

// heartbeat marks stalled the workers no server heartbeats any more, and
// aborts the builds someone aborted through another server sharing the
// database, until ctx ends.
func (s *Server) heartbeat(ctx context.Context) {
	beat := time.NewTicker(s.cfg.WorkerHeartbeat)
	defer beat.Stop()
	aborts := time.NewTicker(time.Second)
	defer aborts.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-beat.C:
			if err := s.db.StallUnresponsiveWorkers(ctx, 3*s.cfg.WorkerHeartbeat); err != nil && ctx.Err() == nil {
				s.log.Warn("stall unresponsive workers", "err", err)
			}
		case <-aborts.C:
			ids, err := s.db.AbortsRequested(ctx, s.cfg.ServerID)
			if err != nil && ctx.Err() == nil {
				s.log.Warn("look for aborts requested elsewhere", "err", err)
			}
			for _, id := range ids {
				if b, ok := s.running(id); ok {
					b.Abort(exec.ErrAborted)
				}
			}
		}
	}
}

// LastSeq implements stepserver.Sink.
func (s *Server) LastSeq(ctx context.Context, stepID string) (uint64, error) {
	st, err := s.step(stepID)
	if err != nil {
		return 0, err
	}
	return st.Build().Log.StepDurable(ctx, stepID)
}

// Append implements stepserver.Sink: each sidecar event is recorded in the
// build's log, as the build event people see where there is one.
func (s *Server) Append(_ context.Context, stepID string, evs []*eventspb.Event) error {
	st, err := s.step(stepID)
	if err != nil {
		return err
	}
	if st.Build().Ended() {
		// A sidecar that outlived its build (a pod deleted while the server
		// was down, resending): its events are acknowledged and dropped,
		// never logged after the build's end.
		return nil
	}
	s.obs.metrics.SidecarEvents(stepID, evs)
	st.LogEvents(evs)
	return nil
}

// Sync implements stepserver.Sink.
func (s *Server) Sync(ctx context.Context, stepID string, _ uint64) error {
	st, err := s.step(stepID)
	if err != nil {
		return err
	}
	return st.Build().Log.Sync(ctx)
}

func (s *Server) step(id string) (*exec.StepState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.steps[id]
	if !ok {
		return nil, fmt.Errorf("unknown step %q", id)
	}
	return st, nil
}

func (s *Server) forgetStep(id string) {
	s.mu.Lock()
	delete(s.steps, id)
	delete(s.queued, id)
	s.mu.Unlock()
}

// running returns the build if this server runs it.
func (s *Server) running(id int64) (*buildstate.Build, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.builds[id]
	return b, ok
}

func (s *Server) shutdownCtx() context.Context {
	if s.base == nil { // a test's Server, not New's
		return context.Background()
	}
	return s.base
}

// auditStore is where the audit trail goes.
func (s *Server) auditStore() blobstore.Store {
	if s.audit != nil {
		return s.audit
	}
	return s.store
}
