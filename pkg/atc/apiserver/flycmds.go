package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/porter-ci/porter/pkg/atc/apiserver/adminserver"
	"github.com/porter-ci/porter/pkg/atc/apiserver/apierr"
	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/httpreply"
	"github.com/porter-ci/porter/pkg/names"
)

// FlyStore holds what the rest of fly's commands change: teams' lives,
// archived pipelines, the wall, the periodic components, logins, versions.
type FlyStore interface {
	DeleteTeam(ctx context.Context, id int) error
	RenameTeam(ctx context.Context, id int, name string) error
	TeamUnfinishedBuilds(ctx context.Context, teamID int) ([]int64, error)
	ArchivePipeline(ctx context.Context, id int64, by string) error
	RequestSchedule(ctx context.Context, jobID int64) error
	ClearResourceVersions(ctx context.Context, resourceID int64) (int64, error)
	DeleteResourceVersionCaches(ctx context.Context, resourceID int64, version map[string]string) (int64, error)
	RecordLogin(ctx context.Context, connector, name string, at time.Time) error
	SaveAccessToken(ctx context.Context, hash, signed string, expires time.Time) error
	AccessToken(ctx context.Context, hash string) (string, error)
}

// flyRoutes are the commands of fly 8.2.5 beyond builds, pipelines and
// workers' basics: destroy-team, rename-team, archive-pipeline,
// schedule-job, clear-versions, builds -p, the wall, the components and
// active-users.
func (s *Server) flyRoutes(mux *router) {
	const pipelinePath = "/api/v1/teams/{team_name}/pipelines/{pipeline_name}"
	mux.handle("DELETE /api/v1/teams/{team_name}", s.authed(s.handleDestroyTeam))
	mux.handle("PUT /api/v1/teams/{team_name}/rename", s.authed(s.handleRenameTeam))
	mux.handle("PUT "+pipelinePath+"/archive", s.pipeline(auth.ActionArchivePipeline, s.handleArchivePipeline))
	mux.handle("GET "+pipelinePath+"/builds", s.pipeline(auth.ActionRead, s.handlePipelineBuilds))
	mux.handle("PUT "+pipelinePath+"/jobs/{job_name}/schedule", s.job(auth.ActionScheduleJob, s.handleScheduleJob))
	mux.handle("GET "+pipelinePath+"/resources/{resource_name}/shared", s.admin(s.pipeline(auth.ActionRead, s.pipelineResource(s.handleSharedResource))))
	mux.handle("DELETE "+pipelinePath+"/resources/{resource_name}/versions", s.admin(s.pipeline(auth.ActionRead, s.pipelineResource(s.handleClearVersions))))
	mux.handle("GET "+pipelinePath+"/resource-types/{resource_type_name}/shared", s.admin(s.pipeline(auth.ActionRead, s.pipelineResourceType(s.handleSharedResourceType))))
	mux.handle("DELETE "+pipelinePath+"/resource-types/{resource_type_name}/versions", s.admin(s.pipeline(auth.ActionRead, s.pipelineResourceType(s.handleClearTypeVersions))))
	mux.handle("POST "+pipelinePath+"/resource-types/{resource_type_name}/check", s.pipeline(auth.ActionCheckResource, s.pipelineResourceType(s.handleCheckResourceType)))

	admin := &adminserver.Server{Store: s.store, Log: s.log, WakeScheduler: s.engine.WakeScheduler}
	mux.handle("GET /api/v1/wall", admin.GetWall)
	mux.handle("PUT /api/v1/wall", s.admin(admin.SetWall))
	mux.handle("DELETE /api/v1/wall", s.admin(admin.ClearWall))
	mux.handle("GET /api/v1/components", s.admin(admin.Components))
	mux.handle("PUT /api/v1/components/pause", s.admin(admin.ComponentSwitch(true)))
	mux.handle("PUT /api/v1/components/unpause", s.admin(admin.ComponentSwitch(false)))
	mux.handle("PUT /api/v1/components/{component_name}/pause", s.admin(admin.ComponentSwitch(true)))
	mux.handle("PUT /api/v1/components/{component_name}/unpause", s.admin(admin.ComponentSwitch(false)))
	mux.handle("GET /api/v1/users", s.admin(admin.ActiveUsers))
}

// admin needs an admin's token (an owner of team main), as Concourse's
// admin routes do.
func (s *Server) admin(h http.HandlerFunc) http.HandlerFunc {
	return s.authed(func(w http.ResponseWriter, r *http.Request, claims auth.Claims) {
		if !claims.IsAdmin {
			s.fail(w, r, apierr.Forbidden("only an admin (an owner of team main) may do this"))
			return
		}
		h(w, r)
	})
}

// handleDestroyTeam is `fly destroy-team`: an admin removes a team with
// its pipelines and builds (its running builds are aborted first). The
// admin team is refused with 403, which fly explains.
func (s *Server) handleDestroyTeam(w http.ResponseWriter, r *http.Request, claims auth.Claims) {
	name := r.PathValue("team_name")
	if !claims.IsAdmin || name == auth.MainTeam {
		// A bare 403, as Concourse answers: fly then explains that only an
		// admin may, and never the last admin team (main is Porter's only one).
		s.log.InfoContext(r.Context(), "destroy-team refused", "team", name, "user", claims.UserID, "admin", claims.IsAdmin)
		w.WriteHeader(http.StatusForbidden)
		return
	}
	team, err := s.store.Team(r.Context(), name)
	if err != nil {
		s.fail(w, r, fmt.Errorf("team %q: %w", name, err))
		return
	}
	if err := s.engine.DestroyTeam(r.Context(), team); err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.InfoContext(r.Context(), "team destroyed", "team", name, "id", team.ID, "by", claims.UserID)
	w.WriteHeader(http.StatusNoContent)
}

// handleRenameTeam is `fly rename-team`: an admin's, or the team's owner's.
func (s *Server) handleRenameTeam(w http.ResponseWriter, r *http.Request, claims auth.Claims) {
	name := r.PathValue("team_name")
	if !claims.Can(name, auth.ActionSetTeam) {
		s.fail(w, r, apierr.Forbidden(fmt.Sprintf("you are not allowed to rename team %q", name)))
		return
	}
	var in struct {
		Name string `json:"name"`
	}
	if err := decodeBody(w, r, maxJSONBody, &in, "the new name", false); err != nil {
		httpreply.JSON(w, apierr.Status(err), saveConfigResponse{Errors: []string{err.Error()}})
		return
	}
	if err := names.CheckTeam(in.Name); err != nil {
		httpreply.JSON(w, http.StatusBadRequest, saveConfigResponse{Errors: []string{fmt.Sprintf("team name: %v", err)}})
		return
	}
	if name == auth.MainTeam {
		// Who is an admin is decided by the name main.
		s.fail(w, r, apierr.Forbidden(fmt.Sprintf("team %q is the admin team: it cannot be renamed", name)))
		return
	}
	team, err := s.store.Team(r.Context(), name)
	if errors.Is(err, db.ErrNotFound) {
		// fly says "Team 'x' not found" for a 404.
		s.fail(w, r, apierr.NotFound("Team Not Found Error", fmt.Sprintf("team '%s' not found", name)))
		return
	}
	if err != nil {
		s.fail(w, r, fmt.Errorf("team %q: %w", name, err))
		return
	}
	err = s.engine.RenameTeam(r.Context(), team, in.Name)
	switch {
	case errors.Is(err, db.ErrConflict):
		s.fail(w, r, apierr.WithStatus(http.StatusConflict, fmt.Errorf("a team %q already exists", in.Name)))
		return
	case err != nil:
		s.fail(w, r, err)
		return
	}
	s.log.InfoContext(r.Context(), "team renamed", "from", name, "to", in.Name, "by", claims.UserID)
	httpreply.JSON(w, http.StatusOK, saveConfigResponse{})
}

// handleArchivePipeline is `fly archive-pipeline`: paused until set again.
func (s *Server) handleArchivePipeline(w http.ResponseWriter, r *http.Request, pr pipelineRequest) {
	s.changed(w, r, s.store.ArchivePipeline(r.Context(), pr.pipeline.ID, pr.claims.UserInfo().DisplayUserID))
}

// handlePipelineBuilds is `fly builds -p`: the pipeline's job builds.
func (s *Server) handlePipelineBuilds(w http.ResponseWriter, r *http.Request, pr pipelineRequest) {
	s.listBuildsOf(w, r, db.BuildFilter{TeamIDs: []int{pr.team.ID}, PipelineID: pr.pipeline.ID})
}

// handleScheduleJob is `fly schedule-job`: the scheduler looks at the job now.
func (s *Server) handleScheduleJob(w http.ResponseWriter, r *http.Request, jr jobRequest) {
	s.changed(w, r, s.store.RequestSchedule(r.Context(), jr.job.ID))
}

// resourceIdentifiers is Concourse's ResourcesAndTypes: what clear-versions
// will clear. Versions are a resource's own here (Concourse shares them
// between resources of the same type and source).
type resourceIdentifiers struct {
	Resources     []resourceIdentifier `json:"resources"`
	ResourceTypes []resourceIdentifier `json:"resource_types"`
}

type resourceIdentifier struct {
	Name         string `json:"name"`
	PipelineName string `json:"pipeline_name"`
	TeamName     string `json:"team_name"`
}

func (s *Server) handleSharedResource(w http.ResponseWriter, r *http.Request, rr resourceRequest) {
	httpreply.JSON(w, http.StatusOK, resourceIdentifiers{
		Resources:     []resourceIdentifier{{Name: rr.resource.Name, PipelineName: rr.pipeline.Name, TeamName: rr.team.Name}},
		ResourceTypes: []resourceIdentifier{},
	})
}

// handleClearVersions is `fly clear-versions -r`: the resource's versions
// go (and the builds' records of them); the next check starts afresh.
func (s *Server) handleClearVersions(w http.ResponseWriter, r *http.Request, rr resourceRequest) {
	n, err := s.store.ClearResourceVersions(r.Context(), rr.resource.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.InfoContext(r.Context(), "resource versions cleared", "team", rr.team.Name, "pipeline", rr.pipeline.Name,
		"resource", rr.resource.Name, "removed", n)
	httpreply.JSON(w, http.StatusOK, map[string]int64{"versions_removed": n})
}

// resourceTypeRequest is a request about a resource type of a pipeline.
type resourceTypeRequest struct {
	pipelineRequest
	name string
	typ  concourse.ResourceType
}

// pipelineResourceType finds the path's resource type in the pipeline's
// config (404 if none).
func (s *Server) pipelineResourceType(h func(http.ResponseWriter, *http.Request, resourceTypeRequest)) func(http.ResponseWriter, *http.Request, pipelineRequest) {
	return func(w http.ResponseWriter, r *http.Request, pr pipelineRequest) {
		name := r.PathValue("resource_type_name")
		var cfg concourse.Config
		if err := json.Unmarshal(pr.pipeline.Config, &cfg); err != nil {
			s.fail(w, r, fmt.Errorf("pipeline %s: decode its config: %w", pr.pipeline.Name, err))
			return
		}
		i := slices.IndexFunc(cfg.ResourceTypes, func(t concourse.ResourceType) bool { return t.Name == name })
		if i < 0 {
			s.fail(w, r, apierr.NotFound("Resource Type Not Found Error", fmt.Sprintf("resource type '%s' not found in pipeline '%s'", name, pr.pipeline.Name)))
			return
		}
		h(w, r, resourceTypeRequest{pipelineRequest: pr, name: name, typ: cfg.ResourceTypes[i]})
	}
}

func (s *Server) handleSharedResourceType(w http.ResponseWriter, r *http.Request, tr resourceTypeRequest) {
	httpreply.JSON(w, http.StatusOK, resourceIdentifiers{
		Resources:     []resourceIdentifier{},
		ResourceTypes: []resourceIdentifier{{Name: tr.name, PipelineName: tr.pipeline.Name, TeamName: tr.team.Name}},
	})
}

// handleClearTypeVersions is `fly clear-versions --resource-type`. A
// custom type's version is resolved by its check where it is used (and
// cached a minute), never stored: there is nothing to remove.
func (s *Server) handleClearTypeVersions(w http.ResponseWriter, r *http.Request, _ resourceTypeRequest) {
	httpreply.JSON(w, http.StatusOK, map[string]int64{"versions_removed": 0})
}

// handleCheckResourceType is `fly check-resource-type`: a build that runs
// the type's check (from the version given, if any), which fly follows.
// Porter keeps no versions of a type: each use resolves the type's image
// with this same check, so this shows whether that works now.
func (s *Server) handleCheckResourceType(w http.ResponseWriter, r *http.Request, tr resourceTypeRequest) {
	var in struct {
		From map[string]string `json:"from"`
	}
	if err := decodeBody(w, r, maxJSONBody, &in, "the check request", true); err != nil {
		s.fail(w, r, err)
		return
	}
	if !slices.Contains(s.cfg.BaseTypes, tr.typ.Type) {
		s.fail(w, r, apierr.BadRequest(fmt.Errorf("resource type %q is of type %q, itself a custom type: only a type of a base type (%s) can be checked on its own",
			tr.name, tr.typ.Type, strings.Join(s.cfg.BaseTypes, ", "))))
		return
	}
	b, err := s.engine.CheckResourceType(r.Context(), tr.team, tr.claims.UserID, tr.name, tr.typ, in.From)
	if err != nil {
		s.fail(w, r, fmt.Errorf("check resource type %s: %w", tr.name, err))
		return
	}
	httpreply.JSON(w, http.StatusCreated, apiBuild(b))
}
