package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
)

// handleWorkers lists the workers a user may see: every team's worker to
// an admin, else the shared workers and those of the user's teams.
func (s *Server) handleWorkers(w http.ResponseWriter, r *http.Request, claims auth.Claims) {
	workers, err := s.store.Workers(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	loads, err := s.store.WorkerLoads(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := []concourse.Worker{}
	for _, wk := range workers {
		if wk.Team != "" && !claims.IsAdmin && !claims.CanRead(wk.Team) {
			continue
		}
		out = append(out, concourse.Worker{
			Name: wk.Name, Platform: wk.Platform, Tags: nonNil(wk.Tags), Team: wk.Team, State: wk.State,
			Version: wk.Version, StartTime: wk.StartTime.Unix(),
			ActiveContainers: loads[wk.Name].Containers, ActiveTasks: loads[wk.Name].Tasks,
			// fly -d shows these as where the worker is: Porter's steps run in
			// a namespace and their volumes are the blobstore's objects.
			GardenAddr:      "namespace/" + wk.Namespace,
			BaggageclaimURL: "s3://" + s.cfg.BlobstoreBucket,
			ResourceTypes:   s.engine.WorkerResourceTypes(wk.Name),
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// workerAction is land-worker, retire-worker or prune-worker: an admin's,
// or for a team's worker a member's of that team, as in Concourse.
func (s *Server) workerAction(act func(context.Context, string) error) func(http.ResponseWriter, *http.Request, auth.Claims) {
	return func(w http.ResponseWriter, r *http.Request, claims auth.Claims) {
		name := r.PathValue("worker_name")
		wk, err := s.store.Worker(r.Context(), name)
		if err == nil && !claims.IsAdmin && wk.Team != "" && !claims.Can(wk.Team, auth.ActionRead) {
			// Another team's worker is not there for this caller: the
			// same 404 as a name nobody has, or names could be probed.
			err = db.ErrNotFound
		}
		switch {
		case errors.Is(err, db.ErrNotFound):
			// Concourse's JSON-API 404, whose detail fly prints.
			s.fail(w, r, notFound("Worker Not Found Error", fmt.Sprintf("worker '%s' not found", name)))
			return
		case err != nil:
			s.fail(w, r, err)
			return
		}
		if !claims.IsAdmin && (wk.Team == "" || !claims.CanWrite(wk.Team)) {
			s.fail(w, r, withStatus(http.StatusForbidden, fmt.Errorf("not allowed to change worker %q", name)))
			return
		}
		err = act(r.Context(), name)
		switch {
		case errors.Is(err, db.ErrWorkerRunning):
			// fly prints the stderr field of a 400.
			writeJSON(w, http.StatusBadRequest, map[string]string{"stderr": db.ErrWorkerRunning.Error()})
		case errors.Is(err, db.ErrNotFound):
			// Concourse's JSON-API 404, whose detail fly prints.
			s.fail(w, r, notFound("Worker Not Found Error", fmt.Sprintf("worker '%s' not found", name)))
		case err != nil:
			s.fail(w, r, err)
		default:
			s.log.Info("worker changed by a person", "worker", name, "path", r.URL.Path, "user", claims.Name)
			w.WriteHeader(http.StatusOK)
		}
	}
}
