package atc

import (
	"context"
	"encoding/json"
	"maps"
	"sort"

	"github.com/porter-ci/porter/pkg/atc/exec"
	"github.com/porter-ci/porter/pkg/atc/exec/basetypes"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/hijack"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/scheduler"
)

// APIEngine is what the API's handlers reach builds, checks and running
// steps through (apiserver.Engine).
type APIEngine struct{ s *Server }

func (e APIEngine) CreateBuild(ctx context.Context, team db.Team, createdBy string, plan concourse.Plan, raw json.RawMessage) (db.Build, error) {
	return e.s.createBuild(ctx, team, createdBy, plan, raw)
}

// AbortBuild records the abort in the database, then aborts the build here
// when this server runs it; the server that does otherwise acts on the
// record. Recording first makes an accepted abort outlive this server: one
// killed before the build ends resumes it aborted, never running on.
func (e APIEngine) AbortBuild(ctx context.Context, rec db.Build) error {
	if rec.Status.Finished() {
		return nil
	}
	err := e.s.db.RequestAbort(ctx, rec.ID)
	if b, ok := e.s.running(rec.ID); ok {
		// Acted on here even when the record failed (the database is
		// down): the build ends aborted, recorded once the database is back.
		if err != nil {
			e.s.log.Warn("abort not recorded; aborting the build here only", "build", rec.ID, "err", err)
		}
		b.Abort(exec.ErrAborted)
		return nil
	}
	if err == nil && rec.Status == concourse.StatusPending {
		e.s.wakeScheduler() // which ends it at once, as nobody runs it yet
	}
	return err
}

func (e APIEngine) WakeScheduler() { e.s.wakeScheduler() }

func (e APIEngine) StartCheck(ctx context.Context, res db.ResourceRef, from map[string]string) (db.JobBuild, error) {
	return e.s.sch.checker.StartCheck(ctx, res, from)
}

func (e APIEngine) NextInputs(ctx context.Context, job db.JobRef) (map[string]db.BuildInput, string, error) {
	// Input selection only reads the database.
	sched := scheduler.Scheduler{DB: e.s.db, Log: e.s.log}
	return sched.NextInputs(ctx, job)
}

func (e APIEngine) StepConnected(stepID string) bool { return e.s.streams.Connected(stepID) }

func (e APIEngine) OpenSession(ctx context.Context, stepID string, open *eventspb.SessionOpen) (hijack.Session, error) {
	if podspec.IsCheckPod(stepID) {
		// Before the session opens: what the person changes in the pod
		// must not see another check's request.
		e.s.exec.RetireCheckPod(stepID)
	}
	sess, err := e.s.streams.OpenSession(ctx, stepID, open)
	if err != nil {
		return nil, err
	}
	e.s.log.Info("intercept session opened", "step", stepID, "session", sess.ID)
	return sess, nil
}

// WorkerResourceTypes are the base resource types a worker provides.
func (e APIEngine) WorkerResourceTypes(name string) []concourse.WorkerResourceType {
	types := maps.Clone(e.s.cfg.BaseResourceTypes)
	if types == nil {
		types = basetypes.Images()
	}
	if w, ok := e.s.runtime.Lookup(name); ok {
		maps.Copy(types, w.Config().BaseResourceTypes)
	}
	out := []concourse.WorkerResourceType{}
	for t, img := range types {
		out = append(out, concourse.WorkerResourceType{Type: t, Image: img})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out
}
