package atc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/porter-ci/porter/pkg/atc/exec"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/pkg/scheduler"
)

// scheduling is the server's part in job scheduling and periodic checks.
type scheduling struct {
	loop    *scheduler.Loop
	checker *scheduler.Checker
}

func newScheduling(s *Server, planner scheduler.Planner) *scheduling {
	log := s.log.With("component", "scheduler")
	sched := &scheduler.Scheduler{DB: s.db, Planner: planner, Starter: schedStarter{s}, Log: log}
	checker := &scheduler.Checker{DB: s.db, Planner: planner, Runner: schedStarter{s}, Server: s.cfg.ServerID, Log: log}
	return &scheduling{loop: scheduler.NewLoop(s.db, sched, checker, log), checker: checker}
}

// wakeScheduler makes the scheduling loop look now: a version was saved,
// a build ended, a job was triggered or unpaused, a config was saved.
func (s *Server) wakeScheduler() { s.sch.loop.Wake() }

// runScheduling runs checks and scheduling until ctx ends (one server at a
// time, under the database's scheduler lock).
func (s *Server) runScheduling(ctx context.Context) { s.whileLeading(ctx, "scheduler", s.sch.loop.Run) }

// schedStarter runs the builds the scheduler and the checker start.
type schedStarter struct{ s *Server }

// StartJobBuild implements scheduler.Starter.
func (st schedStarter) StartJobBuild(ctx context.Context, rec db.JobBuild, plan concourse.Plan) error {
	s := st.s
	body, err := json.Marshal(plan)
	if err != nil {
		return fmt.Errorf("encode the plan of build %d: %w", rec.ID, err)
	}
	if err := s.exec.ValidatePlan(ctx, db.Team{ID: rec.TeamID, Name: rec.TeamName}, &plan); err != nil {
		return errors.Join(fmt.Errorf("build %d: %w", rec.ID, err), st.FailJobBuild(ctx, rec, err))
	}
	state, from, err := s.resumedState(ctx, rec)
	if err != nil {
		return errors.Join(err, st.FailJobBuild(ctx, rec, err))
	}
	now := time.Now()
	if err := s.db.StartJobBuild(ctx, rec.ID, body, s.cfg.ServerID, now); err != nil {
		return err
	}
	rec.Status, rec.StartTime = concourse.StatusStarted, now
	b := s.newBuild(rec.Build, db.Team{ID: rec.TeamID, Name: rec.TeamName})
	b.State, b.ResumedFrom = state, from
	b.Pipeline, b.Job, b.InstanceVars, b.PipelineID = rec.PipelineName, rec.JobName, rec.PipelineInstanceVars, rec.PipelineID
	b.Log.Append(events.Status{Status: concourse.StatusStarted, Time: now.Unix()})
	s.startBuild(s.shutdownCtx(), b, plan)
	s.runs.Add(1) // Run waits for it
	go func() {
		defer s.runs.Done()
		select {
		case <-b.Done:
			s.wakeScheduler()
		case <-s.shutdownCtx().Done(): // left to resume
		}
	}()
	return nil
}

// FailJobBuild implements scheduler.Starter: the build ends errored at
// once, its events saying why.
func (st schedStarter) FailJobBuild(ctx context.Context, rec db.JobBuild, cause error) error {
	now := time.Now().Unix()
	st.s.endPendingBuild(ctx, rec, concourse.StatusErrored,
		events.Status{Status: concourse.StatusStarted, Time: now}, events.Error{Message: cause.Error(), Time: now})
	return nil
}

// AbortJobBuild implements scheduler.Starter: the build never started, so
// its events are its status alone, as Concourse's are; followers (fly watch,
// trigger-job -w) show it aborted and exit 3.
func (st schedStarter) AbortJobBuild(ctx context.Context, rec db.JobBuild) error {
	st.s.endPendingBuild(ctx, rec, concourse.StatusAborted)
	return nil
}

// endPendingBuild ends a build nobody runs with status, after evs.
func (s *Server) endPendingBuild(ctx context.Context, rec db.JobBuild, status concourse.BuildStatus, evs ...events.Event) {
	b := s.newBuild(rec.Build, db.Team{ID: rec.TeamID, Name: rec.TeamName})
	b.Pipeline, b.Job, b.InstanceVars, b.PipelineID = rec.PipelineName, rec.JobName, rec.PipelineInstanceVars, rec.PipelineID
	// Running, briefly: a follower reading the stored log could see the
	// build finished before its status event is stored, and end without
	// it (fly then exits 0, a silent success).
	b.Abort = func(error) {} // it ends with status whatever comes
	s.register(b)
	for _, ev := range evs {
		b.Log.Append(ev)
	}
	logCtx, stopLog := context.WithCancel(context.WithoutCancel(ctx))
	logDone := make(chan struct{})
	go func() { defer close(logDone); b.Log.Run(logCtx) }()
	s.finishBuild(ctx, b, status)
	stopLog()
	<-logDone
}

// RunCheck implements scheduler.CheckRunner: the check build runs like any
// build, is aborted after timeout, and its end is recorded on the resource.
func (st schedStarter) RunCheck(ctx context.Context, rec db.JobBuild, plan concourse.Plan, timeout time.Duration) error {
	s := st.s
	b := s.newBuild(rec.Build, db.Team{ID: rec.TeamID, Name: rec.TeamName})
	b.Pipeline, b.InstanceVars, b.PipelineID = rec.PipelineName, rec.PipelineInstanceVars, rec.PipelineID
	b.Log.Append(events.Status{Status: concourse.StatusStarted, Time: rec.StartTime.Unix()})
	s.startBuild(s.shutdownCtx(), b, plan)
	s.runs.Add(1) // Run waits for it
	go func() {
		defer s.runs.Done()
		timer := time.AfterFunc(timeout, func() {
			// Said in the build itself: the aborted step shows no error of
			// its own, and `fly check-resource` shows only the build.
			msg := fmt.Sprintf("check timed out after %s", timeout)
			b.Log.Append(events.Error{Message: msg, Time: time.Now().Unix()})
			b.Abort(fmt.Errorf("%s: %w", msg, exec.ErrTimeout))
		})
		select {
		case <-b.Done:
		case <-s.shutdownCtx().Done(): // left to resume
			timer.Stop()
			return
		}
		timedOut := !timer.Stop()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := s.sch.checker.Finished(ctx, rec.ResourceID, checkError(ctx, s, b, timedOut, timeout)); err != nil {
			s.log.Warn("record the end of a check", "build", b.ID, "err", err)
		}
		s.wakeScheduler()
	}()
	return nil
}

// checkError is what a finished check build shows on its resource: empty when
// it succeeded, else the failing step's error.
func checkError(ctx context.Context, s *Server, b *buildstate.Build, timedOut bool, timeout time.Duration) string {
	if timedOut {
		return fmt.Sprintf("check timed out after %s", timeout)
	}
	rec, err := s.db.Build(ctx, b.ID)
	if err != nil {
		return fmt.Sprintf("check ended in an unknown state: %v", err)
	}
	if rec.Status == concourse.StatusSucceeded {
		return ""
	}
	msg := "check " + string(rec.Status)
	b.Update(func() {
		for _, step := range b.State.Steps {
			if step.Error != "" {
				msg = step.Error
				return
			}
			if step.ExitStatus != nil && *step.ExitStatus != 0 {
				msg = fmt.Sprintf("check %s: exit status %d", step.Name, *step.ExitStatus)
				return
			}
		}
	})
	return msg
}
