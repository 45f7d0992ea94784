// Package buildaccess decides who may read a build, as Concourse does: a
// role in the build's team, or anyone for a job's build in an exposed
// pipeline (the build itself for any job; its plan, events, logs and
// artifacts only for a job with `public: true`).
package buildaccess

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/porter-ci/porter/pkg/atc/apiserver/apierr"
	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
)

// Store is what the decision reads (*db.DB).
type Store interface {
	Build(ctx context.Context, id int64) (db.Build, error)
	JobBuildByID(ctx context.Context, id int64) (db.JobBuild, error)
	PipelineByID(ctx context.Context, id int64) (db.Pipeline, error)
	Job(ctx context.Context, pipelineID int64, name string) (db.Job, error)
}

// Guard admits the reads of the path's build ({build_id}) its rules allow;
// Fail answers the others (the API server's error reply).
type Guard struct {
	Store Store
	Fail  func(http.ResponseWriter, *http.Request, error)
}

// Read is a read of the path's build that anyone may make of a job's build
// in an exposed pipeline: the build itself for any job, and (publicJob)
// its plan, events and artifacts only for a job with `public: true`.
// Anyone else needs a role in the build's team: 401 without a token, 403
// with one.
func (g Guard) Read(publicJob bool, h func(http.ResponseWriter, *http.Request, db.Build)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(r.PathValue("build_id"), 10, 64)
		if err != nil || id <= 0 {
			g.Fail(w, r, apierr.BadRequest(errors.New("build id must be a positive number")))
			return
		}
		b, err := g.Store.Build(r.Context(), id)
		if err != nil {
			g.Fail(w, r, fmt.Errorf("build %d: %w", id, err))
			return
		}
		claims, authed := auth.FromContext(r.Context())
		if authed && claims.Can(b.TeamName, auth.ActionRead) {
			h(w, r, b)
			return
		}
		ok, err := g.public(r.Context(), b, publicJob)
		switch {
		case err != nil:
			g.Fail(w, r, fmt.Errorf("build %d: %w", id, err))
		case ok:
			h(w, r, b)
		case !authed:
			g.Fail(w, r, apierr.Unauthenticated(r))
		default:
			g.Fail(w, r, apierr.Forbidden(fmt.Sprintf("build %d belongs to a team you are not allowed to %s in", id, auth.ActionRead)))
		}
	}
}

// ShowsComment tells whether the reader of b (admitted by Read) sees its
// comment, as Concourse decides: a role in its team, or b is a build of a
// job with `public: true` in an exposed pipeline.
func (g Guard) ShowsComment(r *http.Request, b db.Build) (bool, error) {
	if claims, ok := auth.FromContext(r.Context()); ok && claims.CanRead(b.TeamName) {
		return true, nil
	}
	ok, err := g.public(r.Context(), b, true)
	if err != nil {
		return false, fmt.Errorf("build %d: %w", b.ID, err)
	}
	return ok, nil
}

// public tells whether b is a job's build in an exposed pipeline (and,
// with publicJob, of a job with `public: true`). One-off builds and
// checks' builds never are.
func (g Guard) public(ctx context.Context, b db.Build, publicJob bool) (bool, error) {
	jb, err := g.Store.JobBuildByID(ctx, b.ID)
	if err != nil {
		return false, err
	}
	if jb.PipelineID == 0 || jb.JobID == 0 {
		return false, nil
	}
	p, err := g.Store.PipelineByID(ctx, jb.PipelineID)
	if errors.Is(err, db.ErrNotFound) {
		return false, nil
	}
	if err != nil || !p.Public || p.TeamID != b.TeamID {
		return false, err
	}
	if !publicJob {
		return true, nil
	}
	j, err := g.Store.Job(ctx, p.ID, jb.JobName)
	if errors.Is(err, db.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var cfg concourse.JobConfig
	return json.Unmarshal(j.Config, &cfg) == nil && cfg.Public, nil
}
