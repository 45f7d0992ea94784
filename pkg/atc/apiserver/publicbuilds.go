package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/porter-ci/porter/pkg/atc/apiserver/apierr"
	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
)

// publicBuildRead is a read of the path's build that, as in Concourse,
// anyone may make of a job's build in an exposed pipeline: the build
// itself for any job, and (publicJob) its plan, events and artifacts only
// for a job with `public: true`. Anyone else needs a role in the build's
// team: 401 without a token, 403 with one.
func (s *Server) publicBuildRead(publicJob bool, h func(http.ResponseWriter, *http.Request, db.Build)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(r.PathValue("build_id"), 10, 64)
		if err != nil || id <= 0 {
			s.fail(w, r, apierr.BadRequest(errors.New("build id must be a positive number")))
			return
		}
		b, err := s.store.Build(r.Context(), id)
		if err != nil {
			s.fail(w, r, fmt.Errorf("build %d: %w", id, err))
			return
		}
		claims, authed := auth.FromContext(r.Context())
		if authed && claims.Can(b.TeamName, auth.ActionRead) {
			h(w, r, b)
			return
		}
		ok, err := s.buildIsPublic(r, b, publicJob)
		switch {
		case err != nil:
			s.fail(w, r, fmt.Errorf("build %d: %w", id, err))
		case ok:
			h(w, r, b)
		case !authed:
			s.fail(w, r, apierr.Unauthenticated(r))
		default:
			s.fail(w, r, apierr.Forbidden(fmt.Sprintf("build %d belongs to a team you are not allowed to %s in", id, auth.ActionRead)))
		}
	}
}

// buildIsPublic tells whether b is a job's build in an exposed pipeline
// (and, with publicJob, of a job with `public: true`). One-off builds and
// checks' builds never are.
func (s *Server) buildIsPublic(r *http.Request, b db.Build, publicJob bool) (bool, error) {
	jb, err := s.store.JobBuildByID(r.Context(), b.ID)
	if err != nil {
		return false, err
	}
	if jb.PipelineID == 0 || jb.JobID == 0 {
		return false, nil
	}
	p, err := s.store.PipelineByID(r.Context(), jb.PipelineID)
	if errors.Is(err, db.ErrNotFound) {
		return false, nil
	}
	if err != nil || !p.Public || p.TeamID != b.TeamID {
		return false, err
	}
	if !publicJob {
		return true, nil
	}
	j, err := s.store.Job(r.Context(), p.ID, jb.JobName)
	if errors.Is(err, db.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return jobIsPublic(j), nil
}

// jobIsPublic is the job config's `public: true`.
func jobIsPublic(j db.Job) bool {
	var cfg concourse.JobConfig
	return json.Unmarshal(j.Config, &cfg) == nil && cfg.Public
}
