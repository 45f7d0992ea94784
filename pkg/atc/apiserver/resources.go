package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/porter-ci/porter/pkg/atc/apiserver/apierr"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/httpreply"
)

// resourceRequest is a request about one active resource of a pipeline.
type resourceRequest struct {
	pipelineRequest
	resource db.Resource
}

// pipelineResource finds the path's resource in the pipeline h was given (404 if
// none, in Concourse's JSON-API error shape).
func (s *Server) pipelineResource(h func(http.ResponseWriter, *http.Request, resourceRequest)) func(http.ResponseWriter, *http.Request, pipelineRequest) {
	return func(w http.ResponseWriter, r *http.Request, pr pipelineRequest) {
		name := r.PathValue("resource_name")
		res, err := s.store.Resource(r.Context(), pr.pipeline.ID, name)
		switch {
		case errors.Is(err, db.ErrNotFound):
			s.fail(w, r, apierr.NotFound("Resource Not Found Error", fmt.Sprintf("Resource with name '%s' not found.", name)))
			return
		case err != nil:
			s.fail(w, r, err)
			return
		}
		h(w, r, resourceRequest{pipelineRequest: pr, resource: res})
	}
}

// apiResource is a resource's API shape; check is its last check build,
// if any (what `fly resources` shows as the check status).
func apiResource(res db.Resource, check *db.Build) concourse.Resource {
	out := concourse.Resource{ID: res.ID, Name: res.Name, PipelineID: res.PipelineID, PipelineName: res.PipelineName,
		TeamName: res.TeamName, Type: res.Type, LastChecked: unix(res.LastCheckEnd), PinComment: res.PinComment}
	var cfg concourse.ResourceConfig
	if err := json.Unmarshal(res.Config, &cfg); err == nil {
		out.Icon = cfg.Icon
		if cfg.Version != nil {
			out.PinnedVersion, out.PinnedInConfig = cfg.Version, true
		}
	}
	if out.PinnedVersion == nil && len(res.APIPinnedVersion) > 0 {
		var v map[string]string
		if err := json.Unmarshal(res.APIPinnedVersion, &v); err == nil {
			out.PinnedVersion = v
		}
	}
	if check != nil {
		b := apiBuild(*check)
		b.ResourceName, b.PipelineID, b.PipelineName = res.Name, int(res.PipelineID), res.PipelineName
		out.Build = &b
	}
	return out
}

// resourceWithCheck presents a resource with its last check build.
func (s *Server) resourceWithCheck(r *http.Request, res db.Resource) (concourse.Resource, error) {
	if res.LastCheckBuild == 0 {
		return apiResource(res, nil), nil
	}
	b, err := s.store.Build(r.Context(), res.LastCheckBuild)
	switch {
	case errors.Is(err, db.ErrNotFound):
		return apiResource(res, nil), nil
	case err != nil:
		return concourse.Resource{}, err
	}
	return apiResource(res, &b), nil
}

// handleListResources is `fly resources`.
func (s *Server) handleListResources(w http.ResponseWriter, r *http.Request, pr pipelineRequest) {
	s.replyResources(w, r, []db.Pipeline{pr.pipeline})
}

// handleListAllResources is Concourse's GET /api/v1/resources: the visible
// pipelines' resources (the dashboard marks those whose checks fail).
func (s *Server) handleListAllResources(w http.ResponseWriter, r *http.Request) {
	ps, err := s.visiblePipelines(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.replyResources(w, r, ps)
}

// replyResources answers the pipelines' resources with their last checks,
// in two queries whatever their number (the dashboard asks for all).
func (s *Server) replyResources(w http.ResponseWriter, r *http.Request, ps []db.Pipeline) {
	ids := make([]int64, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	rs, err := s.store.ResourcesOfPipelines(r.Context(), ids)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var checks []int64
	for _, res := range rs {
		if res.LastCheckBuild != 0 {
			checks = append(checks, res.LastCheckBuild)
		}
	}
	builds := map[int64]db.Build{}
	if len(checks) > 0 {
		if builds, err = s.store.BuildsByID(r.Context(), checks); err != nil {
			s.fail(w, r, fmt.Errorf("the resources' last checks: %w", err))
			return
		}
	}
	out := make([]concourse.Resource, 0, len(rs))
	for _, res := range rs {
		var check *db.Build
		if b, ok := builds[res.LastCheckBuild]; ok {
			check = &b
		}
		out = append(out, apiResource(res, check))
	}
	httpreply.JSON(w, http.StatusOK, out)
}

func (s *Server) handleGetResource(w http.ResponseWriter, r *http.Request, rr resourceRequest) {
	a, err := s.resourceWithCheck(r, rr.resource)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httpreply.JSON(w, http.StatusOK, a)
}

// handleClearResourceCache is `fly clear-resource-cache`: the next get of
// any of the resource's versions runs again.
func (s *Server) handleClearResourceCache(w http.ResponseWriter, r *http.Request, rr resourceRequest) {
	var in struct {
		Version map[string]string `json:"version"`
	}
	if err := decodeBody(w, r, maxJSONBody, &in, "the version", true); err != nil {
		s.fail(w, r, err)
		return
	}
	var n int64
	var err error
	if len(in.Version) > 0 {
		// -v: that version's caches only (the version exactly).
		n, err = s.store.DeleteResourceVersionCaches(r.Context(), rr.resource.ID, in.Version)
	} else {
		n, err = s.store.DeleteResourceCaches(r.Context(), rr.resource.ID)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.InfoContext(r.Context(), "resource caches cleared", "team", rr.team.Name, "pipeline", rr.pipeline.Name,
		"resource", rr.resource.Name, "removed", n)
	httpreply.JSON(w, http.StatusOK, map[string]int64{"caches_removed": n})
}
