package atc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strconv"
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

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/podwatch"
	"github.com/porter-ci/porter/pkg/stepserver"
	"github.com/porter-ci/porter/pkg/steptoken"
)

// Config is the server's configuration (see the serve flags).
type Config struct {
	Namespace string
	Worker    string
	// GRPCListen is where sidecars connect; GRPCAdvertise is the address
	// written into step pods (defaults to GRPCListen).
	GRPCListen    string
	GRPCAdvertise string
	HTTPListen    string
	// StateDir keeps the step token key and the gRPC CA across restarts.
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
	// Blobstore is the ATC's own access; PodBlobstoreEndpoint, when set, is
	// the endpoint step pods use instead (a different network view).
	Blobstore            blobstore.Config
	PodBlobstoreEndpoint string
	Team                 string
}

// Server is a running ATC runtime.
type Server struct {
	cfg     Config
	log     *slog.Logger
	store   blobstore.Store
	kube    kubernetes.Interface
	pods    *podwatch.Watcher
	streams *stepserver.Server
	keys    *steptoken.Keyring
	worker  podspec.Worker
	caPEM   []byte

	mu     sync.Mutex
	builds map[int64]*build
	steps  map[string]*stepState
	nextID int64
	runs   sync.WaitGroup
}

type build struct {
	mu        sync.Mutex
	info      api.Build
	task      *taskRecord
	log       *buildLog
	abortCh   chan struct{}
	abortOnce sync.Once
	done      chan struct{}
}

// stepState is what the server tracks of a running step.
type stepState struct {
	id          string
	b           *build
	eventConfig events.TaskConfig
	finished    chan *eventspb.StepFinished

	mu        sync.Mutex
	lastError string
}

// New prepares a server: it connects to the blobstore and the cluster and
// restores the builds stored by an earlier run.
func New(ctx context.Context, cfg Config, kube kubernetes.Interface, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	if cfg.GRPCAdvertise == "" {
		cfg.GRPCAdvertise = cfg.GRPCListen
	}
	if cfg.Team == "" {
		cfg.Team = "main"
	}
	store, err := blobstore.Open(ctx, cfg.Blobstore)
	if err != nil {
		return nil, err
	}
	if err := blobstore.EnsureBucket(ctx, store); err != nil {
		return nil, fmt.Errorf("blobstore bucket %q: %w", cfg.Blobstore.Bucket, err)
	}
	key, err := tokenKey(cfg.StateDir, steptoken.NewKey)
	if err != nil {
		return nil, err
	}
	keys, err := steptoken.NewKeyring(key)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: log, store: store, kube: kube, keys: keys,
		builds: map[int64]*build{}, steps: map[string]*stepState{}}
	s.streams = stepserver.New(s, keys, log.With("component", "stepserver"))
	s.pods = podwatch.New(kube, cfg.Namespace, cfg.Worker, log.With("component", "podwatch"))
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

// Run serves gRPC and HTTP until ctx ends.
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
	hs := &http.Server{Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second}

	if err := s.restore(ctx); err != nil {
		return err
	}
	s.log.Info("serving", "grpc", gln.Addr().String(), "advertised", s.cfg.GRPCAdvertise, "http", hln.Addr().String(),
		"namespace", s.cfg.Namespace, "worker", s.cfg.Worker, "tls", !s.cfg.Insecure)
	errc := make(chan error, 2)
	go func() { errc <- gs.Serve(gln) }()
	go func() { errc <- hs.Serve(hln) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		s.log.Error("server stopped", "err", err)
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = hs.Shutdown(shutdown)
	gs.Stop()
	s.runs.Wait()
	return nil
}

// Object keys of the ATC's own (mutable) state, apart from the audit trail.
func buildKey(id int64) string          { return fmt.Sprintf("atc/builds/%012d.json", id) }
func buildEventsPrefix(id int64) string { return fmt.Sprintf("atc/events/%012d/", id) }

// taskRecord is what a build needs to be resumed after a restart.
type taskRecord struct {
	StepID      string            `json:"step_id"`
	EventConfig events.TaskConfig `json:"event_config"`
	KeepAlive   time.Duration     `json:"keep_alive"`
}

type storedBuild struct {
	api.Build
	Task *taskRecord `json:"task,omitempty"`
}

func (s *Server) saveBuild(ctx context.Context, b *build) error {
	b.mu.Lock()
	body, err := json.Marshal(storedBuild{Build: b.info, Task: b.task})
	id := b.info.ID
	b.mu.Unlock()
	if err != nil {
		return fmt.Errorf("encode build %d: %w", id, err)
	}
	if _, err := s.store.Put(ctx, buildKey(id), strings.NewReader(string(body)), int64(len(body)), blobstore.PutOptions{ContentType: "application/json"}); err != nil {
		return fmt.Errorf("save build %d: %w", id, err)
	}
	return nil
}

// restore loads stored builds and resumes the ones that were running.
func (s *Server) restore(ctx context.Context) error {
	objs, err := s.store.List(ctx, "atc/builds/")
	if err != nil {
		return fmt.Errorf("list stored builds: %w", err)
	}
	finishedSteps := map[string]time.Time{}
	defer func() { s.collectFinishedPods(ctx, finishedSteps) }()
	for _, o := range objs {
		rc, _, err := s.store.Get(ctx, o.Key)
		if err != nil {
			return fmt.Errorf("read %s: %w", o.Key, err)
		}
		var sb storedBuild
		err = json.NewDecoder(rc).Decode(&sb)
		rc.Close()
		if err != nil {
			return fmt.Errorf("decode %s: %w", o.Key, err)
		}
		log, err := loadBuildLog(ctx, s.store, buildEventsPrefix(sb.ID), s.log.With("build", sb.ID))
		if err != nil {
			return err
		}
		b := &build{info: sb.Build, task: sb.Task, log: log, abortCh: make(chan struct{}), done: make(chan struct{})}
		s.mu.Lock()
		s.builds[sb.ID] = b
		s.nextID = max(s.nextID, sb.ID)
		s.mu.Unlock()
		if api.Finished(sb.Status) || sb.Task == nil {
			log.finish()
			close(b.done)
			if sb.Task != nil {
				finishedSteps[sb.Task.StepID] = time.Unix(sb.EndTime, 0)
			}
			continue
		}
		s.log.Info("resuming build", "build", sb.ID, "step", sb.Task.StepID)
		st := s.registerStep(b, sb.Task.StepID, sb.Task.EventConfig)
		podGone, err := s.podGone(ctx, sb.Task.StepID)
		if err != nil {
			return err
		}
		s.runs.Add(1)
		go func() {
			defer s.runs.Done()
			go log.run(ctx)
			if podGone {
				// Nothing in the cluster can report this step any more.
				s.finishStep(ctx, b, st, &eventspb.StepFinished{Result: eventspb.Result_RESULT_ERRORED, ExitStatus: -1,
					Error: fmt.Sprintf("pod %s is gone: it was deleted, or never created, while the ATC was down", podspec.Name(st.id))})
				return
			}
			s.superviseTask(ctx, b, st)
		}()
	}
	return nil
}

func (s *Server) registerStep(b *build, id string, cfg events.TaskConfig) *stepState {
	st := &stepState{id: id, b: b, eventConfig: cfg, finished: make(chan *eventspb.StepFinished, 1)}
	s.mu.Lock()
	s.steps[id] = st
	s.mu.Unlock()
	return st
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

func (s *Server) build(id int64) (*build, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.builds[id]
	return b, ok
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

// listBuilds returns every build, newest first.
func (s *Server) listBuilds() []api.Build {
	s.mu.Lock()
	bs := make([]*build, 0, len(s.builds))
	for _, b := range s.builds {
		bs = append(bs, b)
	}
	s.mu.Unlock()
	out := make([]api.Build, 0, len(bs))
	for _, b := range bs {
		b.mu.Lock()
		out = append(out, b.info)
		b.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID > out[j].ID })
	return out
}

// abort asks a build to stop.
func (b *build) abort() { b.abortOnce.Do(func() { close(b.abortCh) }) }

func (b *build) snapshot() api.Build {
	b.mu.Lock()
	defer b.mu.Unlock()
	info := b.info
	info.Steps = append([]api.Step(nil), b.info.Steps...)
	return info
}

func parseBuildID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, errors.New("build id must be a positive number")
	}
	return id, nil
}

// collectFinishedPods schedules the deletion of pods whose builds ended
// before a restart: their retention timers died with the old process.
func (s *Server) collectFinishedPods(ctx context.Context, ended map[string]time.Time) {
	pods, err := s.kube.CoreV1().Pods(s.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: podspec.WorkerSelector(s.cfg.Worker)})
	if err != nil {
		s.log.Warn("list step pods left from before the restart", "err", err)
		return
	}
	keep := max(s.cfg.PodRetention, s.cfg.KeepAlive)
	byLabel := make(map[string]string, len(ended))
	for stepID := range ended {
		byLabel[podspec.LabelValue(stepID)] = stepID
	}
	for _, pod := range pods.Items {
		stepID, ok := byLabel[pod.Labels[podspec.LabelStep]]
		if !ok {
			continue
		}
		endedAt := ended[stepID]
		time.AfterFunc(max(time.Until(endedAt.Add(keep)), 0), func() {
			s.deletePod(context.Background(), stepID)
		})
	}
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
		if err := s.kube.CoreV1().Secrets(s.cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			s.log.Warn("delete a gone step's secret", "step", stepID, "err", err)
		}
		return true, nil
	default:
		return false, fmt.Errorf("look up pod %s of a resumed build: %w", name, err)
	}
}
