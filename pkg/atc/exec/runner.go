package exec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/atc/checkpods"
	"github.com/porter-ci/porter/pkg/atc/exec/basetypes"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/atc/exec/imagecache"
	"github.com/porter-ci/porter/pkg/atc/exec/taskimage"
	"github.com/porter-ci/porter/pkg/atc/retry"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/creds"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/netguard"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/telemetry"
	"github.com/porter-ci/porter/pkg/worker"
)

// Engine is what the steps need of the server that runs their build: the
// registry of running steps (the sidecars' streams find them there), their
// supervision, and the scheduler to wake. As Concourse's step delegates, it
// is how a step reports back without knowing the server.
type Engine interface {
	// ShutdownContext ends when the server stops: hooks detached from an
	// aborted build and database retries stop with it.
	ShutdownContext() context.Context
	// RegisterStep makes a step's pod known to the server (its sidecar's
	// events reach st).
	RegisterStep(st *StepState)
	// Supervise waits for the step's pod to end; nil when the server is
	// stopping (the next server follows the step).
	Supervise(ctx context.Context, st *StepState) *eventspb.StepFinished
	// Retire forgets a finished step once its keep-alive is over.
	Retire(stepID string)
	// WakeScheduler says a new version may trigger jobs.
	WakeScheduler()
	// Proceed gives a step whose pod was declared ahead its go-ahead, now
	// or as soon as its sidecar connects.
	Proceed(stepID string, p *eventspb.Proceed) error
	// PodAhead counts what became of a pod declared ahead: started,
	// withdrawn or failed.
	PodAhead(outcome string)
}

// Runtime is how the steps place and run their pods: in the server, the
// workers and step pods of pkg/atc/kuberuntime.
type Runtime interface {
	Worker(name string) (Worker, error)
	CheckPlacement(req worker.Requirements) error
	Place(ctx context.Context, req worker.Requirements, waiting func(msg string)) (Worker, error)
	CreatePod(ctx context.Context, w Worker, a *action.Action, given podspec.Secrets) error
	PodGone(ctx context.Context, w Worker, stepID string) (bool, error)
	DeletePod(ctx context.Context, w Worker, stepID string)
	// StepCredentials are the blobstore credentials of the step of a
	// (its inputs' keys known), given again with a go-ahead.
	StepCredentials(ctx context.Context, w Worker, a *action.Action) (*eventspb.BlobstoreCredentials, error)
	// DeclaredAction is the action of the step's pod, read from its spec.
	DeclaredAction(ctx context.Context, w Worker, stepID string) (*action.Action, error)
}

// Worker is a place step pods run: a namespace of a cluster.
type Worker interface {
	Name() string
	Namespace() string
	// BaseResourceType is the worker's own image of a base resource type
	// (ok false: the server's is used).
	BaseResourceType(name string) (image string, ok bool)
}

// Store is what the steps record in the database (*db.DB).
type Store interface {
	SaveBuildState(ctx context.Context, id int64, state json.RawMessage) error
	Artifact(ctx context.Context, id int64) (db.Artifact, error)
	CreateArtifact(ctx context.Context, a db.Artifact) (db.Artifact, error)
	CreateContainer(ctx context.Context, c db.Container) (db.Container, error)
	SetContainerState(ctx context.Context, handle string, state concourse.ContainerState) error
	MoveContainerState(ctx context.Context, handle string, from, to concourse.ContainerState) (bool, error)
	CreateWaitingContainer(ctx context.Context, c db.Container, limit int) (db.Container, error)
	DeleteContainer(ctx context.Context, handle string) error
	ResourceCache(ctx context.Context, key string) (db.ResourceCache, error)
	SaveResourceCache(ctx context.Context, c db.ResourceCache) error
	BuildResourceID(ctx context.Context, buildID int64, name string) (int64, error)
	JobBuildByID(ctx context.Context, id int64) (db.JobBuild, error)
	LookupPipelineResource(ctx context.Context, pipelineID int64, resource string) (db.ResourceRef, error)
	SaveVersions(ctx context.Context, resourceID int64, versions []db.NewVersion) (int, error)
	SaveBuildVersion(ctx context.Context, buildID, jobID int64, name string, resourceID int64, v db.NewVersion, input bool) error
	// For var_sources and set_pipeline.
	Team(ctx context.Context, name string) (db.Team, error)
	PipelineByID(ctx context.Context, id int64) (db.Pipeline, error)
	PipelineInstance(ctx context.Context, teamID int, ref db.PipelineRef) (db.Pipeline, error)
	SavePipelineFromBuild(ctx context.Context, teamID int, ref db.PipelineRef, cfg concourse.Config, from int64, parent db.PipelineParent) (db.Pipeline, bool, error)
	SetPipelineParent(ctx context.Context, id int64, parent db.PipelineParent) error
}

// Config is what the steps take of the server's configuration.
type Config struct {
	// KeepAlive is how long a finished step stays interceptible.
	KeepAlive time.Duration
	// ExternalURL is given to resources as ATC_EXTERNAL_URL.
	ExternalURL string
	// BaseResourceTypes are the base types' images (nil:
	// basetypes.Images); BaseResourceTypeDefaults their source
	// defaults.
	BaseResourceTypes        map[string]string
	BaseResourceTypeDefaults basetypes.Defaults
	// PodOTLPEndpoint is where step pods export their spans ("": none).
	PodOTLPEndpoint string
	// ArtifactWorker is the worker artifacts are recorded on.
	ArtifactWorker string
	// CheckPodLifetime is how long a check pod lives (it takes checks for
	// the first half); 0 runs each check in a pod of its own.
	CheckPodLifetime time.Duration
	// CheckPodMaxChecks bounds the checks a check pod runs at once (0: no
	// bound); more wait for one to end.
	CheckPodMaxChecks int
	// Lookahead is how many tasks and puts of a serial sequence are
	// declared ahead of their turn (0: none).
	Lookahead int
	// AheadPerWorker is the most pods declared ahead one worker holds,
	// of all builds and servers (CreateWaitingContainer keeps it exact).
	AheadPerWorker int
	// VarSourceGuard checks the connections to pipelines' var_sources:
	// their URLs are users', the connections the server's.
	VarSourceGuard netguard.Guard
}

// Deps are the parts the steps run with.
type Deps struct {
	Engine  Engine
	Store   Store
	Blobs   blobstore.Store
	Runtime Runtime
	// Credentials is the team's credential manager for ((vars)).
	Credentials creds.Manager
	// Tracer opens the steps' spans (nil: none).
	Tracer trace.Tracer
	Log    *slog.Logger
	// Sessions run the checks in check pods (nil: a pod per check).
	Sessions checkpods.Sessions
	// Delegates report what the steps do (the engine's).
	Delegates DelegateFactory
}

// Runner runs builds' plans; what it holds is shared by all of them.
type Runner struct {
	cfg    Config
	engine Engine
	db     Store
	store  blobstore.Store
	pods   Runtime
	creds  creds.Manager
	tracer trace.Tracer
	log    *slog.Logger
	// images resolves task images, caching the digests it checked.
	images taskimage.Resolver
	// checkPods run the checks, when the server pools them (nil: not).
	checkPods *checkpods.Pool
	delegates DelegateFactory
}

// New prepares a runner.
func New(cfg Config, deps Deps) *Runner {
	log := deps.Log
	if log == nil {
		log = slog.Default()
	}
	return &Runner{cfg: cfg, engine: deps.Engine, db: deps.Store, store: deps.Blobs, pods: deps.Runtime, creds: deps.Credentials,
		tracer: deps.Tracer, log: log, images: taskimage.Resolver{Cache: imagecache.New(taskimage.CacheTTL, taskimage.CacheSize),
			BaseTypes: basetypes.Names(cfg.BaseResourceTypes), Defaults: cfg.BaseResourceTypeDefaults, BaseImages: cfg.BaseResourceTypes},
		checkPods: checkpods.NewPool(deps.Sessions, cfg.CheckPodLifetime, cfg.CheckPodMaxChecks), delegates: deps.Delegates}
}

// Run runs b's plan: ok says whether it succeeded; an error is the build's
// error (ErrAborted for an abort, the context's cause when it ended).
func (s *Runner) Run(ctx context.Context, b *buildstate.Build, plan *concourse.Plan) (bool, error) {
	x := newRunState(s, b)
	x.dropInheritedAhead(ctx)
	defer x.endAhead(ctx)
	return x.Run(ctx, plan)
}

func (s *Runner) shutdownCtx() context.Context {
	if s == nil || s.engine == nil {
		return context.Background()
	}
	return s.engine.ShutdownContext()
}

// resumeStep follows a step whose pod a previous server created to its
// end: a pod that is gone means the step is lost.
func (s *Runner) resumeStep(ctx context.Context, w Worker, st *StepState, stepID string) *eventspb.StepFinished {
	gone, err := s.pods.PodGone(ctx, w, stepID)
	switch {
	case err != nil:
		return Errored(err.Error())
	case gone:
		return Errored(fmt.Sprintf("pod %s is gone: it was deleted, or never created, while the ATC was down", podspec.Name(stepID)))
	}
	return s.engine.Supervise(ctx, st)
}

// baseTypeNames are the names of the resource types this server's workers
// provide.
func (s *Runner) baseTypeNames() []string { return basetypes.Names(s.cfg.BaseResourceTypes) }

// placeStep chooses the worker a step runs on, waiting while the workers
// that could run it cannot take it now (stalled, landing, at their task
// limit); the build's log says once what it waits for.
func (s *Runner) placeStep(ctx context.Context, b *buildstate.Build, d StepDelegate, req worker.Requirements) (Worker, error) {
	b.Update(func() {
		for _, r := range b.State.Steps {
			if r.Worker != "" && !slices.Contains(req.Started, r.Worker) {
				req.Started = append(req.Started, r.Worker)
			}
		}
	})
	return s.pods.Place(ctx, req, func(msg string) { d.Say(msg + "\n") })
}

// stoppedWaiting ends a step that was waiting for a worker when its build
// was aborted (or timed out); a server stopping leaves it to the next one,
// which places it again.
func (x *RunState) stoppedWaiting(ctx context.Context, r *buildstate.StepRecord) (bool, error) {
	err := interrupted(ctx)
	if !errors.Is(err, ErrShutdown) {
		x.b.Update(func() { r.Status, r.EndTime = concourse.StatusAborted, time.Now().Unix() })
		x.r.SaveState(ctx, x.b)
	}
	return false, err
}

// privilegedRequirements are requirements of a step that may be
// privileged: such a step runs only on a worker that allows it.
func privilegedRequirements(req worker.Requirements, privileged bool) worker.Requirements {
	req.Privileged = privileged
	return req
}

// createStepPod creates the step's pod and Secrets (kuberuntime), the pod
// joining the step's trace.
func (s *Runner) createStepPod(ctx context.Context, w Worker, a *action.Action, given podspec.Secrets) error {
	a.Telemetry = s.podTelemetry(ctx)
	return s.pods.CreatePod(ctx, w, a, given)
}

// podTelemetry is what a step's pod needs to join the build's trace: the
// step span's traceparent and where to export (nil: no traces from pods).
func (s *Runner) podTelemetry(ctx context.Context) *action.Telemetry {
	if s.cfg.PodOTLPEndpoint == "" {
		return nil
	}
	tp := telemetry.TraceParent(ctx)
	if tp == "" {
		return nil
	}
	return &action.Telemetry{TraceParent: tp, OTLPEndpoint: s.cfg.PodOTLPEndpoint}
}

// retryDB runs a database write of a running build through an outage
// (retry.DB), until the server stops.
func (s *Runner) retryDB(ctx context.Context, what string, write func(context.Context) error) error {
	return retry.DB(ctx, s.shutdownCtx(), s.log, what, write)
}
