// Package apiserver is the ATC's HTTP API: Concourse's routes as fly uses
// them, plus Porter's audit trail. It holds handlers only; it reaches the
// database through Store and builds, checks and running steps through
// Engine, each holding just the methods the handlers call. It routes,
// authenticates and authorizes; as Concourse's atc/api/<x>server, route
// families of their own live in subpackages (adminserver, artifactserver,
// auditserver, volumeserver, workerserver), and every error is answered by
// apierr.
package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"log/slog"

	"github.com/porter-ci/porter/pkg/atc/apiserver/adminserver"
	"github.com/porter-ci/porter/pkg/atc/apiserver/buildaccess"
	"github.com/porter-ci/porter/pkg/atc/apiserver/logserver"
	"github.com/porter-ci/porter/pkg/atc/apiserver/volumeserver"
	"github.com/porter-ci/porter/pkg/atc/apiserver/webhookserver"
	"github.com/porter-ci/porter/pkg/atc/apiserver/workerserver"
	"github.com/porter-ci/porter/pkg/atc/buildlog"
	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/creds"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/hijack"
)

// Store is the database as the handlers use it.
type Store interface {
	TeamStore
	BuildStore
	PipelineStore
	ResourceStore
	workerserver.Store
	ContainerStore
	volumeserver.Store
	FlyStore
	adminserver.Store
	webhookserver.Store
}

// TeamStore holds teams and the local users' logins.
type TeamStore interface {
	Team(ctx context.Context, name string) (db.Team, error)
	Teams(ctx context.Context) ([]db.Team, error)
	EnsureTeam(ctx context.Context, name string, auth db.TeamAuth) (db.Team, error)
	LocalUserHash(ctx context.Context, name string) (string, error)
	LocalUserSession(ctx context.Context, name string) (db.UserSession, error)
	BumpLocalUserGeneration(ctx context.Context, name string) error
	// Single sign-on users (sso.go).
	SaveSSOUser(ctx context.Context, connector, userID, userName string, groups []string) error
	SSOUserSession(ctx context.Context, connector, userID string) (db.UserSession, error)
	BumpSSOUserGeneration(ctx context.Context, connector, userID string) error
}

// BuildStore holds builds and their artifacts.
type BuildStore interface {
	Build(ctx context.Context, id int64) (db.Build, error)
	BuildsByID(ctx context.Context, ids []int64) (map[int64]db.Build, error)
	Builds(ctx context.Context, f db.BuildFilter) ([]db.JobBuild, error)
	JobBuildByID(ctx context.Context, id int64) (db.JobBuild, error)
	BuildArtifacts(ctx context.Context, buildID int64) ([]db.Artifact, error)
	Artifact(ctx context.Context, id int64) (db.Artifact, error)
	Artifacts(ctx context.Context, teamID int) ([]db.Artifact, error)
	CreateArtifact(ctx context.Context, a db.Artifact) (db.Artifact, error)
	SetBuildComment(ctx context.Context, id int64, comment string) error
}

// PipelineStore holds pipelines and their jobs.
type PipelineStore interface {
	PipelineInstance(ctx context.Context, teamID int, ref db.PipelineRef) (db.Pipeline, error)
	PipelineByID(ctx context.Context, id int64) (db.Pipeline, error)
	Pipelines(ctx context.Context, f db.PipelineFilter) ([]db.Pipeline, error)
	SavePipelineInstance(ctx context.Context, teamID int, ref db.PipelineRef, cfg concourse.Config, from int64) (p db.Pipeline, created bool, err error)
	DeletePipeline(ctx context.Context, id int64) error
	PipelineUnfinishedBuilds(ctx context.Context, pipelineID int64) ([]int64, error)
	PausePipeline(ctx context.Context, id int64, by string) error
	UnpausePipeline(ctx context.Context, id int64) error
	SetPipelinePublic(ctx context.Context, id int64, public bool) error
	RenamePipeline(ctx context.Context, id int64, name string) error
	OrderPipelines(ctx context.Context, teamID int, names []string) error
	OrderPipelineInstances(ctx context.Context, teamID int, name string, instances []map[string]any) error

	Job(ctx context.Context, pipelineID int64, name string) (db.Job, error)
	Jobs(ctx context.Context, pipelineID int64) ([]db.Job, error)
	LookupPipelineJob(ctx context.Context, pipelineID int64, job string) (db.JobRef, error)
	PauseJob(ctx context.Context, id int64, by string) error
	UnpauseJob(ctx context.Context, id int64) error
	JobBuilds(ctx context.Context, jobID int64, f db.BuildFilter) ([]db.JobBuild, error)
	JobBuildByName(ctx context.Context, jobID int64, name string) (db.JobBuild, error)
	CreateJobBuild(ctx context.Context, jobID int64, createdBy string, manual bool, inputs []db.BuildInput) (db.JobBuild, error)
	RerunJobBuild(ctx context.Context, b db.JobBuild, createdBy string) (db.JobBuild, error)
}

// ResourceStore holds resources and their versions.
type ResourceStore interface {
	Resource(ctx context.Context, pipelineID int64, name string) (db.Resource, error)
	Resources(ctx context.Context, pipelineID int64) ([]db.Resource, error)
	ResourcesOfPipelines(ctx context.Context, pipelineIDs []int64) ([]db.Resource, error)
	LookupPipelineResource(ctx context.Context, pipelineID int64, resource string) (db.ResourceRef, error)
	DeleteResourceCaches(ctx context.Context, resourceID int64) (int64, error)
	Versions(ctx context.Context, resourceID int64, p db.VersionPage) (vs []db.Version, hasOlder, hasNewer bool, err error)
	VersionByID(ctx context.Context, resourceID, versionID int64) (db.Version, error)
	VersionBuilds(ctx context.Context, resourceID, versionID int64, input bool) ([]db.JobBuild, error)
	PinVersion(ctx context.Context, resourceID, versionID int64) error
	UnpinResource(ctx context.Context, resourceID int64) error
	SetPinComment(ctx context.Context, resourceID int64, comment string) error
	SetVersionEnabled(ctx context.Context, resourceID, versionID int64, enabled bool) error
}

// ContainerStore holds the step pods as fly sees them.
type ContainerStore interface {
	Container(ctx context.Context, handle string) (db.Container, error)
	Containers(ctx context.Context, f db.ContainerFilter) ([]db.Container, error)
	// InterceptStarted and InterceptEnded count a container's open
	// intercept sessions: GC keeps an intercepted pod while one is open.
	InterceptStarted(ctx context.Context, handle string) error
	InterceptEnded(ctx context.Context, handle string) error
}

// Engine runs builds, checks and steps.
type Engine interface {
	webhookserver.Engine
	// CreateBuild validates a one-off build's plan, records it and starts
	// it. A plan that cannot run is an error that BadRequest marks.
	CreateBuild(ctx context.Context, team db.Team, createdBy string, plan concourse.Plan, raw json.RawMessage) (db.Build, error)
	// AbortBuild aborts an unfinished build wherever it runs.
	AbortBuild(ctx context.Context, b db.Build) error
	// ResumeBuild makes a build of a failed job build's job that reuses
	// its succeeded steps and runs from the failed one (N.1); a build that
	// cannot be resumed is db.ErrConflict.
	ResumeBuild(ctx context.Context, b db.Build, createdBy string) (db.JobBuild, error)
	// WakeScheduler has the scheduler look at the pipelines now.
	WakeScheduler()
	// StartCheck starts a check of a resource; the build is set even when
	// the check failed to start.
	StartCheck(ctx context.Context, res db.ResourceRef, from map[string]string) (db.JobBuild, error)
	// NextInputs are the inputs of a job's next build, or why it waits.
	NextInputs(ctx context.Context, job db.JobRef) (map[string]db.BuildInput, string, error)
	// StepConnected says whether a step's sidecar is connected here.
	StepConnected(stepID string) bool
	// OpenSession opens an intercept session in a connected step.
	OpenSession(ctx context.Context, stepID string, open *eventspb.SessionOpen) (hijack.Session, error)
	// WorkerResourceTypes are the base resource types a worker provides.
	WorkerResourceTypes(worker string) []concourse.WorkerResourceType
	// DestroyTeam removes a team, its pipelines, builds and task caches,
	// aborting its running builds first.
	DestroyTeam(ctx context.Context, team db.Team) error
	// RenameTeam renames a team (db.ErrConflict: taken) and moves its
	// task caches.
	RenameTeam(ctx context.Context, team db.Team, name string) error
	// DestroyPipeline removes a pipeline of team with what it holds and its
	// task caches, aborting its running builds first.
	DestroyPipeline(ctx context.Context, team string, p db.Pipeline) error
	// RenamePipeline renames a pipeline of team (db.ErrConflict: taken)
	// and moves its task caches.
	RenamePipeline(ctx context.Context, team string, p db.Pipeline, name string) error
	// CheckResourceType starts a build that runs a resource type's check.
	CheckResourceType(ctx context.Context, team db.Team, createdBy, name string, typ concourse.ResourceType, from map[string]string) (db.Build, error)
	// ClearTaskCaches deletes the task caches under prefix, saying how many.
	ClearTaskCaches(ctx context.Context, prefix string) (int64, error)
}

// BuildEvents follows builds' logs: it yields a build's records after
// from, batch by batch, live until the build ends or the caller stops.
type BuildEvents interface {
	Events(ctx context.Context, b db.Build, from uint64) iter.Seq[[]buildlog.Record]
}

// Config is what the handlers need to know of the server.
type Config struct {
	// ExternalURL is how people reach the API (links, tokens' issuer, the
	// cross-origin check).
	ExternalURL string
	ClusterName string
	// ServerID names this server, whose steps' sidecars connect here.
	ServerID string
	// BaseTypes are the resource types the workers provide.
	BaseTypes []string
	// ArtifactWorker is the worker named on uploaded artifacts.
	ArtifactWorker  string
	BlobstoreBucket string
	Limits          Limits
	// OIDC is the single sign-on connector (nil: none); its ExternalURL
	// defaults to ExternalURL.
	OIDC *auth.OIDCConfig
}

// Deps are the handlers' dependencies.
type Deps struct {
	Store  Store
	Engine Engine
	Events BuildEvents
	// Logs reads builds' stored logs by range (nil: those routes answer 503).
	Logs logserver.Logs
	// Blobs holds artifacts and task caches; Audit the audit trail (nil:
	// Blobs).
	Blobs  blobstore.Store
	Audit  blobstore.Store
	Issuer *auth.Issuer
	Log    *slog.Logger
	// Credentials is the credential manager set-pipeline --check-creds
	// looks vars up in (nil: none, every var is missing).
	Credentials creds.Manager
}

// Server answers the API.
type Server struct {
	cfg    Config
	store  Store
	engine Engine
	events BuildEvents
	logs   logserver.Logs
	blobs  blobstore.Store
	audit  blobstore.Store
	issuer *auth.Issuer
	log    *slog.Logger
	creds  creds.Manager
	// oidc is the OIDC connector (nil: none).
	oidc *auth.OIDC
	// webhooks keeps the checks its calls are starting, across requests.
	webhooks *webhookserver.Server
	// builds admits the reads of a build (team role, or exposed and public).
	builds buildaccess.Guard
}

// New makes the API's server, complete: with the single sign-on connector
// when cfg has one.
func New(cfg Config, deps Deps) (*Server, error) {
	s := &Server{cfg: cfg, store: deps.Store, engine: deps.Engine, events: deps.Events, logs: deps.Logs, blobs: deps.Blobs, audit: deps.Audit,
		issuer: deps.Issuer, log: deps.Log, creds: deps.Credentials}
	if s.audit == nil {
		s.audit = s.blobs
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.cfg.Limits = s.cfg.Limits.withDefaults()
	s.builds = buildaccess.Guard{Store: s.store, Fail: s.fail}
	s.webhooks = &webhookserver.Server{Store: s.store, Engine: s.engine, PipelineRef: pipelineRef, Present: apiJobBuild, Log: s.log}
	if cfg.OIDC != nil {
		oc := *cfg.OIDC
		if oc.ExternalURL == "" {
			oc.ExternalURL = cfg.ExternalURL
		}
		o, err := auth.NewOIDC(oc, s.issuer, loginUsers{s.store}, s.log.With("component", "oidc"))
		if err != nil {
			return nil, fmt.Errorf("single sign-on: %w", err)
		}
		s.oidc = o
	}
	return s, nil
}
