package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"

	"github.com/porter-ci/porter/pkg/atc/apiserver/apierr"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/httpreply"
)

// jobRequest is a request about one active job of a pipeline.
type jobRequest struct {
	pipelineRequest
	job db.Job
}

// pipelineJob finds the path's job in the pipeline h was given (404 if none, in
// Concourse's JSON-API error shape, which fly prints).
func (s *Server) pipelineJob(h func(http.ResponseWriter, *http.Request, jobRequest)) func(http.ResponseWriter, *http.Request, pipelineRequest) {
	return func(w http.ResponseWriter, r *http.Request, pr pipelineRequest) {
		name := r.PathValue("job_name")
		j, err := s.store.Job(r.Context(), pr.pipeline.ID, name)
		switch {
		case errors.Is(err, db.ErrNotFound):
			s.fail(w, r, apierr.NotFound("Job Not Found Error", fmt.Sprintf("Job with name '%s' not found.", name)))
			return
		case err != nil:
			s.fail(w, r, err)
			return
		}
		h(w, r, jobRequest{pipelineRequest: pr, job: j})
	}
}

// apiJob is a job's API shape: its config's inputs, outputs and groups,
// and its finished and next builds.
func apiJob(j db.Job, p db.Pipeline) concourse.Job {
	out := concourse.Job{ID: j.ID, Name: j.Name, TeamName: j.TeamName, PipelineID: j.PipelineID, PipelineName: j.PipelineName,
		Paused: j.Paused, PausedBy: j.PausedBy, PausedAt: unix(j.PausedAt)}
	var cfg concourse.JobConfig
	if err := json.Unmarshal(j.Config, &cfg); err == nil {
		out.DisableManualTrigger = cfg.DisableManualTrigger
		cfg.EachStep(func(s *concourse.Step) {
			resource := func(name string) string {
				if s.Resource != "" {
					return s.Resource
				}
				return name
			}
			switch {
			case s.Get != "":
				out.Inputs = append(out.Inputs, concourse.JobInput{Name: s.Get, Resource: resource(s.Get), Passed: s.Passed, Trigger: s.Trigger})
			case s.Put != "":
				out.Outputs = append(out.Outputs, concourse.JobOutput{Name: s.Put, Resource: resource(s.Put)})
			}
		})
	}
	for _, g := range apiPipeline(p).Groups {
		for _, pattern := range g.Jobs {
			// Group entries may be globs, as in Concourse.
			if ok, _ := path.Match(pattern, j.Name); ok {
				out.Groups = append(out.Groups, g.Name)
				break
			}
		}
	}
	for _, b := range []struct {
		from *db.Build
		to   **concourse.Build
	}{{j.FinishedBuild, &out.FinishedBuild}, {j.NextBuild, &out.NextBuild}} {
		if b.from != nil {
			ab := apiBuild(*b.from)
			ab.JobName, ab.PipelineID, ab.PipelineName = j.Name, int(j.PipelineID), j.PipelineName
			*b.to = &ab
		}
	}
	return out
}

// handleListJobs is `fly jobs`.
func (s *Server) handleListJobs(w http.ResponseWriter, r *http.Request, pr pipelineRequest) {
	jobs, err := s.store.Jobs(r.Context(), pr.pipeline.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := []concourse.Job{}
	for _, j := range jobs {
		out = append(out, apiJob(j, pr.pipeline))
	}
	httpreply.JSON(w, http.StatusOK, out)
}

// handleListAllJobs is Concourse's GET /api/v1/jobs, what its dashboard
// reads: the jobs of every pipeline the caller may see, in one answer.
func (s *Server) handleListAllJobs(w http.ResponseWriter, r *http.Request) {
	ps, err := s.visiblePipelines(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := []concourse.Job{}
	for _, p := range ps {
		jobs, err := s.store.Jobs(r.Context(), p.ID)
		if err != nil {
			s.fail(w, r, fmt.Errorf("jobs of pipeline %s/%s: %w", p.TeamName, p.Name, err))
			return
		}
		for _, j := range jobs {
			out = append(out, apiJob(j, p))
		}
	}
	httpreply.JSON(w, http.StatusOK, out)
}

func (s *Server) handleGetJob(w http.ResponseWriter, r *http.Request, jr jobRequest) {
	httpreply.JSON(w, http.StatusOK, apiJob(jr.job, jr.pipeline))
}

// handlePauseJob is `fly pause-job`.
func (s *Server) handlePauseJob(w http.ResponseWriter, r *http.Request, jr jobRequest) {
	s.changed(w, r, s.store.PauseJob(r.Context(), jr.job.ID, jr.claims.UserInfo().DisplayUserID))
}

// handleUnpauseJob is `fly unpause-job`.
func (s *Server) handleUnpauseJob(w http.ResponseWriter, r *http.Request, jr jobRequest) {
	s.changed(w, r, s.store.UnpauseJob(r.Context(), jr.job.ID))
}

// handleClearTaskCache is `fly clear-task-cache`: it deletes the caches of
// one task step of the job (or only the one at ?cache_path=) and says how
// many it removed.
func (s *Server) handleClearTaskCache(w http.ResponseWriter, r *http.Request, jr jobRequest) {
	step, cachePath := r.PathValue("step_name"), r.URL.Query().Get("cache_path")
	prefix, err := blobstore.TaskCachePrefix(jr.team.Name, blobstore.TaskCachePipeline(jr.pipeline.Name, jr.pipeline.InstanceVars), jr.job.Name, step)
	if err != nil {
		s.fail(w, r, apierr.BadRequest(err))
		return
	}
	var n int64
	if cachePath == "" {
		n, err = s.engine.ClearTaskCaches(r.Context(), prefix)
	} else {
		n, err = s.deleteCache(r, jr, step, cachePath)
	}
	if err != nil {
		s.fail(w, r, fmt.Errorf("clear the task caches of %s/%s step %s: %w", jr.pipeline.Name, jr.job.Name, step, err))
		return
	}
	s.log.InfoContext(r.Context(), "task caches cleared", "team", jr.team.Name, "pipeline", jr.pipeline.Name,
		"job", jr.job.Name, "step", step, "cache_path", cachePath, "removed", n)
	httpreply.JSON(w, http.StatusOK, map[string]int64{"caches_removed": n})
}

// deleteCache deletes one cache of a task step; 0 if there is none.
func (s *Server) deleteCache(r *http.Request, jr jobRequest, step, cachePath string) (int64, error) {
	key, err := blobstore.CheckedTaskCacheKey(jr.team.Name, blobstore.TaskCachePipeline(jr.pipeline.Name, jr.pipeline.InstanceVars), jr.job.Name, step, cachePath)
	if err != nil {
		return 0, apierr.BadRequest(err)
	}
	if _, err := s.blobs.Stat(r.Context(), key); errors.Is(err, blobstore.ErrNotFound) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	if err := s.blobs.Delete(r.Context(), key); err != nil {
		return 0, err
	}
	return 1, nil
}
