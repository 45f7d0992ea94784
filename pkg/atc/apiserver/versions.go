package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/porter-ci/porter/pkg/atc/apiserver/apierr"
	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/httpreply"
)

// versionRoutes are a resource's versions and checks: resource-versions,
// check-resource, pin-resource, unpin-resource, enable/disable-resource-version.
func (s *Server) versionRoutes(mux *router) {
	const res = "/api/v1/teams/{team_name}/pipelines/{pipeline_name}/resources/{resource_name}"
	// An exposed pipeline's versions are listed to anyone, as in Concourse;
	// their metadata only when the resource is public too.
	mux.handle("GET "+res+"/versions", s.publicPipeline(s.pipelineResource(s.handleVersions)))
	// The builds a version went into and came out of (the web UI's
	// resource page; fly does not ask): anyone may read them of an
	// exposed pipeline, as in Concourse.
	mux.handle("GET "+res+"/versions/{version_id}/input_to", s.publicPipeline(s.pipelineResource(s.handleVersionBuilds(true))))
	mux.handle("GET "+res+"/versions/{version_id}/output_of", s.publicPipeline(s.pipelineResource(s.handleVersionBuilds(false))))
	mux.handle("POST "+res+"/check", s.resource(auth.ActionCheckResource, s.handleCheckResource))
	// No login: the resource's webhook_token is the credential.
	mux.handle("POST "+res+"/check/webhook", s.webhooks.CheckResource)
	// Pins and version switches change what jobs run with: the check
	// resource permission (pipeline operators and up) covers them.
	mux.handle("PUT "+res+"/versions/{version_id}/pin", s.resource(auth.ActionCheckResource, s.handlePinVersion))
	mux.handle("PUT "+res+"/versions/{version_id}/enable", s.resource(auth.ActionCheckResource, s.handleEnableVersion(true)))
	mux.handle("PUT "+res+"/versions/{version_id}/disable", s.resource(auth.ActionCheckResource, s.handleEnableVersion(false)))
	mux.handle("PUT "+res+"/unpin", s.resource(auth.ActionCheckResource, s.handleUnpin))
	mux.handle("PUT "+res+"/pin_comment", s.resource(auth.ActionCheckResource, s.handlePinComment))
}

// resource finds the path's pipeline and resource in a team the caller may
// do action in: the same lookup, and the same 404s, as every resource route.
func (s *Server) resource(action auth.Action, h func(http.ResponseWriter, *http.Request, resourceRequest)) http.HandlerFunc {
	return s.pipeline(action, s.pipelineResource(h))
}

func apiVersion(v db.Version) concourse.ResourceVersion {
	return concourse.ResourceVersion{ID: v.ID, Version: v.Version, Metadata: v.Metadata, Enabled: v.Enabled}
}

// handleVersions pages a resource's versions, newest first; filter=k:v
// keeps those with that field (fly pin-resource looks a version up so).
func (s *Server) handleVersions(w http.ResponseWriter, r *http.Request, rr resourceRequest) {
	q := r.URL.Query()
	var p db.VersionPage
	for _, b := range []struct {
		name string
		dst  *int64
	}{{"from", &p.From}, {"to", &p.To}} {
		if v := q.Get(b.name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				s.fail(w, r, apierr.BadRequest(fmt.Errorf("%s=%q: want a version id", b.name, v)))
				return
			}
			*b.dst = n
		}
	}
	limit, err := pageLimit(q, 100)
	if err != nil {
		s.fail(w, r, apierr.BadRequest(err))
		return
	}
	p.Limit = limit
	for _, f := range q["filter"] {
		k, v, ok := strings.Cut(f, ":")
		if !ok || k == "" {
			s.fail(w, r, apierr.BadRequest(fmt.Errorf("filter=%q: want key:value", f)))
			return
		}
		if p.Filter == nil {
			p.Filter = map[string]string{}
		}
		p.Filter[k] = v
	}
	vs, older, newer, err := s.store.Versions(r.Context(), rr.resource.ID, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	hideMetadata := !rr.claims.CanRead(rr.team.Name) && !resourceIsPublic(rr.resource)
	out := []concourse.ResourceVersion{}
	for _, v := range vs {
		av := apiVersion(v)
		if hideMetadata {
			av.Metadata = nil
		}
		out = append(out, av)
	}
	if len(vs) > 0 {
		base := fmt.Sprintf("%s/api/v1/teams/%s/pipelines/%s/resources/%s/versions", s.cfg.ExternalURL,
			url.PathEscape(rr.resource.TeamName), url.PathEscape(rr.resource.PipelineName), url.PathEscape(rr.resource.Name))
		// The neighbours of the page's ends, found through the page's own
		// bounds: one more version each way.
		if older {
			next, _, _, err := s.store.Versions(r.Context(), rr.resource.ID, db.VersionPage{Limit: 2, To: vs[len(vs)-1].ID, Filter: p.Filter})
			if err == nil && len(next) == 2 {
				addLink(w, base, "to", next[1].ID, limit, "next")
			}
		}
		if newer {
			prev, _, _, err := s.store.Versions(r.Context(), rr.resource.ID, db.VersionPage{Limit: 2, From: vs[0].ID, Filter: p.Filter})
			if err == nil && len(prev) == 2 {
				addLink(w, base, "from", prev[0].ID, limit, "previous")
			}
		}
	}
	httpreply.JSON(w, http.StatusOK, out)
}

// checkRequest is the body of POST .../check.
type checkRequest struct {
	From    map[string]string `json:"from"`
	Shallow bool              `json:"shallow"`
}

// handleCheckResource starts a check of the resource now and answers its
// build, which fly then watches.
func (s *Server) handleCheckResource(w http.ResponseWriter, r *http.Request, rr resourceRequest) {
	var req checkRequest
	if err := decodeBody(w, r, maxJSONBody, &req, "the check request", true); err != nil {
		s.fail(w, r, err)
		return
	}
	ref, err := s.store.LookupPipelineResource(r.Context(), rr.pipeline.ID, rr.resource.Name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	b, err := s.engine.StartCheck(r.Context(), ref, req.From)
	if err != nil {
		if b.ID == 0 {
			s.fail(w, r, err)
			return
		}
		s.log.Warn("check-resource", "resource", rr.resource.Name, "err", err)
	}
	httpreply.JSON(w, http.StatusCreated, apiJobBuild(b))
}

func versionID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("version_id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, apierr.BadRequest(errors.New("version id must be a positive number"))
	}
	return id, nil
}

// versionErr names the version an error is about (fly prints a 404's
// detail); nil stays nil.
func versionErr(rr resourceRequest, id int64, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("version %d of resource %s/%s: %w", id, rr.pipeline.Name, rr.resource.Name, err)
}

func (s *Server) handlePinVersion(w http.ResponseWriter, r *http.Request, rr resourceRequest) {
	id, err := versionID(r)
	if err == nil {
		err = versionErr(rr, id, s.store.PinVersion(r.Context(), rr.resource.ID, id))
	}
	s.changed(w, r, err)
}

func (s *Server) handleEnableVersion(enabled bool) func(http.ResponseWriter, *http.Request, resourceRequest) {
	return func(w http.ResponseWriter, r *http.Request, rr resourceRequest) {
		id, err := versionID(r)
		if err == nil {
			err = versionErr(rr, id, s.store.SetVersionEnabled(r.Context(), rr.resource.ID, id, enabled))
		}
		s.changed(w, r, err)
	}
}

func (s *Server) handleUnpin(w http.ResponseWriter, r *http.Request, rr resourceRequest) {
	s.changed(w, r, s.store.UnpinResource(r.Context(), rr.resource.ID))
}

func (s *Server) handlePinComment(w http.ResponseWriter, r *http.Request, rr resourceRequest) {
	var req struct {
		Comment string `json:"pin_comment"`
	}
	if err := decodeBody(w, r, maxJSONBody, &req, "the pin comment", false); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.store.SetPinComment(r.Context(), rr.resource.ID, req.Comment); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// handleVersionBuilds lists the job builds that had the path's version as
// an input (input) or produced it: Concourse's input_to and output_of.
func (s *Server) handleVersionBuilds(input bool) func(http.ResponseWriter, *http.Request, resourceRequest) {
	return func(w http.ResponseWriter, r *http.Request, rr resourceRequest) {
		id, err := versionID(r)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if _, err := s.store.VersionByID(r.Context(), rr.resource.ID, id); err != nil {
			s.fail(w, r, versionErr(rr, id, err))
			return
		}
		builds, err := s.store.VersionBuilds(r.Context(), rr.resource.ID, id, input)
		if err != nil {
			s.fail(w, r, versionErr(rr, id, err))
			return
		}
		out := make([]concourse.Build, 0, len(builds))
		for _, b := range builds {
			out = append(out, apiJobBuild(b))
		}
		httpreply.JSON(w, http.StatusOK, out)
	}
}

// resourceIsPublic is the resource config's `public: true`.
func resourceIsPublic(r db.Resource) bool {
	var cfg concourse.ResourceConfig
	return json.Unmarshal(r.Config, &cfg) == nil && cfg.Public
}
