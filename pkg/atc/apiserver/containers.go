package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/porter-ci/porter/pkg/atc/apiserver/apierr"
	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/hijack"
	"github.com/porter-ci/porter/pkg/httpreply"
)

// apiContainer is a container as Concourse presents one. A check's
// resource is its step name, and resource_name stays empty as Concourse
// leaves it: fly prints step_name+resource_name as the name.
func apiContainer(c db.Container) concourse.Container {
	return concourse.Container{ID: c.Handle, WorkerName: c.WorkerName, State: c.State, Type: string(c.Type), StepName: c.StepName,
		BuildID: c.BuildID, BuildName: c.BuildName, User: c.User, WorkingDirectory: c.WorkingDirectory,
		PipelineID: int(c.PipelineID), PipelineName: c.PipelineName, JobID: int(c.JobID), JobName: c.JobName, PlanID: c.PlanID}
}

// withKept says why GC keeps a finished step's pod: in kept_reason and, for
// fly (whose JSON carries only Concourse's fields), in expires_in ("kept:
// latest-check", ...). The pod goes once no rule keeps it.
func withKept(out concourse.Container, c db.Container) concourse.Container {
	if c.KeptReason != "" {
		out.KeptReason, out.ExpiresIn = c.KeptReason, "kept: "+c.KeptReason
	}
	return out
}

// handleContainers lists the team's step pods, filtered as fly asks
// (build_id, step_name, type).
func (s *Server) handleContainers(w http.ResponseWriter, r *http.Request, _ auth.Claims, team db.Team) {
	q := r.URL.Query()
	// fly intercept -j P/J [-b N] and --check P/R name where the build belongs.
	f := db.ContainerFilter{TeamID: team.ID, StepName: q.Get("step_name"), Type: q.Get("type"),
		PipelineName: q.Get("pipeline_name"), JobName: q.Get("job_name"), BuildName: q.Get("build_name"), ResourceName: q.Get("resource_name")}
	iv, err := instanceVarsFromQuery(q)
	if err != nil {
		s.fail(w, r, apierr.BadRequest(err))
		return
	}
	f.InstanceVars = iv
	if v := q.Get("build_id"); v != "" {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			s.fail(w, r, apierr.BadRequest(fmt.Errorf("build_id=%q: want a number", v)))
			return
		}
		f.BuildID = id
	}
	cs, err := s.store.Containers(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := []concourse.Container{}
	for _, c := range cs {
		out = append(out, withKept(apiContainer(c), c))
	}
	httpreply.JSON(w, http.StatusOK, out)
}

// teamContainer finds a container of the team; another team's is unknown.
func (s *Server) teamContainer(ctx context.Context, team db.Team, handle string) (db.Container, error) {
	c, err := s.store.Container(ctx, handle)
	if err == nil && c.TeamID != team.ID {
		err = db.ErrNotFound
	}
	if err != nil {
		return db.Container{}, fmt.Errorf("container %s: %w", handle, err)
	}
	return c, nil
}

func (s *Server) handleContainer(w http.ResponseWriter, r *http.Request, _ auth.Claims, team db.Team) {
	c, err := s.teamContainer(r.Context(), team, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httpreply.JSON(w, http.StatusOK, withKept(apiContainer(c), c))
}

// handleHijack is `fly intercept`: a process in the step's main container,
// carried over the step sidecar's own gRPC stream (no pods/exec, no way
// into the pod needed).
func (s *Server) handleHijack(w http.ResponseWriter, r *http.Request, claims auth.Claims, team db.Team) {
	c, err := s.teamContainer(r.Context(), team, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !s.engine.StepConnected(c.StepID) {
		// A step's sidecar dials the server that created its pod.
		if b, err := s.store.Build(r.Context(), c.BuildID); err == nil && b.Server != s.cfg.ServerID {
			s.fail(w, r, apierr.NotFound("Container Not Interceptible", fmt.Sprintf("step %q of build %s runs through server %q, which its sidecar is connected to: intercept it through that server",
				c.StepName, c.BuildName, b.Server)))
			return
		}
		s.fail(w, r, apierr.NotFound("Container Not Interceptible", fmt.Sprintf("step %q of build %s is no longer interceptible: its pod is not running or not connected "+
			"(a finished step stays interceptible only for the server's --keep-alive)", c.StepName, c.BuildName)))
		return
	}
	log := s.log.With("build", c.BuildID, "step", c.StepID, "user", claims.UserID)
	// Counted while open, so that GC keeps the pod (gc.Retention).
	if err := s.store.InterceptStarted(r.Context(), c.Handle); err != nil {
		log.Warn("record an intercept session", "err", err)
	}
	defer func() {
		if err := s.store.InterceptEnded(context.WithoutCancel(r.Context()), c.Handle); err != nil {
			log.Warn("record the end of an intercept session", "err", err)
		}
	}()
	how := hijack.Serve(w, r, hijack.ServeOptions{
		Open: func(ctx context.Context, open *eventspb.SessionOpen) (hijack.Session, error) {
			sess, err := s.engine.OpenSession(ctx, c.StepID, open)
			if err != nil {
				return nil, err
			}
			log.Info("intercept session opened", "tty", open.GetTty(), "command", open.GetCommand())
			return sess, nil
		},
		Alive: func() bool { return s.engine.StepConnected(c.StepID) },
		Log:   log,
	})
	log.Info("intercept session ended", "how", how)
}
