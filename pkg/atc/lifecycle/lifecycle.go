// Package lifecycle is what happens around a team's or a pipeline's
// records when it is renamed or destroyed: its running builds are aborted
// first, and its task caches in the blobstore move with it or go, so that
// a new team or pipeline of the old name starts empty.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/db"
)

// Store is the database as the workflows use it.
type Store interface {
	TeamUnfinishedBuilds(ctx context.Context, teamID int) ([]int64, error)
	DeleteTeam(ctx context.Context, id int) error
	RenameTeam(ctx context.Context, id int, name string) error
	PipelineUnfinishedBuilds(ctx context.Context, id int64) ([]int64, error)
	DeletePipeline(ctx context.Context, id int64) error
	RenamePipeline(ctx context.Context, id int64, name string) error
}

// Workflows change a team's or a pipeline's records and what belongs to
// them elsewhere.
type Workflows struct {
	Store Store
	// Blobs hold the task caches.
	Blobs blobstore.Store
	// Abort aborts an unfinished build wherever it runs.
	Abort func(ctx context.Context, id int64) error
	Log   *slog.Logger
}

// DestroyTeam removes a team with its pipelines and builds: its running
// builds are aborted first, and its task caches go too, so that a new team
// of that name starts empty.
func (e Workflows) DestroyTeam(ctx context.Context, team db.Team) error {
	running, err := e.Store.TeamUnfinishedBuilds(ctx, team.ID)
	if err != nil {
		return err
	}
	e.abortAll(ctx, running, "team destroyed")
	if err := e.Store.DeleteTeam(ctx, team.ID); err != nil {
		return err
	}
	if prefix, err := blobstore.TaskCachePrefix(team.Name); err == nil {
		if _, err := e.ClearTaskCaches(ctx, prefix); err != nil {
			e.Log.ErrorContext(ctx, "deleting the task caches of a destroyed team", "prefix", prefix, "err", err)
		}
	}
	return nil
}

// RenameTeam renames a team (db.ErrConflict: the name is taken) and moves
// its task caches along.
func (e Workflows) RenameTeam(ctx context.Context, team db.Team, name string) error {
	if err := e.Store.RenameTeam(ctx, team.ID, name); err != nil {
		return err
	}
	from, err1 := blobstore.TaskCachePrefix(team.Name)
	to, err2 := blobstore.TaskCachePrefix(name)
	if err1 == nil && err2 == nil {
		if err := e.moveObjects(ctx, from, to); err != nil {
			e.Log.ErrorContext(ctx, "moving the task caches of a renamed team", "from", from, "to", to, "err", err)
		}
	}
	return nil
}

// DestroyPipeline removes a pipeline with its jobs, builds, resources and
// versions (its running builds are aborted first) and its task caches: a
// new pipeline of the same name must not find them.
func (e Workflows) DestroyPipeline(ctx context.Context, team string, p db.Pipeline) error {
	running, err := e.Store.PipelineUnfinishedBuilds(ctx, p.ID)
	if err != nil {
		return err
	}
	e.abortAll(ctx, running, "pipeline destroyed")
	if err := e.Store.DeletePipeline(ctx, p.ID); err != nil {
		return err
	}
	if prefix, err := blobstore.TaskCachePrefix(team, blobstore.TaskCachePipeline(p.Name, p.InstanceVars)); err == nil {
		if _, err := e.ClearTaskCaches(ctx, prefix); err != nil {
			e.Log.ErrorContext(ctx, "deleting the task caches of a deleted pipeline", "prefix", prefix, "err", err)
		}
	}
	return nil
}

// RenamePipeline renames a pipeline (db.ErrConflict: the team has one of
// that name) and moves its task caches along.
func (e Workflows) RenamePipeline(ctx context.Context, team string, p db.Pipeline, name string) error {
	if err := e.Store.RenamePipeline(ctx, p.ID, name); err != nil {
		return err
	}
	from, err1 := blobstore.TaskCachePrefix(team, blobstore.TaskCachePipeline(p.Name, p.InstanceVars))
	to, err2 := blobstore.TaskCachePrefix(team, blobstore.TaskCachePipeline(name, p.InstanceVars))
	if err1 == nil && err2 == nil {
		if err := e.moveObjects(ctx, from, to); err != nil {
			e.Log.ErrorContext(ctx, "moving the task caches of a renamed pipeline", "from", from, "to", to, "err", err)
		}
	}
	return nil
}

// ClearTaskCaches deletes every task cache under prefix and says how many.
func (e Workflows) ClearTaskCaches(ctx context.Context, prefix string) (int64, error) {
	objs, err := e.Blobs.List(ctx, prefix)
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", prefix, err)
	}
	var n int64
	var errs []error
	for _, o := range objs {
		if err := e.Blobs.Delete(ctx, o.Key); err != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", o.Key, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// moveObjects moves every object under from to the same key under to.
func (e Workflows) moveObjects(ctx context.Context, from, to string) error {
	objs, err := e.Blobs.List(ctx, from)
	if err != nil {
		return fmt.Errorf("list %s: %w", from, err)
	}
	var errs []error
	for _, o := range objs {
		dst := to + strings.TrimPrefix(o.Key, from)
		if _, err := e.Blobs.Copy(ctx, o.Key, dst); err != nil {
			errs = append(errs, fmt.Errorf("copy %s to %s: %w", o.Key, dst, err))
			continue
		}
		if err := e.Blobs.Delete(ctx, o.Key); err != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", o.Key, err))
		}
	}
	return errors.Join(errs...)
}

// abortAll aborts builds whose team or pipeline goes (their pods go; their
// records go with it).
func (e Workflows) abortAll(ctx context.Context, ids []int64, why string) {
	for _, id := range ids {
		if err := e.Abort(ctx, id); err != nil {
			e.Log.WarnContext(ctx, "abort a build", "build", id, "why", why, "err", err)
		}
	}
}
