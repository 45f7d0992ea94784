package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/porter-ci/porter/pkg/atc/apiserver/apierr"
	"github.com/porter-ci/porter/pkg/atc/apiserver/artifactserver"
	"github.com/porter-ci/porter/pkg/atc/apiserver/auditserver"
	"github.com/porter-ci/porter/pkg/atc/apiserver/commentserver"
	"github.com/porter-ci/porter/pkg/atc/apiserver/logserver"
	"github.com/porter-ci/porter/pkg/atc/apiserver/volumeserver"
	"github.com/porter-ci/porter/pkg/atc/apiserver/workerserver"
	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/httpreply"
	"github.com/porter-ci/porter/pkg/names"
)

// Handler answers Concourse's API as `fly` uses it, plus Porter's audit
// trail. Every route but the info, login and public reads needs a token.
func (s *Server) Handler() http.Handler {
	var h http.Handler = s.routes().mux
	h = auth.RefuseCrossOrigin(s.cfg.ExternalURL)(h)
	h = auth.Authenticate(s.issuer, loginUsers{s.store}, s.log.With("component", "auth"), s.unavailable)(h)
	h = auth.RefuseForeignHost(s.cfg.ExternalURL, "/healthz")(h)
	h = s.limitBodies(h)
	h = s.recoverPanics(h)
	h = httpreply.WithRequestID(h)
	return concourseHeaders(h)
}

// teamOnly adapts a handler of a team's route that needs no claims.
func teamOnly(h func(http.ResponseWriter, *http.Request, db.Team)) func(http.ResponseWriter, *http.Request, auth.Claims, db.Team) {
	return func(w http.ResponseWriter, r *http.Request, _ auth.Claims, team db.Team) { h(w, r, team) }
}

// router is a mux that remembers its patterns, so tests and the fuzzer
// reach every route.
type router struct {
	mux      *http.ServeMux
	patterns []string
}

func (rt *router) handle(pattern string, h http.HandlerFunc) {
	rt.mux.Handle(pattern, h)
	rt.patterns = append(rt.patterns, pattern)
}

func (s *Server) routes() *router {
	mux := &router{mux: http.NewServeMux()}
	mux.handle("GET /api/v1/info", s.handleInfo)
	mux.handle("POST /sky/issuer/token", auth.TokenHandler(s.issuer, loginUsers{s.store}, s.log.With("component", "login")).ServeHTTP)
	mux.handle("GET /api/v1/cli", s.handleCLI)
	mux.handle("GET /sky/connectors", s.handleConnectors)
	mux.handle("GET "+auth.OIDCLoginPath, s.handleOIDCLogin)
	mux.handle("GET "+auth.OIDCCallbackPath, s.handleOIDCCallback)
	mux.handle("GET /sky/logout", auth.Logout(loginUsers{s.store}, s.log.With("component", "login"), s.unavailable).ServeHTTP)
	mux.handle("GET /api/v1/user", s.authed(s.handleUser))
	mux.handle("GET /api/v1/teams", s.handleTeams)
	mux.handle("GET /api/v1/teams/{team_name}", s.authed(s.handleGetTeam))
	mux.handle("PUT /api/v1/teams/{team_name}", s.authed(s.handleSetTeam))
	workers := &workerserver.Server{Store: s.store, Bucket: s.cfg.BlobstoreBucket, ResourceTypes: s.engine.WorkerResourceTypes, Log: s.log}
	mux.handle("GET /api/v1/workers", s.authed(workers.List))
	mux.handle("PUT /api/v1/workers/{worker_name}/land", s.authed(workers.Action(s.store.LandWorker)))
	mux.handle("PUT /api/v1/workers/{worker_name}/retire", s.authed(workers.Action(s.store.RetireWorker)))
	mux.handle("PUT /api/v1/workers/{worker_name}/prune", s.authed(workers.Action(s.store.PruneWorker)))

	mux.handle("GET /api/v1/builds", s.handleListBuilds)
	mux.handle("GET /api/v1/teams/{team_name}/builds", s.team(auth.ActionRead, s.handleTeamBuilds))
	mux.handle("POST /api/v1/teams/{team_name}/builds", s.team(auth.ActionCreateBuild, s.handleCreateBuild))
	mux.handle("GET /api/v1/builds/{build_id}", s.builds.Read(false, s.handleGetBuild))
	mux.handle("GET /api/v1/builds/{build_id}/plan", s.builds.Read(true, s.handleBuildPlan))
	mux.handle("GET /api/v1/builds/{build_id}/events", s.builds.Read(true, s.handleBuildEvents))
	// Porter's own (fly knows none): a build's stored log by range, read
	// as its events are (logserver: the build page of a huge log).
	logs := &logserver.Server{Logs: s.logs, Log: s.log}
	mux.handle("GET /api/v1/builds/{build_id}/log", s.builds.Read(true, s.withLogs(logs.Page)))
	mux.handle("GET /api/v1/builds/{build_id}/log/outline", s.builds.Read(true, s.withLogs(logs.Outline)))
	mux.handle("GET /api/v1/builds/{build_id}/log/search", s.builds.Read(true, s.withLogs(logs.Search)))
	mux.handle("GET /api/v1/builds/{build_id}/artifacts", s.builds.Read(true, s.handleBuildArtifacts))
	audits := &auditserver.Server{Bucket: s.audit, Blobs: s.blobs, Log: s.log}
	mux.handle("GET /api/v1/builds/{build_id}/audit", s.buildRead(audits.Audit))
	mux.handle("GET /api/v1/builds/{build_id}/audit/steps/{step_id}/{object}", s.buildRead(audits.StepObject))
	mux.handle("GET /api/v1/builds/{build_id}/outputs/{step_id}/{output}", s.builds.Read(true, audits.Output))
	mux.handle("PUT /api/v1/builds/{build_id}/abort", s.buildAction(auth.ActionAbortBuild, s.handleAbortBuild))
	comments := &commentserver.Server{Store: s.store, Log: s.log}
	mux.handle("PUT /api/v1/builds/{build_id}/comment", s.buildAction(auth.ActionSetBuildComment, comments.Set))
	// Porter's own (fly knows none): resume a failed job build, allowed to
	// whoever may rerun it.
	mux.handle("POST /api/v1/builds/{build_id}/resume", s.buildAction(auth.ActionCreateJobBuild, s.handleResumeBuild))

	artifacts := &artifactserver.Server{Store: s.store, Blobs: s.blobs, Limits: s.cfg.Limits.Upload, Worker: s.cfg.ArtifactWorker, Log: s.log}
	mux.handle("POST /api/v1/teams/{team_name}/artifacts", s.team(auth.ActionCreateBuild, teamOnly(artifacts.Create)))
	mux.handle("GET /api/v1/teams/{team_name}/artifacts/{artifact_id}", s.team(auth.ActionCreateBuild, teamOnly(artifacts.Get)))
	mux.handle("GET /api/v1/teams/{team_name}/containers", s.team(auth.ActionRead, s.handleContainers))
	mux.handle("GET /api/v1/teams/{team_name}/containers/{id}", s.team(auth.ActionRead, s.handleContainer))
	mux.handle("GET /api/v1/teams/{team_name}/containers/{id}/hijack", s.team(auth.ActionHijack, s.handleHijack))
	volumes := &volumeserver.Server{Store: s.store, Blobs: s.blobs, Worker: s.cfg.ArtifactWorker, Log: s.log}
	mux.handle("GET /api/v1/teams/{team_name}/volumes", s.team(auth.ActionRead, teamOnly(volumes.List)))

	// Pipelines, jobs and resources (pipelines.go, jobs.go, resources.go).
	const pipelinePath = "/api/v1/teams/{team_name}/pipelines/{pipeline_name}"
	mux.handle("GET /api/v1/pipelines", s.handleListAllPipelines)
	mux.handle("GET /api/v1/jobs", s.handleListAllJobs)
	mux.handle("GET /api/v1/resources", s.handleListAllResources)
	mux.handle("GET /api/v1/teams/{team_name}/pipelines", s.handleListPipelines)
	mux.handle("PUT /api/v1/teams/{team_name}/pipelines/ordering", s.team(auth.ActionOrderPipelines, s.handleOrderPipelines))
	mux.handle("PUT /api/v1/teams/{team_name}/pipelines/{pipeline_name}/ordering", s.team(auth.ActionOrderPipelines, s.handleOrderPipelineInstances))
	mux.handle("GET "+pipelinePath, s.publicPipeline(s.handleGetPipeline))
	mux.handle("DELETE "+pipelinePath, s.pipeline(auth.ActionDeletePipeline, s.handleDeletePipeline))
	mux.handle("GET "+pipelinePath+"/config", s.pipeline(auth.ActionRead, s.handleGetConfig))
	mux.handle("PUT "+pipelinePath+"/config", s.team(auth.ActionSaveConfig, s.handleSaveConfig))
	mux.handle("PUT "+pipelinePath+"/pause", s.pipeline(auth.ActionPausePipeline, s.handlePausePipeline))
	mux.handle("PUT "+pipelinePath+"/unpause", s.pipeline(auth.ActionUnpausePipeline, s.handleUnpausePipeline))
	mux.handle("PUT "+pipelinePath+"/expose", s.pipeline(auth.ActionExposePipeline, s.handleExposePipeline))
	mux.handle("PUT "+pipelinePath+"/hide", s.pipeline(auth.ActionHidePipeline, s.handleHidePipeline))
	mux.handle("PUT "+pipelinePath+"/rename", s.pipeline(auth.ActionRenamePipeline, s.handleRenamePipeline))
	mux.handle("GET "+pipelinePath+"/jobs", s.publicPipeline(s.handleListJobs))
	mux.handle("GET "+pipelinePath+"/jobs/{job_name}", s.publicPipeline(s.pipelineJob(s.handleGetJob)))
	mux.handle("PUT "+pipelinePath+"/jobs/{job_name}/pause", s.job(auth.ActionPauseJob, s.handlePauseJob))
	mux.handle("PUT "+pipelinePath+"/jobs/{job_name}/unpause", s.job(auth.ActionUnpauseJob, s.handleUnpauseJob))
	mux.handle("DELETE "+pipelinePath+"/jobs/{job_name}/tasks/{step_name}/cache", s.job(auth.ActionClearTaskCache, s.handleClearTaskCache))
	mux.handle("GET "+pipelinePath+"/resources", s.publicPipeline(s.handleListResources))
	mux.handle("GET "+pipelinePath+"/resources/{resource_name}", s.publicPipeline(s.pipelineResource(s.handleGetResource)))
	mux.handle("DELETE "+pipelinePath+"/resources/{resource_name}/cache", s.resource(auth.ActionClearResourceCache, s.handleClearResourceCache))
	mux.handle("GET "+pipelinePath+"/resource-types", s.pipeline(auth.ActionRead, s.handleResourceTypes))
	mux.handle("GET "+pipelinePath+"/jobs/{job_name}/inputs", s.job(auth.ActionRead, s.handleJobInputs))
	mux.handle("POST "+pipelinePath+"/builds", s.pipeline(auth.ActionCreateBuild, s.handleCreatePipelineBuild))
	// Pipelines' jobs and resources: scheduling (jobbuilds.go, versions.go).
	s.jobRoutes(mux)
	s.versionRoutes(mux)
	// The rest of fly's commands (flycmds.go).
	s.flyRoutes(mux)

	mux.handle("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	return mux
}

// withLogs answers 503 where the server reads no stored logs by range.
func (s *Server) withLogs(h func(http.ResponseWriter, *http.Request, db.Build)) func(http.ResponseWriter, *http.Request, db.Build) {
	if s.logs != nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request, _ db.Build) {
		s.fail(w, r, apierr.WithStatus(http.StatusServiceUnavailable, errors.New("this server reads no build logs by range")))
	}
}

// concourseHeaders sets what Concourse's API sets on every answer.
func concourseHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Concourse-Version", concourse.Version)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "deny")
		h.Set("Content-Security-Policy", "frame-ancestors 'none'")
		h.Set("Cache-Control", "no-store, private")
		next.ServeHTTP(w, r)
	})
}

// authed needs a valid token.
func (s *Server) authed(h func(http.ResponseWriter, *http.Request, auth.Claims)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		claims, ok := auth.FromContext(r.Context())
		if !ok {
			s.fail(w, r, apierr.Unauthenticated(r))
			return
		}
		h(w, r, claims)
	}
}

// team needs a token allowed to do action in the path's team.
func (s *Server) team(action auth.Action, h func(http.ResponseWriter, *http.Request, auth.Claims, db.Team)) http.HandlerFunc {
	return s.authed(func(w http.ResponseWriter, r *http.Request, claims auth.Claims) {
		name := r.PathValue("team_name")
		if !claims.Can(name, action) {
			s.fail(w, r, apierr.Forbidden(fmt.Sprintf("you are not allowed to %s in team %q", action, name)))
			return
		}
		team, err := s.store.Team(r.Context(), name)
		if err != nil {
			s.fail(w, r, fmt.Errorf("team %q: %w", name, err))
			return
		}
		h(w, r, claims, team)
	})
}

// buildRead finds the path's build and checks that the caller may see it:
// one-off builds are never public, so anonymous callers get 401 and other
// teams 403, as in Concourse.
func (s *Server) buildRead(h func(http.ResponseWriter, *http.Request, db.Build)) http.HandlerFunc {
	return s.buildAction(auth.ActionRead, func(w http.ResponseWriter, r *http.Request, _ auth.Claims, b db.Build) { h(w, r, b) })
}

func (s *Server) buildAction(action auth.Action, h func(http.ResponseWriter, *http.Request, auth.Claims, db.Build)) http.HandlerFunc {
	return s.authed(func(w http.ResponseWriter, r *http.Request, claims auth.Claims) {
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
		if !claims.Can(b.TeamName, action) {
			// Not its team's name: an id alone must not say whose it is.
			s.fail(w, r, apierr.Forbidden(fmt.Sprintf("build %d belongs to a team you are not allowed to %s in", id, action)))
			return
		}
		h(w, r, claims, b)
	})
}

func (s *Server) handleInfo(w http.ResponseWriter, r *http.Request) {
	httpreply.JSON(w, http.StatusOK, concourse.Info{
		Version: concourse.Version, WorkerVersion: concourse.WorkerVersion,
		FeatureFlags: map[string]bool{"build_rerun": false, "cache_streamed_volumes": false, "global_resources": false, "resource_causality": false},
		ExternalURL:  s.cfg.ExternalURL, ClusterName: s.cfg.ClusterName,
	})
}

// handleCLI answers `fly sync`: Porter serves the API of Concourse 8.2.5,
// not fly binaries.
func (s *Server) handleCLI(w http.ResponseWriter, r *http.Request) {
	// fly prints a 404's JSON-API error details.
	s.fail(w, r, apierr.NotFound("fly is not served here",
		fmt.Sprintf("Porter does not distribute fly: use Concourse's fly %s, the version this server speaks", concourse.Version)))
}

// handleGetTeam is fly's check of --team: 404 for no such team, 403 for a
// team the caller has no role in.
func (s *Server) handleGetTeam(w http.ResponseWriter, r *http.Request, claims auth.Claims) {
	name := r.PathValue("team_name")
	// Roles first: whether a team exists is only told to who may see it.
	if !claims.CanRead(name) {
		s.fail(w, r, apierr.Forbidden(fmt.Sprintf("you do not have a role on team %q", name)))
		return
	}
	t, err := s.store.Team(r.Context(), name)
	if err != nil {
		s.fail(w, r, fmt.Errorf("team %q: %w", name, err))
		return
	}
	httpreply.JSON(w, http.StatusOK, apiTeam(t))
}

func (s *Server) handleUser(w http.ResponseWriter, r *http.Request, claims auth.Claims) {
	httpreply.JSON(w, http.StatusOK, claims.UserInfo())
}

func apiTeam(t db.Team) concourse.Team {
	out := concourse.Team{ID: t.ID, Name: t.Name, Auth: concourse.TeamAuth{}}
	for role, m := range t.Auth {
		out.Auth[role] = map[string][]string{"users": nonNil(m.Users), "groups": nonNil(m.Groups)}
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// handleTeams lists the teams the caller belongs to (all for an admin,
// none for an anonymous caller).
func (s *Server) handleTeams(w http.ResponseWriter, r *http.Request) {
	claims, ok := auth.FromContext(r.Context())
	if !ok {
		// An anonymous caller sees no team: answered without the
		// database, so a database that is down tells them nothing either.
		httpreply.JSON(w, http.StatusOK, []concourse.Team{})
		return
	}
	teams, err := s.store.Teams(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := []concourse.Team{}
	for _, t := range teams {
		if claims.CanRead(t.Name) {
			out = append(out, apiTeam(t))
		}
	}
	httpreply.JSON(w, http.StatusOK, out)
}

// handleSetTeam is `fly set-team`: admins only.
func (s *Server) handleSetTeam(w http.ResponseWriter, r *http.Request, claims auth.Claims) {
	if !claims.IsAdmin {
		s.fail(w, r, apierr.Forbidden("only an admin (an owner of team main) can set teams"))
		return
	}
	var in concourse.Team
	if err := decodeBody(w, r, maxJSONBody, &in, "team", false); err != nil {
		s.fail(w, r, err)
		return
	}
	name := r.PathValue("team_name")
	if err := names.CheckTeam(name); err != nil {
		s.fail(w, r, apierr.BadRequest(fmt.Errorf("team name: %w", err)))
		return
	}
	teamAuth := db.TeamAuth{}
	for role, m := range in.Auth {
		switch role {
		case "owner", "member", "pipeline-operator", "viewer":
		default:
			s.fail(w, r, apierr.BadRequest(fmt.Errorf("unknown role %q: want owner, member, pipeline-operator or viewer", role)))
			return
		}
		teamAuth[role] = db.RoleMembers{Users: m["users"], Groups: m["groups"]}
	}
	if len(teamAuth) == 0 {
		s.fail(w, r, apierr.BadRequest(errors.New("auth config for the team must not be empty")))
		return
	}
	_, lookupErr := s.store.Team(r.Context(), name)
	t, err := s.store.EnsureTeam(r.Context(), name, teamAuth)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// fly says "team created" on 201 and "team updated" otherwise.
	code := http.StatusOK
	if errors.Is(lookupErr, db.ErrNotFound) {
		code = http.StatusCreated
	}
	httpreply.JSON(w, code, map[string]any{"team": apiTeam(t)})
}

// apiBuild is a build's API shape.
func apiBuild(b db.Build) concourse.Build {
	out := concourse.Build{ID: b.ID, TeamName: b.TeamName, Name: b.Name, Status: b.Status,
		APIURL: concourse.BuildAPIURL(b.ID), StartTime: unix(b.StartTime), EndTime: unix(b.EndTime)}
	if b.CreatedBy != "" {
		by := b.CreatedBy
		out.CreatedBy = &by
	}
	return out
}

func unix(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

// listBuilds answers a page of builds (Concourse's limit/since/until).
func (s *Server) listBuilds(w http.ResponseWriter, r *http.Request, teamIDs []int) {
	s.listBuildsOf(w, r, db.BuildFilter{TeamIDs: teamIDs})
}

// listBuildsOf answers a page of the builds f selects.
func (s *Server) listBuildsOf(w http.ResponseWriter, r *http.Request, f db.BuildFilter) {
	q := r.URL.Query()
	if err := parsePage(q, &f); err != nil {
		s.fail(w, r, apierr.BadRequest(err))
		return
	}
	limit, err := pageLimit(q, 0) // 0: the store's default
	if err != nil {
		s.fail(w, r, apierr.BadRequest(err))
		return
	}
	f.Limit = limit
	builds, err := s.store.Builds(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := []concourse.Build{}
	for _, b := range builds {
		out = append(out, apiJobBuild(b))
	}
	httpreply.JSON(w, http.StatusOK, out)
}

// handleListBuilds lists the builds of the caller's teams. One-off builds
// are never public, so an anonymous caller sees none.
func (s *Server) handleListBuilds(w http.ResponseWriter, r *http.Request) {
	claims, ok := auth.FromContext(r.Context())
	if !ok {
		httpreply.JSON(w, http.StatusOK, []concourse.Build{})
		return
	}
	var ids []int
	if !claims.IsAdmin {
		teams, err := s.store.Teams(r.Context())
		if err != nil {
			s.fail(w, r, err)
			return
		}
		ids = []int{}
		for _, t := range teams {
			if claims.CanRead(t.Name) {
				ids = append(ids, t.ID)
			}
		}
		if len(ids) == 0 {
			httpreply.JSON(w, http.StatusOK, []concourse.Build{})
			return
		}
	}
	s.listBuilds(w, r, ids)
}

func (s *Server) handleTeamBuilds(w http.ResponseWriter, r *http.Request, _ auth.Claims, team db.Team) {
	s.listBuilds(w, r, []int{team.ID})
}

func (s *Server) handleCreateBuild(w http.ResponseWriter, r *http.Request, claims auth.Claims, team db.Team) {
	s.createBuildFromRequest(w, r, team, claims.UserID, "")
}

// createBuildFromRequest creates a one-off build of team from the plan in
// the request's body (fly execute's). what names it in errors (empty: none).
func (s *Server) createBuildFromRequest(w http.ResponseWriter, r *http.Request, team db.Team, userID, what string) {
	raw, err := io.ReadAll(boundedBody(w, r, 4<<20))
	if err != nil {
		s.fail(w, r, apierr.BadRequest(fmt.Errorf("read the plan: %w", err)))
		return
	}
	var plan concourse.Plan
	if err := json.Unmarshal(raw, &plan); err != nil {
		s.fail(w, r, apierr.BadRequest(fmt.Errorf("decode the plan: %w", err)))
		return
	}
	b, err := s.engine.CreateBuild(r.Context(), team, userID, plan, raw)
	if err != nil {
		if what != "" {
			err = fmt.Errorf("%s: %w", what, err)
		}
		s.fail(w, r, err)
		return
	}
	httpreply.JSON(w, http.StatusCreated, apiBuild(b))
}

func (s *Server) handleGetBuild(w http.ResponseWriter, r *http.Request, b db.Build) {
	// A job's or a check's build also names its pipeline and job or resource.
	jb, err := s.store.JobBuildByID(r.Context(), b.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	show, err := s.builds.ShowsComment(r, b)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httpreply.JSON(w, http.StatusOK, commented(jb, show))
}

// handleAbortBuild aborts a running build: here when this server runs it,
// otherwise through the database for the server that does.
func (s *Server) handleAbortBuild(w http.ResponseWriter, r *http.Request, _ auth.Claims, rec db.Build) {
	if err := s.engine.AbortBuild(r.Context(), rec); err != nil {
		s.fail(w, r, fmt.Errorf("abort build %d: %w", rec.ID, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleBuildArtifacts(w http.ResponseWriter, r *http.Request, b db.Build) {
	arts, err := s.store.BuildArtifacts(r.Context(), b.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := []concourse.WorkerArtifact{}
	for _, a := range arts {
		out = append(out, concourse.WorkerArtifact{ID: a.ID, Name: a.Name, BuildID: a.BuildID, CreatedAt: a.CreateTime.Unix()})
	}
	httpreply.JSON(w, http.StatusOK, out)
}

// maxUnixTime is the last second of year 9999: later start times bound
// nothing more, and PostgreSQL cannot store them.
const maxUnixTime = 253402300799

// parsePage reads Concourse's build pages into f: to=N is N and older,
// from=N is N and newer (the older since/until are exclusive). With
// timestamps=true (fly builds --since/--until), from and to are Unix times
// bounding the builds' start, inclusive, as in Concourse.
func parsePage(q url.Values, f *db.BuildFilter) error {
	if q.Get("timestamps") == "true" {
		for _, p := range []struct {
			name string
			dst  *time.Time
		}{{"from", &f.StartedFrom}, {"to", &f.StartedTo}} {
			if v := q.Get(p.name); v != "" {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil || n <= 0 {
					return fmt.Errorf("%s=%q: want a Unix time (timestamps=true)", p.name, v)
				}
				// Past PostgreSQL's range the driver's encoding wraps
				// around (to=MaxInt64 became 1969: no builds).
				*p.dst = time.Unix(min(n, maxUnixTime), 0)
			}
		}
		return nil
	}
	for _, p := range []struct {
		name  string
		dst   *int64
		shift int64
	}{{"to", &f.Before, 1}, {"from", &f.After, -1}, {"since", &f.Before, 0}, {"until", &f.After, 0}} {
		if v := q.Get(p.name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				return fmt.Errorf("%s=%q: want a build id", p.name, v)
			}
			// No build has the largest id: to=MaxInt64 is every build,
			// not an overflow.
			*p.dst = min(n, math.MaxInt64-max(p.shift, 0)) + p.shift
		}
	}
	return nil
}
