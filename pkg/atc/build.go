package atc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atc/buildlog"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/creds"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events"
)

// Why a build's context ended: an abort, a step's timeout, or (any other
// cause) the server shutting down, after which the build is resumed.
var (
	errAborted = errors.New("aborted")
	errTimeout = errors.New("timeout exceeded")
	// errFailFast stops the other steps of an in_parallel with fail_fast.
	errFailFast = errors.New("another step of the in_parallel failed")
)

// build is a build this server runs.
type build struct {
	id     int64
	name   string
	team   string
	teamID int
	// pipeline and job name a job build's (empty for one-off builds): task
	// caches are keyed by them.
	pipeline, job string
	log           *buildlog.Log
	// abort cancels the build's run context with errAborted.
	abort context.CancelCauseFunc
	done  chan struct{}

	mu    sync.Mutex
	state buildState
}

// buildState is the server's record of a build's steps, saved in the
// database after every change, so a restarted server resumes the build:
// finished steps are not run again and running pods are followed again.
type buildState struct {
	Steps map[concourse.PlanID]*stepRecord `json:"steps"`
}

// stepRecord is what is known of one step of a build.
type stepRecord struct {
	Name   string `json:"name"`
	Type   string `json:"type"`
	StepID string `json:"step_id,omitempty"` // the pod's step ID
	// Worker runs the step's pod ("": the server's first, as before there
	// were several).
	Worker string `json:"worker,omitempty"`
	// Container is the step pod's handle in the API.
	Container   string            `json:"container,omitempty"`
	EventConfig events.TaskConfig `json:"event_config"`
	Status      string            `json:"status"` // started, succeeded, failed, errored, aborted
	ExitStatus  *int              `json:"exit_status,omitempty"`
	Error       string            `json:"error,omitempty"`
	// Outputs maps the build's artifact names to what the step produced.
	Outputs  map[string]api.ArtifactRef `json:"outputs,omitempty"`
	AuditKey string                     `json:"audit_key,omitempty"`
	EndTime  int64                      `json:"end_time,omitempty"`
	// Version is what a get fetched or a put made (a check: the latest
	// version it found), with the metadata; Versions is all a check found.
	Version  map[string]string         `json:"version,omitempty"`
	Metadata []concourse.MetadataField `json:"metadata,omitempty"`
	Versions []resourceVersion         `json:"versions,omitempty"`
	// CacheKey is a get's resource cache key.
	CacheKey string `json:"cache_key,omitempty"`
}

func (r *stepRecord) finished() bool { return concourse.BuildStatus(r.Status).Finished() }

// record returns the step's record, creating it.
func (b *build) record(id concourse.PlanID, name, typ string) *stepRecord {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state.Steps == nil {
		b.state.Steps = map[concourse.PlanID]*stepRecord{}
	}
	r, ok := b.state.Steps[id]
	if !ok {
		r = &stepRecord{Name: name, Type: typ}
		b.state.Steps[id] = r
	}
	return r
}

// update changes a step's record under the build's lock.
func (b *build) update(f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f()
}

// saveState writes the build's state to the database.
func (s *Server) saveState(ctx context.Context, b *build) {
	b.mu.Lock()
	body, err := json.Marshal(b.state)
	b.mu.Unlock()
	if err == nil {
		err = s.retryDB(ctx, "save the build's state", func(ctx context.Context) error { return s.db.SaveBuildState(ctx, b.id, body) })
	}
	if err != nil {
		s.log.Error("save build state", "build", b.id, "err", err)
	}
}

// createBuild validates a one-off build's plan, records the build and
// starts it.
func (s *Server) createBuild(ctx context.Context, team db.Team, createdBy string, plan concourse.Plan, raw json.RawMessage) (db.Build, error) {
	if err := s.validatePlan(ctx, team, &plan); err != nil {
		return db.Build{}, err
	}
	rec, err := s.db.CreateOneOffBuild(ctx, team.ID, raw, createdBy, s.cfg.ServerID)
	if err != nil {
		return db.Build{}, fmt.Errorf("record the build: %w", err)
	}
	now := time.Now()
	if err := s.db.StartBuild(ctx, rec.ID, now); err != nil {
		return db.Build{}, fmt.Errorf("start build %d: %w", rec.ID, err)
	}
	rec.Status, rec.StartTime = string(concourse.StatusStarted), now
	b := s.newBuild(rec, team)
	b.log.Append(events.Status{Status: concourse.StatusStarted, Time: now.Unix()})
	s.startBuild(ctx, b, plan)
	return rec, nil
}

func (s *Server) newBuild(rec db.Build, team db.Team) *build {
	return &build{id: rec.ID, name: rec.Name, team: team.Name, teamID: team.ID, log: s.logs.Open(rec.ID), done: make(chan struct{})}
}

// ended reports whether the build has ended (done is closed).
func (b *build) ended() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// followedBuilds is what the build log's Follower reads of the server.
type followedBuilds struct{ s *Server }

// Running implements buildlog.Builds.
func (f followedBuilds) Running(id int64) (*buildlog.Log, <-chan struct{}, bool) {
	b, ok := f.s.running(id)
	if !ok {
		return nil, nil, false
	}
	return b.log, b.done, true
}

// Build implements buildlog.Builds.
func (f followedBuilds) Build(ctx context.Context, id int64) (db.Build, error) {
	return f.s.db.Build(ctx, id)
}

// startBuild runs the build in the background. The build outlives the
// request that created it, but not the server: on shutdown it stops where
// it is and the next server resumes it.
func (s *Server) startBuild(ctx context.Context, b *build, plan concourse.Plan) {
	runCtx, abort := context.WithCancelCause(context.WithoutCancel(ctx))
	b.abort = abort
	runCtx, span := s.observeBuildStart(runCtx, b)
	// The log outlives an abort (the build's last events must be written)
	// and ends on its own once the finished build is durable, or when the
	// server stops.
	logCtx, stopLog := context.WithCancel(context.WithoutCancel(ctx))
	s.mu.Lock()
	s.builds[b.id] = b
	s.mu.Unlock()
	s.runs.Add(1)
	go func() {
		defer s.runs.Done()
		defer span.End()
		logDone := make(chan struct{})
		go func() { defer close(logDone); b.log.Run(logCtx) }()
		defer func() { stopLog(); <-logDone }()
		stop := context.AfterFunc(s.shutdownCtx(), func() { abort(errShutdown); stopLog() })
		defer stop()
		x := newExecutor(s, b)
		ok, err := x.run(runCtx, &plan)
		if errors.Is(context.Cause(runCtx), errShutdown) {
			s.log.Info("server stopping: build left to resume", "build", b.id)
			return
		}
		s.finishBuild(runCtx, b, buildResult(ok, err))
		abort(nil)
	}()
}

// errShutdown is the cause of a build context ended by the server stopping.
var errShutdown = errors.New("the server is stopping")

// buildResult is a build's status from its plan's outcome.
func buildResult(ok bool, err error) concourse.BuildStatus {
	switch {
	case errors.Is(err, errAborted):
		return concourse.StatusAborted
	case err != nil:
		return concourse.StatusErrored
	case !ok:
		return concourse.StatusFailed
	}
	return concourse.StatusSucceeded
}

// finishBuild records the build's end, durably, and releases it.
func (s *Server) finishBuild(ctx context.Context, b *build, status concourse.BuildStatus) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	now := time.Now()
	// The database learns the end first, so that whoever saw the status
	// event (fly does, then exits) finds the build finished in the API.
	if err := b.log.Sync(ctx); err != nil {
		s.log.Error("build log not durable", "build", b.id, "err", err)
	}
	s.saveState(ctx, b)
	err := s.retryDB(ctx, "record the build's end", func(ctx context.Context) error { return s.db.FinishBuild(ctx, b.id, string(status), now) })
	if err != nil && !errors.Is(err, db.ErrConflict) {
		s.log.Error("record the build's end", "build", b.id, "err", err)
	}
	// The audit trail is complete before anyone sees the build end.
	s.writeBuildAudit(ctx, b, status, now)
	b.log.Append(events.Status{Status: concourse.BuildStatus(status), Time: now.Unix()})
	s.buildFinished(ctx, status)
	if err := b.log.Sync(ctx); err != nil {
		s.log.Error("build log not durable", "build", b.id, "err", err)
	}
	b.log.Finish()
	s.mu.Lock()
	delete(s.builds, b.id)
	s.mu.Unlock()
	close(b.done)
	s.log.Info("build finished", "build", b.id, "status", status)
}

// auditBuild is builds/<id>/build.json.
type auditBuild struct {
	ID      int64                            `json:"id"`
	Name    string                           `json:"name"`
	Team    string                           `json:"team_name"`
	Status  concourse.BuildStatus            `json:"status"`
	EndTime int64                            `json:"end_time"`
	Steps   map[concourse.PlanID]*stepRecord `json:"steps"`
}

// secretRedactor redacts the credentials the build has read (nil: none).
func (b *build) secretRedactor() *creds.Redactor {
	if b.log == nil {
		return nil
	}
	return b.log.Redactor()
}

// writeBuildAudit writes builds/<id>/build.json once, when the build ends.
func (s *Server) writeBuildAudit(ctx context.Context, b *build, status concourse.BuildStatus, end time.Time) {
	b.mu.Lock()
	body, err := json.MarshalIndent(auditBuild{ID: b.id, Name: b.name, Team: b.team, Status: status, EndTime: end.Unix(), Steps: b.state.Steps}, "", "  ")
	b.mu.Unlock()
	if err != nil {
		return
	}
	// Step errors may quote what a step printed, credentials included.
	if red := b.secretRedactor(); red != nil {
		if body, err = red.JSON(body); err != nil {
			s.log.Warn("audit build record: redact", "build", b.id, "err", err)
			return
		}
	}
	key := blobstore.BuildPrefix(fmt.Sprint(b.id)) + "build.json"
	if _, err := s.auditStore().Stat(ctx, key); err == nil {
		return
	} else if !errors.Is(err, blobstore.ErrNotFound) {
		s.log.Warn("audit build record", "key", key, "err", err)
		return
	}
	if _, err := s.auditStore().Put(ctx, key, strings.NewReader(string(body)), int64(len(body)), blobstore.PutOptions{ContentType: "application/json"}); err != nil {
		s.log.Warn("audit build record", "key", key, "err", err)
	}
}

// resume picks up this server's unfinished builds after a restart.
func (s *Server) resume(ctx context.Context) error {
	recs, err := s.db.UnfinishedBuilds(ctx, s.cfg.ServerID)
	if err != nil {
		return fmt.Errorf("list unfinished builds: %w", err)
	}
	for _, rec := range recs {
		team, err := s.db.TeamByID(ctx, rec.TeamID)
		if err != nil {
			return fmt.Errorf("resume build %d: %w", rec.ID, err)
		}
		var plan concourse.Plan
		if err := json.Unmarshal(rec.Plan, &plan); err != nil {
			return fmt.Errorf("resume build %d: decode its plan: %w", rec.ID, err)
		}
		log, err := s.logs.Restore(ctx, rec.ID)
		if err != nil {
			return err
		}
		b := s.newBuild(rec, team)
		b.log = log // restored: the IDs go on after the stored ones
		jb, err := s.db.JobBuildByID(ctx, rec.ID)
		if err != nil {
			return fmt.Errorf("resume build %d: %w", rec.ID, err)
		}
		b.pipeline, b.job = jb.PipelineName, jb.JobName
		if len(rec.State) > 0 {
			if err := json.Unmarshal(rec.State, &b.state); err != nil {
				return fmt.Errorf("resume build %d: decode its state: %w", rec.ID, err)
			}
		}
		s.log.Info("resuming build", "build", rec.ID)
		s.startBuild(ctx, b, plan)
		if rec.AbortRequested {
			b.abort(errAborted)
		}
	}
	return nil
}
