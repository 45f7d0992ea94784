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

	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
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
	Wall(ctx context.Context) (db.Wall, error)
	SetWall(ctx context.Context, w db.Wall) error
	ClearWall(ctx context.Context) error
	Components(ctx context.Context) ([]db.Component, error)
	SetComponentPaused(ctx context.Context, name string, paused bool) error
	ActiveUsers(ctx context.Context, since time.Time) ([]db.User, error)
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

	mux.handle("GET /api/v1/wall", s.handleGetWall)
	mux.handle("PUT /api/v1/wall", s.admin(s.handleSetWall))
	mux.handle("DELETE /api/v1/wall", s.admin(s.handleClearWall))
	mux.handle("GET /api/v1/components", s.admin(s.handleComponents))
	mux.handle("PUT /api/v1/components/pause", s.admin(s.componentSwitch(true)))
	mux.handle("PUT /api/v1/components/unpause", s.admin(s.componentSwitch(false)))
	mux.handle("PUT /api/v1/components/{component_name}/pause", s.admin(s.componentSwitch(true)))
	mux.handle("PUT /api/v1/components/{component_name}/unpause", s.admin(s.componentSwitch(false)))
	mux.handle("GET /api/v1/users", s.admin(s.handleActiveUsers))
}

// admin needs an admin's token (an owner of team main), as Concourse's
// admin routes do.
func (s *Server) admin(h http.HandlerFunc) http.HandlerFunc {
	return s.authed(func(w http.ResponseWriter, r *http.Request, claims auth.Claims) {
		if !claims.IsAdmin {
			s.fail(w, r, forbidden("only an admin (an owner of team main) may do this"))
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
	running, err := s.store.TeamUnfinishedBuilds(r.Context(), team.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for _, id := range running {
		if err := s.engine.AbortBuild(r.Context(), db.Build{ID: id}); err != nil {
			s.log.WarnContext(r.Context(), "abort a build of a destroyed team", "build", id, "err", err)
		}
	}
	if err := s.store.DeleteTeam(r.Context(), team.ID); err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.InfoContext(r.Context(), "team destroyed", "team", name, "id", team.ID, "by", claims.UserID)
	// The team's task caches go too: a new team of that name starts empty.
	if prefix, err := blobstore.TaskCachePrefix(name); err == nil {
		if _, err := s.deleteObjects(r.Context(), prefix); err != nil {
			s.log.ErrorContext(r.Context(), "deleting the task caches of a destroyed team", "prefix", prefix, "err", err)
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleRenameTeam is `fly rename-team`: an admin's, or the team's owner's.
func (s *Server) handleRenameTeam(w http.ResponseWriter, r *http.Request, claims auth.Claims) {
	name := r.PathValue("team_name")
	if !claims.Can(name, auth.ActionSetTeam) {
		s.fail(w, r, forbidden(fmt.Sprintf("you are not allowed to rename team %q", name)))
		return
	}
	var in struct {
		Name string `json:"name"`
	}
	if err := decodeBody(w, r, maxJSONBody, &in, "the new name"); err != nil {
		writeJSON(w, errorStatus(err), saveConfigResponse{Errors: []string{err.Error()}})
		return
	}
	if err := names.CheckTeam(in.Name); err != nil {
		writeJSON(w, http.StatusBadRequest, saveConfigResponse{Errors: []string{fmt.Sprintf("team name: %v", err)}})
		return
	}
	if name == auth.MainTeam {
		// Who is an admin is decided by the name main.
		s.fail(w, r, forbidden(fmt.Sprintf("team %q is the admin team: it cannot be renamed", name)))
		return
	}
	team, err := s.store.Team(r.Context(), name)
	if errors.Is(err, db.ErrNotFound) {
		// fly says "Team 'x' not found" for a 404.
		s.fail(w, r, notFound("Team Not Found Error", fmt.Sprintf("team '%s' not found", name)))
		return
	}
	if err != nil {
		s.fail(w, r, fmt.Errorf("team %q: %w", name, err))
		return
	}
	err = s.store.RenameTeam(r.Context(), team.ID, in.Name)
	switch {
	case errors.Is(err, db.ErrConflict):
		s.fail(w, r, withStatus(http.StatusConflict, fmt.Errorf("a team %q already exists", in.Name)))
		return
	case err != nil:
		s.fail(w, r, err)
		return
	}
	from, err1 := blobstore.TaskCachePrefix(name)
	to, err2 := blobstore.TaskCachePrefix(in.Name)
	if err1 == nil && err2 == nil {
		if err := s.moveObjects(r.Context(), from, to); err != nil {
			s.log.ErrorContext(r.Context(), "moving the task caches of a renamed team", "from", from, "to", to, "err", err)
		}
	}
	s.log.InfoContext(r.Context(), "team renamed", "from", name, "to", in.Name, "by", claims.UserID)
	writeJSON(w, http.StatusOK, saveConfigResponse{})
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
	writeJSON(w, http.StatusOK, resourceIdentifiers{
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
	writeJSON(w, http.StatusOK, map[string]int64{"versions_removed": n})
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
			s.fail(w, r, notFound("Resource Type Not Found Error", fmt.Sprintf("resource type '%s' not found in pipeline '%s'", name, pr.pipeline.Name)))
			return
		}
		h(w, r, resourceTypeRequest{pipelineRequest: pr, name: name, typ: cfg.ResourceTypes[i]})
	}
}

func (s *Server) handleSharedResourceType(w http.ResponseWriter, r *http.Request, tr resourceTypeRequest) {
	writeJSON(w, http.StatusOK, resourceIdentifiers{
		Resources:     []resourceIdentifier{},
		ResourceTypes: []resourceIdentifier{{Name: tr.name, PipelineName: tr.pipeline.Name, TeamName: tr.team.Name}},
	})
}

// handleClearTypeVersions is `fly clear-versions --resource-type`. A
// custom type's version is resolved by its check where it is used (and
// cached a minute), never stored: there is nothing to remove.
func (s *Server) handleClearTypeVersions(w http.ResponseWriter, r *http.Request, _ resourceTypeRequest) {
	writeJSON(w, http.StatusOK, map[string]int64{"versions_removed": 0})
}

// handleCheckResourceType is `fly check-resource-type`: a build that runs
// the type's check (from the version given, if any), which fly follows.
// Porter keeps no versions of a type: each use resolves the type's image
// with this same check, so this shows whether that works now.
func (s *Server) handleCheckResourceType(w http.ResponseWriter, r *http.Request, tr resourceTypeRequest) {
	var in struct {
		From map[string]string `json:"from"`
	}
	if err := decodeOptionalBody(w, r, maxJSONBody, &in, "the check request"); err != nil {
		s.fail(w, r, err)
		return
	}
	if !slices.Contains(s.cfg.BaseTypes, tr.typ.Type) {
		s.fail(w, r, badRequest(fmt.Errorf("resource type %q is of type %q, itself a custom type: only a type of a base type (%s) can be checked on its own",
			tr.name, tr.typ.Type, strings.Join(s.cfg.BaseTypes, ", "))))
		return
	}
	plan := concourse.Plan{ID: concourse.PlanID("check-type-" + tr.name), Check: &concourse.CheckPlan{
		Name: tr.name, Type: tr.typ.Type, Source: tr.typ.Source, FromVersion: in.From, Tags: tr.typ.Tags,
		TypeImage: concourse.TypeImage{BaseType: tr.typ.Type, Privileged: tr.typ.Privileged}}}
	raw, err := json.Marshal(plan)
	if err != nil {
		s.fail(w, r, fmt.Errorf("check plan of resource type %s: %w", tr.name, err))
		return
	}
	b, err := s.engine.CreateBuild(r.Context(), tr.team, tr.claims.UserID, plan, raw)
	if err != nil {
		s.fail(w, r, fmt.Errorf("check resource type %s: %w", tr.name, err))
		return
	}
	writeJSON(w, http.StatusCreated, apiBuild(b))
}

// wall is Concourse's Wall: TTL is the time left, in nanoseconds.
type wall struct {
	Message string        `json:"message,omitempty"`
	TTL     time.Duration `json:"TTL,omitempty"`
}

// handleGetWall is `fly get-wall`, and what every fly command shows: public.
func (s *Server) handleGetWall(w http.ResponseWriter, r *http.Request) {
	cur, err := s.store.Wall(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := wall{Message: cur.Message}
	if !cur.Expires.IsZero() {
		out.TTL = max(time.Until(cur.Expires), time.Second).Truncate(time.Second)
	}
	writeJSON(w, http.StatusOK, out)
}

// handleSetWall is `fly set-wall [--ttl]`.
func (s *Server) handleSetWall(w http.ResponseWriter, r *http.Request) {
	var in wall
	if err := decodeBody(w, r, maxJSONBody, &in, "the wall"); err != nil {
		s.fail(w, r, err)
		return
	}
	if in.Message == "" {
		s.fail(w, r, badRequest(errors.New("wall message cannot be empty")))
		return
	}
	if in.TTL < 0 {
		s.fail(w, r, badRequest(fmt.Errorf("wall TTL %s: want a positive duration", in.TTL)))
		return
	}
	set := db.Wall{Message: in.Message}
	if in.TTL > 0 {
		set.Expires = time.Now().Add(in.TTL)
	}
	if err := s.store.SetWall(r.Context(), set); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handleClearWall(w http.ResponseWriter, r *http.Request) {
	if err := s.store.ClearWall(r.Context()); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// component is Concourse's Component.
type component struct {
	Name     string        `json:"name"`
	Interval time.Duration `json:"interval"`
	LastRan  time.Time     `json:"last_ran"`
	Paused   bool          `json:"paused"`
}

// handleComponents is `fly get-components`: the servers' periodic loops
// (scheduler, scanner: the checks, collector: GC).
func (s *Server) handleComponents(w http.ResponseWriter, r *http.Request) {
	cs, err := s.store.Components(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := []component{}
	for _, c := range cs {
		out = append(out, component{Name: c.Name, Interval: c.Interval, LastRan: c.LastRan, Paused: c.Paused})
	}
	writeJSON(w, http.StatusOK, out)
}

// componentSwitch is `fly pause-component`/`unpause-component` (-a: every
// one): every server's loop of that name stops or starts at its next pass.
func (s *Server) componentSwitch(paused bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("component_name")
		err := s.store.SetComponentPaused(r.Context(), componentOf(name), paused)
		if errors.Is(err, db.ErrNotFound) {
			// fly prints its own "component 'x' not found" for a 404.
			s.fail(w, r, notFound("Component Not Found Error", fmt.Sprintf("component '%s' not found", name)))
			return
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if !paused {
			s.engine.WakeScheduler()
		}
		w.WriteHeader(http.StatusOK)
	}
}

// componentOf is the Porter component that does the work of a Concourse
// component, so that fly's --runtime-components and --gc-components (which
// name Concourse's) pause and unpause Porter's: the build tracker's and the
// scheduler's work is the scheduler's, every collector's, the reaper's and
// the pipeline pauser's is the collector's. Other names stay as they are.
func componentOf(name string) string {
	switch {
	case name == "tracker":
		return "scheduler"
	case name == "reaper", name == "pipeline_pauser", strings.HasPrefix(name, "collector_"):
		return "collector"
	}
	return name
}

// activeUser is Concourse's User.
type activeUser struct {
	ID        int    `json:"id,omitempty"`
	Username  string `json:"username,omitempty"`
	Connector string `json:"connector,omitempty"`
	LastLogin int64  `json:"last_login,omitempty"`
	Sub       string `json:"sub,omitempty"`
}

// handleActiveUsers is `fly active-users [--since yyyy-mm-dd]`.
func (s *Server) handleActiveUsers(w http.ResponseWriter, r *http.Request) {
	var since time.Time
	if v := r.URL.Query().Get("since"); v != "" {
		t, err := time.Parse(time.DateOnly, v)
		if err != nil {
			s.fail(w, r, badRequest(fmt.Errorf("since=%q: wrong date format (yyyy-mm-dd)", v)))
			return
		}
		since = t
	}
	us, err := s.store.ActiveUsers(r.Context(), since)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := []activeUser{}
	for _, u := range us {
		out = append(out, activeUser{Username: u.Name, Connector: u.Connector, LastLogin: u.LastLogin.Unix(),
			Sub: auth.SubjectFor(u.Connector, u.Name)})
	}
	writeJSON(w, http.StatusOK, out)
}
