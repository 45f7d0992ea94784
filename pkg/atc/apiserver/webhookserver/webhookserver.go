// Package webhookserver answers Concourse's resource check webhook:
// POST .../resources/R/check/webhook?webhook_token=T starts a check of R
// when T is R's webhook_token (its ((vars)) filled in). The token is the
// credential, so the route needs no login.
//
// The answers are Concourse 8.2.5's: 400 without webhook_token, 404 for a
// team, pipeline or resource that is not there, 409 for an archived
// pipeline, 401 for a wrong token (or a resource without webhook_token),
// and 201 with the check build.
//
// A flood is bounded by coalescing, per resource: while one call starts a
// check, the others on this server wait for it and answer its build; while
// a check runs, a call queues one more check to run after it (a push that
// came after the running check started may not be in what it sees) and
// answers the running build. So a resource has at most one check running
// and one queued, whatever the number of calls. The token's ((vars)) are
// looked up at most once per resource every tokenTTL, so a flood, of right
// or wrong tokens, does not become one credential manager request per call.
package webhookserver

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/porter-ci/porter/pkg/atc/apiserver/apierr"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/httpreply"
)

// Store is the database as the webhook reads and changes it.
type Store interface {
	Team(ctx context.Context, name string) (db.Team, error)
	PipelineInstance(ctx context.Context, teamID int, ref db.PipelineRef) (db.Pipeline, error)
	LookupPipelineResource(ctx context.Context, pipelineID int64, resource string) (db.ResourceRef, error)
	JobBuildByID(ctx context.Context, id int64) (db.JobBuild, error)
	// RequestCheck queues a check that the scheduler starts once the
	// running one ended.
	RequestCheck(ctx context.Context, resourceID int64, from map[string]string) error
}

// Engine starts checks and fills in ((vars)).
type Engine interface {
	// StartCheck starts a check of a resource, as `fly check-resource`
	// does; the build is set even when the check failed to start.
	StartCheck(ctx context.Context, res db.ResourceRef, from map[string]string) (db.JobBuild, error)
	// InterpolateString fills in the ((vars)) of s with the pipeline's
	// var_sources and its team's credential manager.
	InterpolateString(ctx context.Context, p db.Pipeline, s string) (string, error)
	WakeScheduler()
}

// startTimeout bounds starting one check; the caller that went away does
// not cut it short, as others may be waiting for it.
const startTimeout = 30 * time.Second

// tokenTTL is how long a filled-in token is used before its ((vars)) are
// looked up again: a rotated credential takes effect within it.
const tokenTTL = 5 * time.Second

// Server holds the handler's parts and the checks being started.
type Server struct {
	Store  Store
	Engine Engine
	// PipelineRef reads the path's pipeline and the query's instance vars
	// as every pipeline route does.
	PipelineRef func(*http.Request) (db.PipelineRef, error)
	// Present is a build's API shape.
	Present func(db.JobBuild) concourse.Build
	Log     *slog.Logger

	mu       sync.Mutex
	starting map[int64]*start       // by resource id
	tokens   map[int64]*cachedToken // by resource id
}

// cachedToken is a resource's filled-in token; its lock is held during a
// lookup, so that concurrent calls wait for one lookup.
type cachedToken struct {
	mu       sync.Mutex
	raw      string // the webhook_token as written
	value    string
	lookedUp time.Time
}

// start is one check being started; done closes when build and err are set.
type start struct {
	done  chan struct{}
	build db.JobBuild
	err   error
}

// CheckResource is the webhook of the path's resource.
func (s *Server) CheckResource(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	given := r.URL.Query().Get("webhook_token")
	if given == "" {
		apierr.Fail(w, r, s.Log, apierr.BadRequest(errors.New("missing webhook_token query parameter")))
		return
	}
	ref, err := s.PipelineRef(r)
	if err != nil {
		apierr.Fail(w, r, s.Log, apierr.BadRequest(err))
		return
	}
	teamName, resName := r.PathValue("team_name"), r.PathValue("resource_name")
	team, err := s.Store.Team(ctx, teamName)
	if errors.Is(err, db.ErrNotFound) {
		apierr.Fail(w, r, s.Log, apierr.NotFound("Team Not Found Error", fmt.Sprintf("team '%s' not found", teamName)))
		return
	}
	if err != nil {
		apierr.Fail(w, r, s.Log, fmt.Errorf("team %q: %w", teamName, err))
		return
	}
	p, err := s.Store.PipelineInstance(ctx, team.ID, ref)
	if errors.Is(err, db.ErrNotFound) {
		apierr.Fail(w, r, s.Log, apierr.NotFound("Pipeline Not Found Error", fmt.Sprintf("pipeline '%s' not found in team '%s'", ref, teamName)))
		return
	}
	if err != nil {
		apierr.Fail(w, r, s.Log, err)
		return
	}
	res, err := s.Store.LookupPipelineResource(ctx, p.ID, resName)
	if errors.Is(err, db.ErrNotFound) {
		apierr.Fail(w, r, s.Log, apierr.NotFound("Resource Not Found Error", fmt.Sprintf("Resource with name '%s' not found.", resName)))
		return
	}
	if err != nil {
		apierr.Fail(w, r, s.Log, err)
		return
	}
	if err := s.checkToken(ctx, p, res, given); err != nil {
		apierr.Fail(w, r, s.Log, err)
		return
	}
	// After the token: whether a pipeline is archived is for its callers.
	if p.Archived {
		apierr.Fail(w, r, s.Log, apierr.WithStatus(http.StatusConflict,
			fmt.Errorf("action not allowed for an archived pipeline: set pipeline %q again first", p.Name)))
		return
	}
	b, err := s.check(ctx, res)
	if err != nil {
		if b.ID == 0 {
			apierr.Fail(w, r, s.Log, err)
			return
		}
		// The check build exists and shows why it failed.
		s.Log.Warn("check webhook", "pipeline", p.Name, "resource", res.Name, "err", err)
	}
	httpreply.JSON(w, http.StatusCreated, s.Present(b))
}

// checkToken compares the given token with the resource's, in constant
// time. A resource without webhook_token refuses every token.
func (s *Server) checkToken(ctx context.Context, p db.Pipeline, res db.ResourceRef, given string) error {
	var rc concourse.ResourceConfig
	if err := json.Unmarshal(res.Config, &rc); err != nil {
		return fmt.Errorf("resource %s: decode its config: %w", res.Name, err)
	}
	refused := apierr.WithStatus(http.StatusUnauthorized, errors.New("not authorized: wrong webhook_token"))
	if rc.WebhookToken == "" {
		return refused
	}
	want, err := s.token(ctx, p, res.ID, rc.WebhookToken)
	if err != nil {
		return fmt.Errorf("resource %s: fill in the ((vars)) of its webhook_token: %w", res.Name, err)
	}
	if want == "" || subtle.ConstantTimeCompare([]byte(want), []byte(given)) != 1 {
		s.Log.InfoContext(ctx, "check webhook refused: wrong webhook_token", "team", res.TeamName, "pipeline", p.Name, "resource", res.Name)
		return refused
	}
	return nil
}

// check starts a check of res, or joins the one being started, or queues
// one after the one running (see the package's doc).
func (s *Server) check(ctx context.Context, res db.ResourceRef) (db.JobBuild, error) {
	s.mu.Lock()
	if st, ok := s.starting[res.ID]; ok {
		s.mu.Unlock()
		select {
		case <-st.done:
			return st.build, st.err
		case <-ctx.Done():
			return db.JobBuild{}, fmt.Errorf("wait for the check of %s: %w", res.Name, ctx.Err())
		}
	}
	if s.starting == nil {
		s.starting = map[int64]*start{}
	}
	st := &start{done: make(chan struct{})}
	s.starting[res.ID] = st
	s.mu.Unlock()

	startCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	defer cancel()
	st.build, st.err = s.startOrQueue(startCtx, res)
	s.mu.Lock()
	delete(s.starting, res.ID)
	s.mu.Unlock()
	close(st.done)
	return st.build, st.err
}

func (s *Server) startOrQueue(ctx context.Context, res db.ResourceRef) (db.JobBuild, error) {
	// Read again: a check started just before is now the last one.
	res, err := s.Store.LookupPipelineResource(ctx, res.PipelineID, res.Name)
	if err != nil {
		return db.JobBuild{}, err
	}
	if res.LastCheckBuild != 0 {
		last, err := s.Store.JobBuildByID(ctx, res.LastCheckBuild)
		if err != nil && !errors.Is(err, db.ErrNotFound) {
			return db.JobBuild{}, err
		}
		if err == nil && !last.Status.Finished() {
			if err := s.Store.RequestCheck(ctx, res.ID, nil); err != nil {
				return db.JobBuild{}, fmt.Errorf("queue a check of %s after build %d: %w", res.Name, last.ID, err)
			}
			// The scheduler starts it when the running one ends; woken
			// now too, in case it already did.
			s.Engine.WakeScheduler()
			return last, nil
		}
	}
	return s.Engine.StartCheck(ctx, res, nil)
}

// token is raw with its ((vars)) filled in, looked up again after tokenTTL
// or when raw changed; failures are not kept.
func (s *Server) token(ctx context.Context, p db.Pipeline, resourceID int64, raw string) (string, error) {
	s.mu.Lock()
	if s.tokens == nil {
		s.tokens = map[int64]*cachedToken{}
	}
	c, ok := s.tokens[resourceID]
	if !ok {
		if len(s.tokens) >= 1024 {
			s.pruneTokens()
		}
		c = &cachedToken{}
		s.tokens[resourceID] = c
	}
	s.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.raw == raw && time.Since(c.lookedUp) < tokenTTL {
		return c.value, nil
	}
	v, err := s.Engine.InterpolateString(ctx, p, raw)
	if err != nil {
		return "", err
	}
	c.raw, c.value, c.lookedUp = raw, v, time.Now()
	return v, nil
}

// pruneTokens forgets the tokens of resources not called within tokenTTL
// (deleted ones among them); s.mu is held.
func (s *Server) pruneTokens() {
	for id, c := range s.tokens {
		if c.mu.TryLock() {
			if time.Since(c.lookedUp) >= tokenTTL {
				delete(s.tokens, id)
			}
			c.mu.Unlock()
		}
	}
}
