package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"

	"github.com/porter-ci/porter/pkg/atc/apiserver/apierr"
	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/httpreply"
)

// jobRoutes are a job's builds: trigger-job, builds -j, watch -j -b,
// rerun-build.
func (s *Server) jobRoutes(mux *router) {
	const job = "/api/v1/teams/{team_name}/pipelines/{pipeline_name}/jobs/{job_name}"
	// An exposed pipeline's job builds are listed to anyone, as in Concourse.
	mux.handle("GET "+job+"/builds", s.publicPipeline(s.pipelineJob(s.handleJobBuilds)))
	mux.handle("POST "+job+"/builds", s.job(auth.ActionCreateJobBuild, s.handleTriggerJob))
	mux.handle("GET "+job+"/builds/{build_name}", s.publicPipeline(s.pipelineJob(s.handleGetJobBuild)))
	mux.handle("POST "+job+"/builds/{build_name}", s.job(auth.ActionCreateJobBuild, s.handleRerunJobBuild))
}

// job finds the path's pipeline and job in a team the caller may do
// action in: the same lookup, and the same 404s, as every job route.
func (s *Server) job(action auth.Action, h func(http.ResponseWriter, *http.Request, jobRequest)) http.HandlerFunc {
	return s.pipeline(action, s.pipelineJob(h))
}

// apiJobBuild is a job's or a check's build in the API's shape.
func apiJobBuild(b db.JobBuild) concourse.Build {
	out := apiBuild(b.Build)
	out.JobName, out.ResourceName = b.JobName, b.ResourceName
	out.PipelineID, out.PipelineName = int(b.PipelineID), b.PipelineName
	out.PipelineInstanceVars = b.PipelineInstanceVars
	return out
}

// commented is b's API shape with its comment when show: Concourse shows it
// to the build's team and, for a job with `public: true`, to anyone.
func commented(b db.JobBuild, show bool) concourse.Build {
	out := apiJobBuild(b)
	if show {
		out.Comment = b.Comment
	}
	return out
}

// showsComments tells whether the reader of jr sees its builds' comments.
func showsComments(jr jobRequest) bool {
	var cfg concourse.JobConfig
	return jr.claims.CanRead(jr.job.TeamName) || json.Unmarshal(jr.job.Config, &cfg) == nil && cfg.Public
}

func (s *Server) handleTriggerJob(w http.ResponseWriter, r *http.Request, jr jobRequest) {
	var cfg concourse.JobConfig
	if err := json.Unmarshal(jr.job.Config, &cfg); err != nil {
		s.fail(w, r, fmt.Errorf("job %s: decode its config: %w", jr.job.Name, err))
		return
	}
	if cfg.DisableManualTrigger {
		s.fail(w, r, apierr.WithStatus(http.StatusConflict, fmt.Errorf("job %s/%s has manual triggering disabled", jr.job.PipelineName, jr.job.Name)))
		return
	}
	b, err := s.store.CreateJobBuild(r.Context(), jr.job.ID, jr.claims.UserID, true, nil)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.engine.WakeScheduler()
	httpreply.JSON(w, http.StatusOK, apiJobBuild(b))
}

func (s *Server) handleGetJobBuild(w http.ResponseWriter, r *http.Request, jr jobRequest) {
	b, err := s.jobBuild(r, jr)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httpreply.JSON(w, http.StatusOK, commented(b, showsComments(jr)))
}

// jobBuild is the path's build of the job; its errors name it (fly prints
// a 404's detail).
func (s *Server) jobBuild(r *http.Request, jr jobRequest) (db.JobBuild, error) {
	name := r.PathValue("build_name")
	b, err := s.store.JobBuildByName(r.Context(), jr.job.ID, name)
	if err != nil {
		return db.JobBuild{}, fmt.Errorf("build %s of job %s/%s: %w", name, jr.pipeline.Name, jr.job.Name, err)
	}
	return b, nil
}

func (s *Server) handleRerunJobBuild(w http.ResponseWriter, r *http.Request, jr jobRequest) {
	b, err := s.jobBuild(r, jr)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rerun, err := s.store.RerunJobBuild(r.Context(), b, jr.claims.UserID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.engine.WakeScheduler()
	httpreply.JSON(w, http.StatusOK, apiJobBuild(rerun))
}

// handleResumeBuild answers the build that resumes the path's build.
func (s *Server) handleResumeBuild(w http.ResponseWriter, r *http.Request, claims auth.Claims, b db.Build) {
	resumed, err := s.engine.ResumeBuild(r.Context(), b, claims.UserID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httpreply.JSON(w, http.StatusOK, apiJobBuild(resumed))
}

// handleJobBuilds pages a job's builds, newest first, with Concourse's
// Link headers for the next (older) and previous (newer) pages.
func (s *Server) handleJobBuilds(w http.ResponseWriter, r *http.Request, jr jobRequest) {
	q := r.URL.Query()
	f := db.BuildFilter{}
	if err := parsePage(q, &f); err != nil {
		s.fail(w, r, apierr.BadRequest(err))
		return
	}
	limit, err := pageLimit(q, 100)
	if err != nil {
		s.fail(w, r, apierr.BadRequest(err))
		return
	}
	f.Limit = limit + 1 // one more says whether an older page exists
	bs, err := s.store.JobBuilds(r.Context(), jr.job.ID, f)
	if err != nil {
		s.fail(w, r, err)
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
	show := showsComments(jr)
	for _, b := range bs {
		out = append(out, commented(b, show))
	}
	if len(bs) > 0 {
		base := fmt.Sprintf("%s/api/v1/teams/%s/pipelines/%s/jobs/%s/builds", s.cfg.ExternalURL,
			url.PathEscape(jr.job.TeamName), url.PathEscape(jr.job.PipelineName), url.PathEscape(jr.job.Name))
		newest, oldest := bs[0].ID, bs[len(bs)-1].ID
		if f.Before != 0 || (f.After != 0 && older) {
			addLink(w, base, "from", newest+1, limit, "previous")
		}
		if older || f.After != 0 {
			addLink(w, base, "to", oldest-1, limit, "next")
		}
	}
	httpreply.JSON(w, http.StatusOK, out)
}

func addLink(w http.ResponseWriter, base, param string, id int64, limit int, rel string) {
	if id <= 0 {
		return
	}
	w.Header().Add("Link", fmt.Sprintf(`<%s?%s=%d&limit=%d>; rel="%s"`, base, param, id, limit, rel))
}

// maxPageLimit is more rows than any page holds; a larger limit is this
// one, so that limit+1 (whether an older page exists) cannot overflow.
const maxPageLimit = math.MaxInt32

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
	return min(n, maxPageLimit), nil
}
