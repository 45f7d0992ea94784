package atc

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
)

// jobRoutes are a job's builds: trigger-job, builds -j, watch -j -b,
// rerun-build.
func (s *Server) jobRoutes(mux *http.ServeMux) {
	const job = "/api/v1/teams/{team_name}/pipelines/{pipeline_name}/jobs/{job_name}"
	mux.HandleFunc("GET "+job+"/builds", s.job(auth.ActionRead, s.handleJobBuilds))
	mux.HandleFunc("POST "+job+"/builds", s.job(auth.ActionCreateJobBuild, s.handleTriggerJob))
	mux.HandleFunc("GET "+job+"/builds/{build_name}", s.job(auth.ActionRead, s.handleGetJobBuild))
	mux.HandleFunc("POST "+job+"/builds/{build_name}", s.job(auth.ActionCreateJobBuild, s.handleRerunJobBuild))
}

// job finds the path's job in a team the caller may do action in.
func (s *Server) job(action auth.Action, h func(http.ResponseWriter, *http.Request, auth.Claims, db.JobRef)) http.HandlerFunc {
	return s.team(action, func(w http.ResponseWriter, r *http.Request, claims auth.Claims, team db.Team) {
		pipeline, name := r.PathValue("pipeline_name"), r.PathValue("job_name")
		j, err := s.db.LookupJob(r.Context(), team.ID, pipeline, name)
		if err != nil {
			writeLookupError(w, err)
			return
		}
		h(w, r, claims, j)
	})
}

// apiJobBuild is a job's or a check's build in the API's shape.
func apiJobBuild(b db.JobBuild) concourse.Build {
	out := apiBuild(b.Build)
	out.JobName, out.ResourceName = b.JobName, b.ResourceName
	out.PipelineID, out.PipelineName = int(b.PipelineID), b.PipelineName
	return out
}

func (s *Server) handleTriggerJob(w http.ResponseWriter, r *http.Request, claims auth.Claims, j db.JobRef) {
	var cfg concourse.JobConfig
	if err := json.Unmarshal(j.Config, &cfg); err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Errorf("job %s: decode its config: %w", j.Name, err))
		return
	}
	if cfg.DisableManualTrigger {
		writeError(w, http.StatusConflict, fmt.Errorf("job %s/%s has manual triggering disabled", j.PipelineName, j.Name))
		return
	}
	b, err := s.db.CreateJobBuild(r.Context(), j.ID, claims.UserID, true, nil)
	if err != nil {
		writeLookupError(w, err)
		return
	}
	s.wakeScheduler()
	writeJSON(w, http.StatusOK, apiJobBuild(b))
}

func (s *Server) handleGetJobBuild(w http.ResponseWriter, r *http.Request, _ auth.Claims, j db.JobRef) {
	b, err := s.db.JobBuildByName(r.Context(), j.ID, r.PathValue("build_name"))
	if err != nil {
		writeLookupError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, apiJobBuild(b))
}

func (s *Server) handleRerunJobBuild(w http.ResponseWriter, r *http.Request, claims auth.Claims, j db.JobRef) {
	b, err := s.db.JobBuildByName(r.Context(), j.ID, r.PathValue("build_name"))
	if err != nil {
		writeLookupError(w, err)
		return
	}
	rerun, err := s.db.RerunJobBuild(r.Context(), b, claims.UserID)
	if err != nil {
		writeLookupError(w, err)
		return
	}
	s.wakeScheduler()
	writeJSON(w, http.StatusOK, apiJobBuild(rerun))
}

// handleJobBuilds pages a job's builds, newest first, with Concourse's
// Link headers for the next (older) and previous (newer) pages.
func (s *Server) handleJobBuilds(w http.ResponseWriter, r *http.Request, _ auth.Claims, j db.JobRef) {
	q := r.URL.Query()
	f := db.BuildFilter{}
	if err := parsePage(q, &f); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	limit, err := pageLimit(q, 100)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	f.Limit = limit + 1 // one more says whether an older page exists
	bs, err := s.db.JobBuilds(r.Context(), j.ID, f)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	older := len(bs) > limit
	if older {
		if f.After != 0 && f.Before == 0 {
			bs = bs[1:] // paging towards the newest: the extra one is the newest
		} else {
			bs = bs[:limit]
		}
	}
	out := []concourse.Build{}
	for _, b := range bs {
		out = append(out, apiJobBuild(b))
	}
	if len(bs) > 0 {
		base := fmt.Sprintf("%s/api/v1/teams/%s/pipelines/%s/jobs/%s/builds", s.cfg.ExternalURL,
			url.PathEscape(j.TeamName), url.PathEscape(j.PipelineName), url.PathEscape(j.Name))
		newest, oldest := bs[0].ID, bs[len(bs)-1].ID
		if f.Before != 0 || (f.After != 0 && older) {
			addLink(w, base, "from", newest+1, limit, "previous")
		}
		if older || f.After != 0 {
			addLink(w, base, "to", oldest-1, limit, "next")
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func addLink(w http.ResponseWriter, base, param string, id int64, limit int, rel string) {
	if id <= 0 {
		return
	}
	w.Header().Add("Link", fmt.Sprintf(`<%s?%s=%d&limit=%d>; rel="%s"`, base, param, id, limit, rel))
}

// writeLookupError answers an error of a pipeline lookup. fly reads a 404's
// body as JSON-API errors and prints their details, so a missing
// pipeline, job, resource, build or version is named that way.
func writeLookupError(w http.ResponseWriter, err error) {
	if errors.Is(err, db.ErrNotFound) {
		writeJSON(w, http.StatusNotFound, map[string][]map[string]string{"errors": {{"title": "not found", "detail": err.Error()}}})
		return
	}
	writeError(w, errorCode(err), err)
}

// pageLimit reads limit=, def when absent.
func pageLimit(q url.Values, def int) (int, error) {
	v := q.Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, errors.New("limit=" + strconv.Quote(v) + ": want a positive number")
	}
	return n, nil
}
