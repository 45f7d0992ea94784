package atc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/porter-ci/porter/pkg/atc/buildlog"
	"github.com/porter-ci/porter/pkg/atc/exec"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events"
)

// createBuild validates a one-off build's plan, records the build and
// starts it.
func (s *Server) createBuild(ctx context.Context, team db.Team, createdBy string, plan concourse.Plan, raw json.RawMessage) (db.Build, error) {
	if err := s.exec.ValidatePlan(ctx, team, &plan); err != nil {
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
	rec.Status, rec.StartTime = concourse.StatusStarted, now
	b := s.newBuild(rec, team)
	b.Log.Append(events.Status{Status: concourse.StatusStarted, Time: now.Unix()})
	s.startBuild(ctx, b, plan)
	return rec, nil
}

func (s *Server) newBuild(rec db.Build, team db.Team) *buildstate.Build {
	return &buildstate.Build{ID: rec.ID, Name: rec.Name, Team: team.Name, TeamID: team.ID, Created: rec.CreateTime,
		Log: s.logs.Open(rec.ID), Done: make(chan struct{})}
}

// followedBuilds is what the build log's Follower reads of the server.
type followedBuilds struct{ s *Server }

// Running implements buildlog.Builds.
func (f followedBuilds) Running(id int64) (*buildlog.Log, <-chan struct{}, bool) {
	b, ok := f.s.running(id)
	if !ok {
		return nil, nil, false
	}
	return b.Log, b.Done, true
}

// Started implements buildlog.Builds.
func (f followedBuilds) Started() <-chan struct{} {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	if f.s.buildStarted == nil {
		f.s.buildStarted = make(chan struct{})
	}
	return f.s.buildStarted
}

// Build implements buildlog.Builds.
func (f followedBuilds) Build(ctx context.Context, id int64) (db.Build, error) {
	return f.s.db.Build(ctx, id)
}

// register puts b in the running set until finishBuild takes it out:
// followers of its events then read its live log, which ends with its
// status event, not the stored one, which gets that event only after the
// database has the build finished. It wakes followers waiting for a build
// to start here.
func (s *Server) register(b *buildstate.Build) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.builds[b.ID] = b
	if s.buildStarted != nil {
		close(s.buildStarted)
	}
	s.buildStarted = make(chan struct{})
}

// startBuild runs the build in the background. The build outlives the
// request that created it, but not the server: on shutdown it stops where
// it is and the next server resumes it.
func (s *Server) startBuild(ctx context.Context, b *buildstate.Build, plan concourse.Plan) {
	runCtx, abort := context.WithCancelCause(context.WithoutCancel(ctx))
	b.Abort = abort
	runCtx, span := s.observeBuildStart(runCtx, b)
	// The log outlives an abort (the build's last events must be written)
	// and ends on its own once the finished build is durable, or when the
	// server stops.
	logCtx, stopLog := context.WithCancel(context.WithoutCancel(ctx))
	s.register(b)
	s.runs.Add(1)
	go func() {
		defer s.runs.Done()
		defer span.End()
		logDone := make(chan struct{})
		go func() { defer close(logDone); b.Log.Run(logCtx) }()
		defer func() { stopLog(); <-logDone }()
		stop := context.AfterFunc(s.shutdownCtx(), func() { abort(exec.ErrShutdown); stopLog() })
		defer stop()
		ok, err := s.exec.Run(runCtx, b, &plan)
		if errors.Is(context.Cause(runCtx), exec.ErrShutdown) {
			s.log.Info("server stopping: build left to resume", "build", b.ID)
			return
		}
		s.finishBuild(runCtx, b, exec.BuildResult(ok, err))
		abort(nil)
	}()
}

// finishBuild records the build's end, durably, and releases it. b must be
// in the running set (register): the database says the build ended before
// its status event is stored, so followers must read its live log.
func (s *Server) finishBuild(ctx context.Context, b *buildstate.Build, status concourse.BuildStatus) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	now := time.Now()
	// The database learns the end first, so that whoever saw the status
	// event (fly does, then exits) finds the build finished in the API.
	if err := b.Log.Sync(ctx); err != nil {
		s.log.Error("build log not durable", "build", b.ID, "err", err)
	}
	s.exec.SaveState(ctx, b)
	err := s.retryDB(ctx, "record the build's end", func(ctx context.Context) error { return s.db.FinishBuild(ctx, b.ID, status, now) })
	if err != nil && !errors.Is(err, db.ErrConflict) {
		s.log.Error("record the build's end", "build", b.ID, "err", err)
	}
	// The audit trail is complete before anyone sees the build end.
	s.writeBuildAudit(ctx, b, status, now)
	b.Log.Append(events.Status{Status: concourse.BuildStatus(status), Time: now.Unix()})
	s.buildFinished(ctx, status)
	s.nudgeGC()
	if err := b.Log.Sync(ctx); err != nil {
		s.log.Error("build log not durable", "build", b.ID, "err", err)
	}
	b.Log.Finish()
	s.mu.Lock()
	delete(s.builds, b.ID)
	s.mu.Unlock()
	close(b.Done)
	s.log.Info("build finished", "build", b.ID, "status", status)
}

// auditBuild is builds/<id>/build.json.
type auditBuild struct {
	ID      int64                                       `json:"id"`
	Name    string                                      `json:"name"`
	Team    string                                      `json:"team_name"`
	Status  concourse.BuildStatus                       `json:"status"`
	EndTime int64                                       `json:"end_time"`
	Steps   map[concourse.PlanID]*buildstate.StepRecord `json:"steps"`
	// ResumedFrom is the failed build this one resumes: the steps whose
	// records say reused_from are that build's, their audit_key its records.
	ResumedFrom *buildstate.BuildRef `json:"resumed_from,omitempty"`
}

// writeBuildAudit writes builds/<id>/build.json once, when the build ends.
func (s *Server) writeBuildAudit(ctx context.Context, b *buildstate.Build, status concourse.BuildStatus, end time.Time) {
	var body []byte
	var err error
	b.Update(func() {
		body, err = json.MarshalIndent(auditBuild{ID: b.ID, Name: b.Name, Team: b.Team, Status: status, EndTime: end.Unix(), Steps: b.State.Steps, ResumedFrom: b.ResumedFrom}, "", "  ")
	})
	if err != nil {
		return
	}
	// Step errors may quote what a step printed, credentials included.
	if red := b.SecretRedactor(); red != nil {
		if body, err = red.JSON(body); err != nil {
			s.log.Warn("audit build record: redact", "build", b.ID, "err", err)
			return
		}
	}
	key := blobstore.BuildPrefix(b.AuditID()) + "build.json"
	if _, err := s.auditStore().Stat(ctx, key); err == nil {
		// Written once: by this build before (a resumed build ends again),
		// or by an earlier build of the same ID, whose record stays.
		s.log.Warn("audit build record exists: the first one is kept (if this build is new, an earlier build had its ID: was the database reset or restored?)",
			"build", b.ID, "key", key)
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
		b.Log = log // restored: the IDs go on after the stored ones
		jb, err := s.db.JobBuildByID(ctx, rec.ID)
		if err != nil {
			return fmt.Errorf("resume build %d: %w", rec.ID, err)
		}
		b.Pipeline, b.Job, b.InstanceVars, b.PipelineID = jb.PipelineName, jb.JobName, jb.PipelineInstanceVars, jb.PipelineID
		if _, b.ResumedFrom, err = s.resumedState(ctx, jb); err != nil {
			// Only its audit record's link is lost: the build runs on.
			s.log.Warn("resume build: the build it resumes", "build", rec.ID, "err", err)
		}
		if len(rec.State) > 0 {
			if err := json.Unmarshal(rec.State, &b.State); err != nil {
				return fmt.Errorf("resume build %d: decode its state: %w", rec.ID, err)
			}
		}
		s.log.Info("resuming build", "build", rec.ID)
		s.startBuild(ctx, b, plan)
		if rec.AbortRequested {
			b.Abort(exec.ErrAborted)
		}
	}
	return nil
}
