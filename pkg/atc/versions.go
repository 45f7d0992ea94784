package atc

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
)

// versionRoutes are a resource's versions and checks: resource-versions,
// check-resource, pin-resource, unpin-resource, enable/disable-resource-version.
func (s *Server) versionRoutes(mux *http.ServeMux) {
	const res = "/api/v1/teams/{team_name}/pipelines/{pipeline_name}/resources/{resource_name}"
	mux.HandleFunc("GET "+res+"/versions", s.resource(auth.ActionRead, s.handleVersions))
	mux.HandleFunc("POST "+res+"/check", s.resource(auth.ActionCheckResource, s.handleCheckResource))
	// Pins and version switches change what jobs run with: the check
	// resource permission (pipeline operators and up) covers them.
	mux.HandleFunc("PUT "+res+"/versions/{version_id}/pin", s.resource(auth.ActionCheckResource, s.handlePinVersion))
	mux.HandleFunc("PUT "+res+"/versions/{version_id}/enable", s.resource(auth.ActionCheckResource, s.handleEnableVersion(true)))
	mux.HandleFunc("PUT "+res+"/versions/{version_id}/disable", s.resource(auth.ActionCheckResource, s.handleEnableVersion(false)))
	mux.HandleFunc("PUT "+res+"/unpin", s.resource(auth.ActionCheckResource, s.handleUnpin))
	mux.HandleFunc("PUT "+res+"/pin_comment", s.resource(auth.ActionCheckResource, s.handlePinComment))
}

// resource finds the path's resource in a team the caller may do action in.
func (s *Server) resource(action auth.Action, h func(http.ResponseWriter, *http.Request, auth.Claims, db.ResourceRef)) http.HandlerFunc {
	return s.team(action, func(w http.ResponseWriter, r *http.Request, claims auth.Claims, team db.Team) {
		pipeline, name := r.PathValue("pipeline_name"), r.PathValue("resource_name")
		res, err := s.db.LookupResource(r.Context(), team.ID, pipeline, name)
		if err != nil {
			writeLookupError(w, err)
			return
		}
		h(w, r, claims, res)
	})
}

func apiVersion(v db.Version) concourse.ResourceVersion {
	return concourse.ResourceVersion{ID: v.ID, Version: v.Version, Metadata: v.Metadata, Enabled: v.Enabled}
}

// handleVersions pages a resource's versions, newest first; filter=k:v
// keeps those with that field (fly pin-resource looks a version up so).
func (s *Server) handleVersions(w http.ResponseWriter, r *http.Request, _ auth.Claims, res db.ResourceRef) {
	q := r.URL.Query()
	var p db.VersionPage
	for _, b := range []struct {
		name string
		dst  *int64
	}{{"from", &p.From}, {"to", &p.To}} {
		if v := q.Get(b.name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				writeError(w, http.StatusBadRequest, fmt.Errorf("%s=%q: want a version id", b.name, v))
				return
			}
			*b.dst = n
		}
	}
	limit, err := pageLimit(q, 100)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	p.Limit = limit
	for _, f := range q["filter"] {
		k, v, ok := strings.Cut(f, ":")
		if !ok || k == "" {
			writeError(w, http.StatusBadRequest, fmt.Errorf("filter=%q: want key:value", f))
			return
		}
		if p.Filter == nil {
			p.Filter = map[string]string{}
		}
		p.Filter[k] = v
	}
	vs, older, newer, err := s.db.Versions(r.Context(), res.ID, p)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	out := []concourse.ResourceVersion{}
	for _, v := range vs {
		out = append(out, apiVersion(v))
	}
	if len(vs) > 0 {
		base := fmt.Sprintf("%s/api/v1/teams/%s/pipelines/%s/resources/%s/versions", s.cfg.ExternalURL,
			url.PathEscape(res.TeamName), url.PathEscape(res.PipelineName), url.PathEscape(res.Name))
		// The neighbours of the page's ends, found through the page's own
		// bounds: one more version each way.
		if older {
			next, _, _, err := s.db.Versions(r.Context(), res.ID, db.VersionPage{Limit: 2, To: vs[len(vs)-1].ID, Filter: p.Filter})
			if err == nil && len(next) == 2 {
				addLink(w, base, "to", next[1].ID, limit, "next")
			}
		}
		if newer {
			prev, _, _, err := s.db.Versions(r.Context(), res.ID, db.VersionPage{Limit: 2, From: vs[0].ID, Filter: p.Filter})
			if err == nil && len(prev) == 2 {
				addLink(w, base, "from", prev[0].ID, limit, "previous")
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// checkRequest is the body of POST .../check.
type checkRequest struct {
	From    map[string]string `json:"from"`
	Shallow bool              `json:"shallow"`
}

// handleCheckResource starts a check of the resource now and answers its
// build, which fly then watches.
func (s *Server) handleCheckResource(w http.ResponseWriter, r *http.Request, _ auth.Claims, res db.ResourceRef) {
	var req checkRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("read the check request: %w", err))
		return
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Errorf("decode the check request: %w", err))
			return
		}
	}
	b, err := s.sch.checker.StartCheck(r.Context(), res, req.From)
	if err != nil {
		if b.ID == 0 {
			writeLookupError(w, err)
			return
		}
		s.log.Warn("check-resource", "resource", res.Name, "err", err)
	}
	writeJSON(w, http.StatusCreated, apiJobBuild(b))
}

func versionID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("version_id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, badRequest{errors.New("version id must be a positive number")}
	}
	return id, nil
}

func (s *Server) handlePinVersion(w http.ResponseWriter, r *http.Request, _ auth.Claims, res db.ResourceRef) {
	id, err := versionID(r)
	if err == nil {
		err = s.db.PinVersion(r.Context(), res.ID, id)
	}
	if err != nil {
		writeLookupError(w, err)
		return
	}
	s.wakeScheduler()
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handleEnableVersion(enabled bool) func(http.ResponseWriter, *http.Request, auth.Claims, db.ResourceRef) {
	return func(w http.ResponseWriter, r *http.Request, _ auth.Claims, res db.ResourceRef) {
		id, err := versionID(r)
		if err == nil {
			err = s.db.SetVersionEnabled(r.Context(), res.ID, id, enabled)
		}
		if err != nil {
			writeLookupError(w, err)
			return
		}
		s.wakeScheduler()
		w.WriteHeader(http.StatusOK)
	}
}

func (s *Server) handleUnpin(w http.ResponseWriter, r *http.Request, _ auth.Claims, res db.ResourceRef) {
	if err := s.db.UnpinResource(r.Context(), res.ID); err != nil {
		writeLookupError(w, err)
		return
	}
	s.wakeScheduler()
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handlePinComment(w http.ResponseWriter, r *http.Request, _ auth.Claims, res db.ResourceRef) {
	var req struct {
		Comment string `json:"pin_comment"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("decode the pin comment: %w", err))
		return
	}
	if err := s.db.SetPinComment(r.Context(), res.ID, req.Comment); err != nil {
		writeLookupError(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}
