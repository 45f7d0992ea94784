package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/porter-ci/porter/pkg/atc/apiserver/apierr"
	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/creds/credcheck"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/httpreply"
	"github.com/porter-ci/porter/pkg/names"
)

// configVersionHeader carries a pipeline's config version: GET config
// answers it, and set-pipeline sends it back so that a save over a change
// made meanwhile fails.
const configVersionHeader = "X-Concourse-Config-Version"

// maxConfigSize bounds a pipeline config upload.
const maxConfigSize = 4 << 20

// pipelineRequest is a request about one existing pipeline.
type pipelineRequest struct {
	claims   auth.Claims // zero for an anonymous reader of a public pipeline
	team     db.Team
	pipeline db.Pipeline
}

// pipeline needs a token allowed to do action in the path's team, and
// finds the path's pipeline there (404 if none). Pipelines of teams the
// caller has no role in are not even looked up.
func (s *Server) pipeline(action auth.Action, h func(http.ResponseWriter, *http.Request, pipelineRequest)) http.HandlerFunc {
	return s.team(action, func(w http.ResponseWriter, r *http.Request, claims auth.Claims, team db.Team) {
		ref, err := pipelineRef(r)
		if err != nil {
			s.fail(w, r, apierr.BadRequest(err))
			return
		}
		p, err := s.store.PipelineInstance(r.Context(), team.ID, ref)
		switch {
		case errors.Is(err, db.ErrNotFound):
			s.fail(w, r, pipelineNotFound(team.Name, ref.String()))
			return
		case err != nil:
			s.fail(w, r, err)
			return
		}
		if p.Archived && rejectedWhenArchived(action) {
			s.fail(w, r, apierr.WithStatus(http.StatusConflict, fmt.Errorf("action not allowed for an archived pipeline: set pipeline %q again first", p.Name)))
			return
		}
		h(w, r, pipelineRequest{claims: claims, team: team, pipeline: p})
	})
}

// rejectedWhenArchived are the actions Concourse refuses on an archived
// pipeline (its reject-archived wrapper): what would make it run again.
func rejectedWhenArchived(a auth.Action) bool {
	switch a {
	case auth.ActionPausePipeline, auth.ActionUnpausePipeline, auth.ActionCreateJobBuild, auth.ActionScheduleJob, auth.ActionCheckResource:
		return true
	}
	return false
}

// publicPipeline is a read of the path's pipeline: anyone may read an
// exposed pipeline, as in Concourse; otherwise it is 401 without a token
// and 403 without a role in the team, whether or not the pipeline exists.
func (s *Server) publicPipeline(h func(http.ResponseWriter, *http.Request, pipelineRequest)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ref, err := pipelineRef(r)
		if err != nil {
			s.fail(w, r, apierr.BadRequest(err))
			return
		}
		teamName, name := r.PathValue("team_name"), ref.String()
		claims, authed := auth.FromContext(r.Context())
		team, err := s.store.Team(r.Context(), teamName)
		switch {
		case errors.Is(err, db.ErrNotFound) && !claims.CanRead(teamName):
			// A missing team looks like a team whose pipeline is hidden,
			// so that team names cannot be probed.
			s.refuse(w, r, authed, teamName)
			return
		case err != nil:
			s.fail(w, r, fmt.Errorf("team %q: %w", teamName, err))
			return
		}
		p, err := s.store.PipelineInstance(r.Context(), team.ID, ref)
		if err != nil && !errors.Is(err, db.ErrNotFound) {
			s.fail(w, r, err)
			return
		}
		if err != nil || !p.Public {
			switch {
			case !claims.CanRead(teamName):
				s.refuse(w, r, authed, teamName)
				return
			case err != nil:
				s.fail(w, r, pipelineNotFound(teamName, name))
				return
			}
		}
		h(w, r, pipelineRequest{claims: claims, team: team, pipeline: p})
	}
}

// refuse answers a caller without a role in team: 401 without a token,
// 403 with one.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, authed bool, team string) {
	if !authed {
		s.fail(w, r, apierr.Unauthenticated(r))
		return
	}
	s.fail(w, r, apierr.Forbidden(fmt.Sprintf("you do not have a role on team %q", team)))
}

// pipelineNotFound answers 404 in the JSON-API shape whose detail fly
// prints (e.g. for `fly jobs -p` of a pipeline that does not exist).
func pipelineNotFound(team, name string) error {
	return apierr.NotFound("Pipeline Not Found Error", fmt.Sprintf("pipeline '%s' not found in team '%s'", name, team))
}

// pipelineRef is the path's pipeline: its name and the instance vars of
// the query, as Concourse reads them (vars={"k":"v"} as fly sends them,
// or vars.k="v" each; values are JSON).
func pipelineRef(r *http.Request) (db.PipelineRef, error) {
	ref := db.PipelineRef{Name: r.PathValue("pipeline_name")}
	iv, err := instanceVarsFromQuery(r.URL.Query())
	if err != nil {
		return db.PipelineRef{}, err
	}
	ref.InstanceVars = iv
	return ref, nil
}

func instanceVarsFromQuery(q url.Values) (map[string]any, error) {
	var out map[string]any
	keys := make([]string, 0, len(q))
	for k := range q {
		if k == "vars" || strings.HasPrefix(k, "vars.") {
			keys = append(keys, k)
		}
	}
	// vars={...} first, then its patches vars.k=..., in a fixed order.
	slices.Sort(keys)
	for _, k := range keys {
		var v any
		if err := json.Unmarshal([]byte(q.Get(k)), &v); err != nil {
			return nil, fmt.Errorf("instance vars: %s=%q is not JSON: %w", k, q.Get(k), err)
		}
		if k == "vars" {
			m, ok := v.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("instance vars: vars=%q is not a JSON object", q.Get(k))
			}
			if out == nil {
				out = map[string]any{}
			}
			maps.Copy(out, m)
			continue
		}
		path := strings.Split(strings.TrimPrefix(k, "vars."), ".")
		if out == nil {
			out = map[string]any{}
		}
		node := out
		for _, seg := range path[:len(path)-1] {
			next, ok := node[seg].(map[string]any)
			if !ok {
				next = map[string]any{}
				node[seg] = next
			}
			node = next
		}
		node[path[len(path)-1]] = v
	}
	return out, nil
}

// validPipelineName refuses what cannot be a pipeline's name here (it is
// part of object keys and URLs), and warns, as Concourse does, about names
// that are not Concourse identifiers.
func validPipelineName(name string) (*configWarning, error) {
	if name == "" {
		return nil, errors.New("pipeline: identifier cannot be an empty string")
	}
	if err := names.Check("pipeline", name); err != nil {
		return nil, err
	}
	for _, c := range name {
		if unicode.IsSpace(c) {
			return nil, fmt.Errorf("pipeline: %q is not a valid name: it contains %q", name, c)
		}
	}
	return identifierWarning("pipeline", name), nil
}

var (
	allDigits  = regexp.MustCompile(`^[0-9]+$`)
	identStart = regexp.MustCompile(`^[\p{Ll}\p{Lt}\p{Lm}\p{Lo}0-9]`)
	identRest  = regexp.MustCompile(`[^\p{Ll}\p{Lt}\p{Lm}\p{Lo}0-9_.-]`)
)

// identifierWarning is Concourse's warning for a name that is not an
// identifier (lowercase letters, digits, '-', '_' and '.', starting with a
// letter or digit, not only digits); nil for a good one.
func identifierWarning(kind, name string) *configWarning {
	var why string
	switch {
	case allDigits.MatchString(name):
		why = "cannot be just numbers"
	case !identStart.MatchString(name):
		why = "must start with a lowercase letter or a number"
	case identRest.MatchString(name):
		why = fmt.Sprintf("illegal character '%s'", identRest.FindString(name))
	default:
		return nil
	}
	return &configWarning{Type: "invalid_identifier", Message: fmt.Sprintf("%s: '%s' is not a valid identifier: %s", kind, name, why)}
}

// apiPipeline is a pipeline's API shape.
func apiPipeline(p db.Pipeline) concourse.Pipeline {
	out := concourse.Pipeline{ID: p.ID, Name: p.Name, Paused: p.Paused, PausedBy: p.PausedBy, PausedAt: unix(p.PausedAt),
		Public: p.Public, TeamName: p.TeamName, LastUpdated: unix(p.LastUpdated), Archived: p.Archived,
		ParentJobID: p.ParentJobID, ParentBuildID: p.ParentBuildID, InstanceVars: p.InstanceVars}
	var cfg struct {
		Groups  []concourse.GroupConfig `json:"groups"`
		Display map[string]any          `json:"display"`
	}
	// Only what was saved through SavePipeline is here, so it decodes.
	if err := json.Unmarshal(p.Config, &cfg); err == nil {
		out.Groups, out.Display = cfg.Groups, cfg.Display
	}
	return out
}

func apiPipelines(ps []db.Pipeline) []concourse.Pipeline {
	out := []concourse.Pipeline{}
	for _, p := range ps {
		out = append(out, apiPipeline(p))
	}
	return out
}

// handleListAllPipelines is `fly pipelines -a`: every pipeline of the
// caller's teams (of every team for an admin) and the public ones of others.
func (s *Server) handleListAllPipelines(w http.ResponseWriter, r *http.Request) {
	ps, err := s.visiblePipelines(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httpreply.JSON(w, http.StatusOK, apiPipelines(ps))
}

// visiblePipelines are the pipelines of the caller's teams (all for an
// admin) and every exposed one.
func (s *Server) visiblePipelines(r *http.Request) ([]db.Pipeline, error) {
	claims, _ := auth.FromContext(r.Context())
	f := db.PipelineFilter{AllTeams: claims.IsAdmin, Public: true}
	if !claims.IsAdmin {
		teams, err := s.store.Teams(r.Context())
		if err != nil {
			return nil, err
		}
		for _, t := range teams {
			if claims.CanRead(t.Name) {
				f.TeamIDs = append(f.TeamIDs, t.ID)
			}
		}
	}
	return s.store.Pipelines(r.Context(), f)
}

// handleListPipelines is `fly pipelines`: the team's pipelines, or only its
// public ones for a caller without a role in it.
func (s *Server) handleListPipelines(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("team_name")
	claims, _ := auth.FromContext(r.Context())
	team, err := s.store.Team(r.Context(), name)
	switch {
	case errors.Is(err, db.ErrNotFound) && !claims.CanRead(name):
		// A missing team answers as a team with nothing exposed, so that
		// team names cannot be probed.
		httpreply.JSON(w, http.StatusOK, []concourse.Pipeline{})
		return
	case err != nil:
		s.fail(w, r, fmt.Errorf("team %q: %w", name, err))
		return
	}
	ps, err := s.store.Pipelines(r.Context(), db.PipelineFilter{TeamIDs: []int{team.ID}})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !claims.CanRead(name) {
		ps = slices.DeleteFunc(ps, func(p db.Pipeline) bool { return !p.Public })
	}
	httpreply.JSON(w, http.StatusOK, apiPipelines(ps))
}

func (s *Server) handleGetPipeline(w http.ResponseWriter, r *http.Request, pr pipelineRequest) {
	httpreply.JSON(w, http.StatusOK, apiPipeline(pr.pipeline))
}

// handleGetConfig is `fly get-pipeline` and set-pipeline's first look: the
// config with its version in X-Concourse-Config-Version.
func (s *Server) handleGetConfig(w http.ResponseWriter, r *http.Request, pr pipelineRequest) {
	w.Header().Set(configVersionHeader, strconv.FormatInt(pr.pipeline.ConfigVersion, 10))
	httpreply.JSON(w, http.StatusOK, map[string]json.RawMessage{"config": pr.pipeline.Config})
}

// saveConfigResponse is Concourse's answer to a save: the warnings, or the
// errors (400) that kept it from being saved.
type saveConfigResponse struct {
	Errors   []string        `json:"errors,omitempty"`
	Warnings []configWarning `json:"warnings,omitempty"`
}

// handleSaveConfig is `fly set-pipeline`: 201 for a new pipeline (created
// paused, as in Concourse), 200 for an update, 400 with the errors for a
// config that is not valid or (check_creds) names credentials the team's
// credential manager lacks, 409 when the config changed since fly read it.
// Nothing is saved unless the whole config is.
func (s *Server) handleSaveConfig(w http.ResponseWriter, r *http.Request, _ auth.Claims, team db.Team) {
	_, checkCreds := r.URL.Query()["check_creds"]
	ref, err := pipelineRef(r)
	if err != nil {
		httpreply.JSON(w, http.StatusBadRequest, saveConfigResponse{Errors: []string{err.Error()}})
		return
	}
	var from int64
	if v := r.Header.Get(configVersionHeader); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			httpreply.JSON(w, http.StatusBadRequest, saveConfigResponse{Errors: []string{fmt.Sprintf("config version is malformed: %q", v)}})
			return
		}
		from = n
	}
	ct := r.Header.Get("Content-Type")
	if ct != "application/x-yaml" && ct != "application/json" {
		s.fail(w, r, apierr.WithStatus(http.StatusUnsupportedMediaType, fmt.Errorf("content type %q: send application/x-yaml or application/json", ct)))
		return
	}
	body, err := io.ReadAll(boundedBody(w, r, maxConfigSize))
	if err != nil {
		httpreply.JSON(w, apierr.Status(httpreply.BodyError{Err: err}), saveConfigResponse{Errors: []string{fmt.Sprintf("read the config: %v", err)}})
		return
	}

	name := r.PathValue("pipeline_name")
	warning, err := validPipelineName(name)
	if err != nil {
		httpreply.JSON(w, http.StatusBadRequest, saveConfigResponse{Errors: []string{err.Error()}})
		return
	}
	cfg, warnings, errs, err := parsePipelineConfig(body, ct, s.cfg.BaseTypes)
	if err != nil {
		httpreply.JSON(w, http.StatusBadRequest, saveConfigResponse{Errors: []string{"malformed config: " + err.Error()}})
		return
	}
	if warning != nil {
		warnings = append(warnings, *warning)
	}
	if len(errs) > 0 {
		httpreply.JSON(w, http.StatusBadRequest, saveConfigResponse{Errors: errs, Warnings: warnings})
		return
	}
	if checkCreds {
		if err := credcheck.Check(r.Context(), s.creds, team.Name, ref.Name, *cfg); err != nil {
			httpreply.JSON(w, http.StatusBadRequest, saveConfigResponse{Errors: []string{err.Error()}})
			return
		}
	}

	p, created, err := s.store.SavePipelineInstance(r.Context(), team.ID, ref, *cfg, from)
	switch {
	case errors.Is(err, db.ErrConfigVersion), errors.Is(err, db.ErrConflict):
		s.fail(w, r, apierr.WithStatus(http.StatusConflict, fmt.Errorf(
			"pipeline %q changed since fly read it (%w): run set-pipeline again to see the new differences", name, err)))
		return
	case err != nil:
		s.fail(w, r, err)
		return
	}
	s.log.InfoContext(r.Context(), "pipeline saved", "team", team.Name, "pipeline", name, "id", p.ID,
		"created", created, "config_version", p.ConfigVersion)
	// New resources are due for their first check now.
	s.engine.WakeScheduler()
	code := http.StatusOK
	if created {
		code = http.StatusCreated
	}
	httpreply.JSON(w, code, saveConfigResponse{Warnings: warnings})
}

// handleDeletePipeline is `fly destroy-pipeline`: the pipeline with its
// jobs, builds, resources and versions, and its task caches.
func (s *Server) handleDeletePipeline(w http.ResponseWriter, r *http.Request, pr pipelineRequest) {
	if err := s.engine.DestroyPipeline(r.Context(), pr.team.Name, pr.pipeline); err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.InfoContext(r.Context(), "pipeline deleted", "team", pr.team.Name, "pipeline", pr.pipeline.Name, "id", pr.pipeline.ID)
	w.WriteHeader(http.StatusNoContent)
}

// handlePausePipeline is `fly pause-pipeline`.
func (s *Server) handlePausePipeline(w http.ResponseWriter, r *http.Request, pr pipelineRequest) {
	s.changed(w, r, s.store.PausePipeline(r.Context(), pr.pipeline.ID, pr.claims.UserInfo().DisplayUserID))
}

// handleUnpausePipeline is `fly unpause-pipeline`.
func (s *Server) handleUnpausePipeline(w http.ResponseWriter, r *http.Request, pr pipelineRequest) {
	s.changed(w, r, s.store.UnpausePipeline(r.Context(), pr.pipeline.ID))
}

// handleExposePipeline is `fly expose-pipeline`.
func (s *Server) handleExposePipeline(w http.ResponseWriter, r *http.Request, pr pipelineRequest) {
	s.changed(w, r, s.store.SetPipelinePublic(r.Context(), pr.pipeline.ID, true))
}

// handleHidePipeline is `fly hide-pipeline`.
func (s *Server) handleHidePipeline(w http.ResponseWriter, r *http.Request, pr pipelineRequest) {
	s.changed(w, r, s.store.SetPipelinePublic(r.Context(), pr.pipeline.ID, false))
}

// changed answers a change to what the scheduler reads (a pipeline, a job,
// a resource's versions): its error, or 200 once the scheduler is woken.
func (s *Server) changed(w http.ResponseWriter, r *http.Request, err error) {
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// An unpaused pipeline or job, or a new pin, may have builds to start
	// right away.
	s.engine.WakeScheduler()
	w.WriteHeader(http.StatusOK)
}

// handleRenamePipeline is `fly rename-pipeline`; the task caches move with
// the pipeline.
func (s *Server) handleRenamePipeline(w http.ResponseWriter, r *http.Request, pr pipelineRequest) {
	var in struct {
		Name string `json:"name"`
	}
	if err := decodeBody(w, r, maxJSONBody, &in, "the new name", false); err != nil {
		httpreply.JSON(w, apierr.Status(err), saveConfigResponse{Errors: []string{err.Error()}})
		return
	}
	warning, err := validPipelineName(in.Name)
	if err != nil {
		httpreply.JSON(w, http.StatusBadRequest, saveConfigResponse{Errors: []string{err.Error()}})
		return
	}
	err = s.engine.RenamePipeline(r.Context(), pr.team.Name, pr.pipeline, in.Name)
	switch {
	case errors.Is(err, db.ErrConflict):
		s.fail(w, r, apierr.WithStatus(http.StatusConflict, fmt.Errorf("team %q already has a pipeline %q", pr.team.Name, in.Name)))
		return
	case err != nil:
		s.fail(w, r, err)
		return
	}
	var resp saveConfigResponse
	if warning != nil {
		resp.Warnings = []configWarning{*warning}
	}
	httpreply.JSON(w, http.StatusOK, resp)
}

// handleOrderPipelines is `fly order-pipelines`: the named pipelines first,
// in that order.
func (s *Server) handleOrderPipelines(w http.ResponseWriter, r *http.Request, _ auth.Claims, team db.Team) {
	var names []string
	if err := decodeBody(w, r, maxJSONBody, &names, "the pipeline names", false); err != nil {
		s.fail(w, r, err)
		return
	}
	s.ordered(w, r, s.store.OrderPipelines(r.Context(), team.ID, names))
}

// handleOrderPipelineInstances is `fly order-instanced-pipelines`: the
// instances of one instanced pipeline in the order of their instance vars.
func (s *Server) handleOrderPipelineInstances(w http.ResponseWriter, r *http.Request, _ auth.Claims, team db.Team) {
	var instances []map[string]any
	if err := decodeBody(w, r, maxJSONBody, &instances, "the instance vars", false); err != nil {
		s.fail(w, r, err)
		return
	}
	s.ordered(w, r, s.store.OrderPipelineInstances(r.Context(), team.ID, r.PathValue("pipeline_name"), instances))
}

// ordered answers an ordering request with err, the store's answer.
func (s *Server) ordered(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, db.ErrNotFound):
		// fly prints a 400's body as it is.
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = fmt.Fprintln(w, err)
		return
	case err != nil:
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}
