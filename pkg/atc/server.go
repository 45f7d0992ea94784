package atc

import (
	"context"
	"crypto"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/podwatch"
	"github.com/porter-ci/porter/pkg/scheduler"
	"github.com/porter-ci/porter/pkg/sidecar"
	"github.com/porter-ci/porter/pkg/stepserver"
	"github.com/porter-ci/porter/pkg/steptoken"
)

// Config is the server's configuration (see the serve flags).
type Config struct {
	Namespace string
	Worker    string
	// WorkerTags are the worker's tags: a step with tags runs only on a
	// worker that has them all.
	WorkerTags []string
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
	Insecure        bool
	PorterImage     string
	NativeSidecars  bool
	DNSPolicy       corev1.DNSPolicy
	ImagePullPolicy corev1.PullPolicy
	// KeepAlive is how long a finished step stays interceptible.
	KeepAlive time.Duration
	// PodRetention is how long a finished step's pod is kept (for kubectl
	// logs and post-mortems) before it is deleted.
	PodRetention time.Duration
	GC           GCConfig // the garbage collector (gc.go)
	// Blobstore is the ATC's own access; PodBlobstoreEndpoint, when set, is
	// the endpoint step pods use instead (a different network view).
	Blobstore            blobstore.Config
	PodBlobstoreEndpoint string
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
	// type (see LoadBaseResourceTypeDefaults).
	BaseResourceTypeDefaults map[string]map[string]any
	// CredentialNamespacePrefix names the namespace of a team's
	// credentials: prefix + team (empty: creds.DefaultNamespacePrefix).
	CredentialNamespacePrefix string
}

// Deps are what the server is given rather than opening itself.
type Deps struct {
	Kube       kubernetes.Interface
	DB         *db.DB
	Store      blobstore.Store
	SigningKey crypto.Signer
	Log        *slog.Logger
	// Planner plans job builds and checks (nil: pkg/pipeline's).
	Planner scheduler.Planner
}

// Server is a running ATC runtime.
type Server struct {
	cfg     Config
	log     *slog.Logger
	db      *db.DB
	store   blobstore.Store
	kube    kubernetes.Interface
	pods    *podwatch.Watcher
	streams *stepserver.Server
	keys    *steptoken.Keyring
	issuer  *auth.Issuer
	worker  podspec.Worker
	caPEM   []byte
	sch     *scheduling
	// images caches the digests of checked task images.
	images *imageCache

	started time.Time

	// base is Run's context: builds stop (to be resumed) when it ends.
	base context.Context

	mu     sync.Mutex
	builds map[int64]*build      // builds this server is running
	steps  map[string]*stepState // by step ID (the pod's)
	runs   sync.WaitGroup
}

// New prepares a server from its configuration and dependencies.
func New(ctx context.Context, cfg Config, deps Deps) (*Server, error) {
	log := deps.Log
	if log == nil {
		log = slog.Default()
	}
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
	key, err := tokenKey(cfg.StateDir, steptoken.NewKey)
	if err != nil {
		return nil, err
	}
	keys, err := steptoken.NewKeyring(key)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: log, db: deps.DB, store: deps.Store, kube: deps.Kube, keys: keys,
		issuer: auth.NewIssuer(deps.SigningKey, cfg.ExternalURL+"/sky/issuer", cfg.TokenTTL),
		builds: map[int64]*build{}, steps: map[string]*stepState{}, started: time.Now(),
		images: newImageCache(imageCacheTTL, imageCacheSize)}
	planner := deps.Planner
	if planner == nil {
		planner = pipelinePlanner{baseTypes: s.baseTypeNames()}
	}
	s.sch = newScheduling(s, planner)
	s.streams = stepserver.New(s, keys, log.With("component", "stepserver"))
	s.pods = podwatch.New(deps.Kube, cfg.Namespace, cfg.Worker, log.With("component", "podwatch"))
	podEndpoint := cfg.PodBlobstoreEndpoint
	if podEndpoint == "" {
		podEndpoint = cfg.Blobstore.Endpoint
	}
	s.worker = podspec.Worker{
		Name: cfg.Worker, Namespace: cfg.Namespace, PorterImage: cfg.PorterImage,
		ATCAddress: cfg.GRPCAdvertise, BlobstoreEndpoint: podEndpoint, BlobstoreBucket: cfg.Blobstore.Bucket,
		BlobstoreRegion: cfg.Blobstore.Region, BlobstoreSecure: cfg.Blobstore.Secure,
		ImagePullPolicy: cfg.ImagePullPolicy, NativeSidecars: cfg.NativeSidecars, DNSPolicy: cfg.DNSPolicy,
	}
	return s, nil
}

// Run serves gRPC and HTTP until ctx ends. A listener that dies is an error.
func (s *Server) Run(ctx context.Context) error {
	if err := s.pods.Run(ctx); err != nil {
		return fmt.Errorf("watch step pods: %w", err)
	}
	var opts []grpc.ServerOption
	if !s.cfg.Insecure {
		host, _, err := net.SplitHostPort(s.cfg.GRPCAdvertise)
		if err != nil {
			return fmt.Errorf("grpc advertise address %q: %w", s.cfg.GRPCAdvertise, err)
		}
		tlsCfg, caPEM, err := serverTLS(s.cfg.StateDir, host)
		if err != nil {
			return err
		}
		s.caPEM = caPEM
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	opts = append(opts, grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}))
	// A resource step's response (up to sidecar.MaxResponse) arrives in one message.
	opts = append(opts, grpc.MaxRecvMsgSize(sidecar.MaxResponse+1<<20))
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
	hs := &http.Server{Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}

	s.base = ctx
	if err := s.registerWorker(ctx); err != nil {
		gln.Close()
		hln.Close()
		return err
	}
	if err := s.resume(ctx); err != nil {
		gln.Close()
		hln.Close()
		return err
	}
	s.log.Info("serving", "grpc", gln.Addr().String(), "advertised", s.cfg.GRPCAdvertise, "http", hln.Addr().String(),
		"external_url", s.cfg.ExternalURL, "namespace", s.cfg.Namespace, "worker", s.cfg.Worker, "tls", !s.cfg.Insecure)
	errc := make(chan error, 2)
	go func() { errc <- fmt.Errorf("serve sidecars: %w", gs.Serve(gln)) }()
	go func() { errc <- fmt.Errorf("serve the API: %w", hs.Serve(hln)) }()
	heartbeatDone := make(chan struct{})
	hbCtx, stopHeartbeat := context.WithCancel(ctx)
	go func() { defer close(heartbeatDone); s.heartbeat(hbCtx) }()
	schedDone := make(chan struct{})
	go func() { defer close(schedDone); s.runScheduling(hbCtx) }()
	gcDone := s.runGC(hbCtx)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
		s.log.Error("server stopped", "err", runErr)
	}
	stopHeartbeat()
	<-heartbeatDone
	<-schedDone
	<-gcDone
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = hs.Shutdown(shutdown)
	gs.Stop()
	s.runs.Wait()
	return runErr
}

// registerWorker records this server's worker (its namespace) in the database.
func (s *Server) registerWorker(ctx context.Context) error {
	if err := s.db.UpsertWorker(ctx, s.workerRecord()); err != nil {
		return fmt.Errorf("register worker %s: %w", s.cfg.Worker, err)
	}
	return nil
}

func (s *Server) workerRecord() db.Worker {
	return db.Worker{Name: s.cfg.Worker, Platform: "linux", Tags: s.cfg.WorkerTags, State: "running", Namespace: s.cfg.Namespace,
		Version: concourse.WorkerVersion, StartTime: s.started}
}

// heartbeat keeps the worker's record fresh until ctx ends, and aborts
// the builds someone aborted through another server sharing the database.
func (s *Server) heartbeat(ctx context.Context) {
	beat := time.NewTicker(30 * time.Second)
	defer beat.Stop()
	aborts := time.NewTicker(time.Second)
	defer aborts.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-beat.C:
			if err := s.db.UpsertWorker(ctx, s.workerRecord()); err != nil && ctx.Err() == nil {
				s.log.Warn("worker heartbeat", "err", err)
			}
		case <-aborts.C:
			ids, err := s.db.AbortsRequested(ctx, s.cfg.ServerID)
			if err != nil && ctx.Err() == nil {
				s.log.Warn("look for aborts requested elsewhere", "err", err)
			}
			for _, id := range ids {
				if b, ok := s.running(id); ok {
					b.abort(errAborted)
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
	return st.b.log.stepDurable(ctx, stepID)
}

// Append implements stepserver.Sink: each sidecar event is recorded in the
// build's log, as the build event people see where there is one.
func (s *Server) Append(_ context.Context, stepID string, evs []*eventspb.Event) error {
	st, err := s.step(stepID)
	if err != nil {
		return err
	}
	select {
	case <-st.b.done:
		// A sidecar that outlived its build (a pod deleted while the server
		// was down, resending): its events are acknowledged and dropped,
		// never logged after the build's end.
		return nil
	default:
	}
	for _, ev := range evs {
		st.mu.Lock()
		shown := st.translate(ev)
		st.mu.Unlock()
		if shown != nil {
			st.b.log.appendEvent(shown, stepID, ev.GetSeq())
		} else {
			st.b.log.append(record{Step: stepID, Seq: ev.GetSeq()})
		}
		if fin := ev.GetStepFinished(); fin != nil {
			select {
			case st.finished <- fin:
			default:
			}
		}
	}
	return nil
}

// Sync implements stepserver.Sink.
func (s *Server) Sync(ctx context.Context, stepID string, _ uint64) error {
	st, err := s.step(stepID)
	if err != nil {
		return err
	}
	return st.b.log.sync(ctx, st.b.log.lastID())
}

func (s *Server) step(id string) (*stepState, error) {
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
	s.mu.Unlock()
}

// running returns the build if this server runs it.
func (s *Server) running(id int64) (*build, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.builds[id]
	return b, ok
}

// podGone reports whether a step's pod no longer exists (its Secret, if
// left behind, is removed with it).
func (s *Server) podGone(ctx context.Context, stepID string) (bool, error) {
	name := podspec.Name(stepID)
	_, err := s.kube.CoreV1().Pods(s.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		return false, nil
	case apierrors.IsNotFound(err):
		for _, secret := range []string{name, podspec.PullSecretName(stepID)} {
			if err := s.kube.CoreV1().Secrets(s.cfg.Namespace).Delete(ctx, secret, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				s.log.Warn("delete a gone step's secret", "step", stepID, "secret", secret, "err", err)
			}
		}
		return true, nil
	default:
		return false, fmt.Errorf("look up pod %s of a resumed build: %w", name, err)
	}
}

func (s *Server) deletePod(ctx context.Context, stepID string) {
	grace := int64(0)
	err := s.kube.CoreV1().Pods(s.cfg.Namespace).Delete(context.WithoutCancel(ctx), podspec.Name(stepID), metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if err != nil && !apierrors.IsNotFound(err) {
		s.log.Warn("delete step pod", "step", stepID, "err", err)
	}
}

func (s *Server) shutdownCtx() context.Context {
	if s.base == nil {
		return context.Background()
	}
	return s.base
}
