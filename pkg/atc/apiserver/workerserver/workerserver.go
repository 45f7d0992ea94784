// Package workerserver answers the worker routes of Concourse's API:
// fly workers, land-worker, retire-worker and prune-worker.
package workerserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/porter-ci/porter/pkg/atc/apiserver/apierr"
	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/httpreply"
)

// Store is the worker registry.
type Store interface {
	Worker(ctx context.Context, name string) (db.Worker, error)
	Workers(ctx context.Context) ([]db.Worker, error)
	WorkerLoads(ctx context.Context) (map[string]db.WorkerLoad, error)
	LandWorker(ctx context.Context, name string) error
	RetireWorker(ctx context.Context, name string) error
	PruneWorker(ctx context.Context, name string) error
}

// Server holds the handlers' parts; the API authenticates the caller.
type Server struct {
	Store Store
	// Bucket is the blobstore's bucket, shown as the workers' volumes.
	Bucket string
	// ResourceTypes are the base resource types a worker provides.
	ResourceTypes func(worker string) []concourse.WorkerResourceType
	Log           *slog.Logger
}

// tags are a worker's tags, [] rather than null.
func tags(t []string) []string {
	if t == nil {
		return []string{}
	}
	return t
}

// List lists the workers a user may see: every team's worker to
// an admin, else the shared workers and those of the user's teams.
func (s *Server) List(w http.ResponseWriter, r *http.Request, claims auth.Claims) {
	workers, err := s.Store.Workers(r.Context())
	if err != nil {
		apierr.Fail(w, r, s.Log, err)
		return
	}
	loads, err := s.Store.WorkerLoads(r.Context())
	if err != nil {
		apierr.Fail(w, r, s.Log, err)
		return
	}
	out := []concourse.Worker{}
	for _, wk := range workers {
		if wk.Team != "" && !claims.IsAdmin && !claims.CanRead(wk.Team) {
			continue
		}
		out = append(out, concourse.Worker{
			Name: wk.Name, Platform: wk.Platform, Tags: tags(wk.Tags), Team: wk.Team, State: wk.State,
			Version: wk.Version, StartTime: wk.StartTime.Unix(),
			ActiveContainers: loads[wk.Name].Pods, ActiveTasks: loads[wk.Name].Tasks,
			// fly -d shows these as where the worker is: Porter's steps run in
			// a namespace and their volumes are the blobstore's objects.
			GardenAddr:      "namespace/" + wk.Namespace,
			BaggageclaimURL: "s3://" + s.Bucket,
			ResourceTypes:   s.ResourceTypes(wk.Name),
		})
	}
	httpreply.JSON(w, http.StatusOK, out)
}

// Action is land-worker, retire-worker or prune-worker: an admin's,
// or for a team's worker a member's of that team, as in Concourse.
func (s *Server) Action(act func(context.Context, string) error) func(http.ResponseWriter, *http.Request, auth.Claims) {
	return func(w http.ResponseWriter, r *http.Request, claims auth.Claims) {
		name := r.PathValue("worker_name")
		wk, err := s.Store.Worker(r.Context(), name)
		if err == nil && !claims.IsAdmin && wk.Team != "" && !claims.Can(wk.Team, auth.ActionRead) {
			// Another team's worker is not there for this caller: the
			// same 404 as a name nobody has, or names could be probed.
			err = db.ErrNotFound
		}
		switch {
		case errors.Is(err, db.ErrNotFound):
			// Concourse's JSON-API 404, whose detail fly prints.
			apierr.Fail(w, r, s.Log, apierr.NotFound("Worker Not Found Error", fmt.Sprintf("worker '%s' not found", name)))
			return
		case err != nil:
			apierr.Fail(w, r, s.Log, err)
			return
		}
		if !claims.IsAdmin && (wk.Team == "" || !claims.CanWrite(wk.Team)) {
			apierr.Fail(w, r, s.Log, apierr.WithStatus(http.StatusForbidden, fmt.Errorf("not allowed to change worker %q", name)))
			return
		}
		err = act(r.Context(), name)
		switch {
		case errors.Is(err, db.ErrWorkerRunning):
			// fly prints the stderr field of a 400.
			httpreply.JSON(w, http.StatusBadRequest, map[string]string{"stderr": db.ErrWorkerRunning.Error()})
		case errors.Is(err, db.ErrNotFound):
			// Concourse's JSON-API 404, whose detail fly prints.
			apierr.Fail(w, r, s.Log, apierr.NotFound("Worker Not Found Error", fmt.Sprintf("worker '%s' not found", name)))
		case err != nil:
			apierr.Fail(w, r, s.Log, err)
		default:
			s.Log.Info("worker changed by a person", "worker", name, "path", r.URL.Path, "user", claims.Name)
			w.WriteHeader(http.StatusOK)
		}
	}
}
