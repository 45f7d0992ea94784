// Package containers is the part of Porter's store that records step
// pods as Concourse's API shows containers (fly containers, fly
// intercept), with what the garbage collector's retention rules read of
// finished ones.
package containers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db/internal/pg"
)

// Records holds the containers.
type Records struct{ pool *pgxpool.Pool }

// New is the store on pool.
func New(pool *pgxpool.Pool) *Records { return &Records{pool: pool} }

// Container is a step pod as Concourse's API shows it.
type Container struct {
	Handle           string // a UUID
	TeamID           int    // 0: none
	BuildID          int64  // 0: none
	BuildName        string
	PlanID           string
	StepName         string
	Type             concourse.StepKind // task, get, put, check
	WorkerName       string
	Namespace        string
	PodName          string
	StepID           string
	State            concourse.ContainerState
	WorkingDirectory string
	User             string
	CreateTime       time.Time
	// Where its build belongs (Containers fills them): a job's build's
	// pipeline and job, a check's pipeline and resource.
	PipelineID                      int64
	PipelineName, JobName, Resource string
	JobID                           int64
	// KeptReason says why GC keeps the finished step's pod ('' while the
	// step runs, or before GC's first pass over it).
	KeptReason string
}

const containerColumns = `handle, coalesce(team_id, 0), coalesce(build_id, 0), build_name, plan_id,
	step_name, type, worker_name, namespace, pod_name, step_id, state, working_directory, "user", create_time, kept_reason`

func scanContainer(row pgx.Row) (Container, error) {
	var c Container
	err := row.Scan(&c.Handle, &c.TeamID, &c.BuildID, &c.BuildName, &c.PlanID, &c.StepName, &c.Type,
		&c.WorkerName, &c.Namespace, &c.PodName, &c.StepID, &c.State, &c.WorkingDirectory, &c.User, &c.CreateTime, &c.KeptReason)
	return c, err
}

// CreateContainer records a container; an empty Handle gets a new UUID, an
// empty State is "creating". A handle in use is ErrConflict.
func (s *Records) CreateContainer(ctx context.Context, c Container) (Container, error) {
	return createContainer(ctx, s.pool, c)
}

// ErrWaitingLimit is returned by CreateWaitingContainer when the worker
// already holds its share of pods declared ahead.
var ErrWaitingLimit = errors.New("the worker holds its share of pods declared ahead")

// waitingLockClass is the first key of the per-worker advisory lock that
// makes the share of pods declared ahead exact (pg's two-key locks are
// apart from the one-key locks of db.LockID).
const waitingLockClass = 7301

// CreateWaitingContainer records the container of a pod declared ahead of
// its turn (state waiting) only while its worker holds fewer than limit
// such containers, from every build and server: the count and the insert
// are one transaction under the worker's lock, so builds declaring at the
// same moment cannot pass the share. At the limit it returns
// ErrWaitingLimit.
func (s *Records) CreateWaitingContainer(ctx context.Context, c Container, limit int) (Container, error) {
	c.State = concourse.ContainerWaiting
	var out Container
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, hashtext($2))", waitingLockClass, c.WorkerName); err != nil {
			return fmt.Errorf("lock worker %s's pods declared ahead: %w", c.WorkerName, err)
		}
		var n int
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM containers WHERE worker_name = $1 AND state = 'waiting'", c.WorkerName).Scan(&n); err != nil {
			return fmt.Errorf("count worker %s's pods declared ahead: %w", c.WorkerName, err)
		}
		if n >= limit {
			return fmt.Errorf("worker %s holds %d pods declared ahead: %w", c.WorkerName, n, ErrWaitingLimit)
		}
		var err error
		out, err = createContainer(ctx, tx, c)
		return err
	})
	return out, err
}

func createContainer(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, c Container) (Container, error) {
	if c.State == "" {
		c.State = "creating"
	}
	out, err := scanContainer(q.QueryRow(ctx, `
		INSERT INTO containers (handle, team_id, build_id, build_name, plan_id, step_name, type,
			worker_name, namespace, pod_name, step_id, state, working_directory, "user")
		VALUES (coalesce(nullif($1, ''), gen_random_uuid()::text), $2, $3, $4, $5, $6, $7,
			$8, $9, $10, $11, $12, $13, $14)
		RETURNING `+containerColumns,
		c.Handle, pg.ZeroNull(c.TeamID), pg.ZeroNull(c.BuildID), c.BuildName, c.PlanID, c.StepName, c.Type,
		c.WorkerName, c.Namespace, c.PodName, c.StepID, c.State, c.WorkingDirectory, c.User))
	if err != nil {
		return Container{}, pg.Classify(err, "create container %s (%s %s of build %d)", c.Handle, c.Type, c.StepName, c.BuildID)
	}
	return out, nil
}

// SetContainerState moves a container to state (creating, created, destroying).
func (s *Records) SetContainerState(ctx context.Context, handle string, state concourse.ContainerState) error {
	tag, err := s.pool.Exec(ctx, "UPDATE containers SET state = $2 WHERE handle = $1", handle, state)
	if err != nil {
		return fmt.Errorf("set container %s %s: %w", handle, state, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("set container %s %s: %w", handle, state, pg.ErrNotFound)
	}
	return nil
}

// MoveContainerState moves a container from state from to state to, and
// says whether it was in from: of two parties racing for a pod declared
// ahead (the build giving it its go-ahead, gc freeing it for a running
// step), exactly one moves it out of waiting.
func (s *Records) MoveContainerState(ctx context.Context, handle string, from, to concourse.ContainerState) (bool, error) {
	tag, err := s.pool.Exec(ctx, "UPDATE containers SET state = $3 WHERE handle = $1 AND state = $2", handle, from, to)
	if err != nil {
		return false, fmt.Errorf("move container %s from %s to %s: %w", handle, from, to, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Container looks a container up by handle.
func (s *Records) Container(ctx context.Context, handle string) (Container, error) {
	c, err := scanContainer(s.pool.QueryRow(ctx, "SELECT "+containerColumns+" FROM containers WHERE handle = $1", handle))
	if err != nil {
		return Container{}, pg.Classify(err, "container %s", handle)
	}
	return c, nil
}

// ContainerFilter selects containers; zero fields match everything.
type ContainerFilter struct {
	TeamID   int
	BuildID  int64
	StepName string
	Type     string
	PlanID   string
	// Where the container's build belongs (fly intercept -j P/J, --check).
	PipelineName, JobName, BuildName, ResourceName string
	// InstanceVars name the instance of PipelineName (none: the pipeline
	// that is no instance), as in Concourse.
	InstanceVars map[string]any
}

// Containers lists the containers that match f, oldest first, with
// where their builds belong.
func (s *Records) Containers(ctx context.Context, f ContainerFilter) ([]Container, error) {
	instanceVars, err := pg.InstanceVarsJSON(f.InstanceVars)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	rows, err := s.pool.Query(ctx, "SELECT "+containerColumns+`, pipeline_id, pipeline_name, job_id, job_name, resource_name FROM (
			SELECT containers.*, COALESCE(b.pipeline_id, 0) AS pipeline_id, COALESCE(p.name, '') AS pipeline_name,
				COALESCE(p.instance_vars, '{}') AS pipeline_instance_vars, COALESCE(b.job_id, 0) AS job_id, COALESCE(j.name, '') AS job_name, COALESCE(r.name, '') AS resource_name
			FROM containers LEFT JOIN builds b ON b.id = containers.build_id
				LEFT JOIN pipelines p ON p.id = b.pipeline_id LEFT JOIN jobs j ON j.id = b.job_id
				LEFT JOIN resources r ON r.id = b.resource_id) c
		WHERE ($1 = 0 OR team_id = $1)
		  AND ($2 = 0 OR build_id = $2)
		  AND ($3 = '' OR step_name = $3)
		  AND ($4 = '' OR type = $4)
		  AND ($5 = '' OR plan_id = $5)
		  AND ($6 = '' OR (pipeline_name = $6 AND pipeline_instance_vars = $10::jsonb))
		  AND ($7 = '' OR job_name = $7)
		  AND ($8 = '' OR build_name = $8)
		  AND ($9 = '' OR resource_name = $9)
		ORDER BY create_time, handle`,
		f.TeamID, f.BuildID, f.StepName, f.Type, f.PlanID, f.PipelineName, f.JobName, f.BuildName, f.ResourceName, instanceVars)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Container, error) {
		var c Container
		err := r.Scan(&c.Handle, &c.TeamID, &c.BuildID, &c.BuildName, &c.PlanID, &c.StepName, &c.Type,
			&c.WorkerName, &c.Namespace, &c.PodName, &c.StepID, &c.State, &c.WorkingDirectory, &c.User, &c.CreateTime, &c.KeptReason,
			&c.PipelineID, &c.PipelineName, &c.JobID, &c.JobName, &c.Resource)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	return cs, nil
}

// DeleteContainer forgets a container (its pod is gone).
func (s *Records) DeleteContainer(ctx context.Context, handle string) error {
	tag, err := s.pool.Exec(ctx, "DELETE FROM containers WHERE handle = $1", handle)
	if err != nil {
		return fmt.Errorf("delete container %s: %w", handle, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("delete container %s: %w", handle, pg.ErrNotFound)
	}
	return nil
}

// FinishedContainer is the container of a finished step (or of no build)
// with what the garbage collector's retention rules read about it.
type FinishedContainer struct {
	Container
	// BuildStatus is "" when the container has no build.
	BuildStatus concourse.BuildStatus
	// Ended is the build's end, or the container's creation without a build.
	Ended time.Time
	// JobBuild, Check: a job's build, a resource's check build (neither:
	// a one-off build).
	JobBuild bool
	Check    bool
	// LatestOfJob: the job's latest finished build. LatestCheck: the
	// resource's latest finished check.
	LatestOfJob bool
	LatestCheck bool
	// InterceptSessions are open (fly intercept); LastIntercept is when one
	// last opened or closed (zero: never).
	InterceptSessions int
	LastIntercept     time.Time
}

// FinishedContainers lists the containers of worker whose build finished,
// or that have no build, oldest end first.
func (s *Records) FinishedContainers(ctx context.Context, worker string) ([]FinishedContainer, error) {
	rows, err := s.pool.Query(ctx, `SELECT c.handle, coalesce(c.team_id, 0), coalesce(c.build_id, 0), c.build_name, c.plan_id,
			c.step_name, c.type, c.worker_name, c.namespace, c.pod_name, c.step_id, c.state, c.working_directory, c."user", c.create_time, c.kept_reason,
			coalesce(b.status, ''), coalesce(b.end_time, c.create_time), b.job_id IS NOT NULL, b.resource_id IS NOT NULL,
			b.job_id IS NOT NULL AND b.id = (SELECT lb.id FROM builds lb WHERE lb.job_id = b.job_id AND NOT lb.status IN ('pending', 'started')
				ORDER BY lb.id DESC LIMIT 1),
			b.resource_id IS NOT NULL AND b.id = (SELECT lc.id FROM builds lc WHERE lc.resource_id = b.resource_id AND NOT lc.status IN ('pending', 'started')
				ORDER BY lc.id DESC LIMIT 1),
			c.intercept_sessions, c.last_intercept
		FROM containers c LEFT JOIN builds b ON b.id = c.build_id
		WHERE c.worker_name = $1 AND (b.id IS NULL OR NOT b.status IN ('pending', 'started'))
		ORDER BY 18, c.handle`, worker)
	if err != nil {
		return nil, fmt.Errorf("list the finished containers of worker %s: %w", worker, err)
	}
	cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FinishedContainer, error) {
		var f FinishedContainer
		var last *time.Time
		c := &f.Container
		err := r.Scan(&c.Handle, &c.TeamID, &c.BuildID, &c.BuildName, &c.PlanID, &c.StepName, &c.Type,
			&c.WorkerName, &c.Namespace, &c.PodName, &c.StepID, &c.State, &c.WorkingDirectory, &c.User, &c.CreateTime, &c.KeptReason,
			&f.BuildStatus, &f.Ended, &f.JobBuild, &f.Check, &f.LatestOfJob, &f.LatestCheck,
			&f.InterceptSessions, &last)
		if last != nil {
			f.LastIntercept = *last
		}
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("list the finished containers of worker %s: %w", worker, err)
	}
	return cs, nil
}

// SetKeptReason records why the collector keeps a container's pod.
func (s *Records) SetKeptReason(ctx context.Context, handle, reason string) error {
	if _, err := s.pool.Exec(ctx, "UPDATE containers SET kept_reason = $2 WHERE handle = $1 AND kept_reason <> $2", handle, reason); err != nil {
		return fmt.Errorf("record why container %s is kept: %w", handle, err)
	}
	return nil
}

// InterceptStarted and InterceptEnded count a container's open intercept
// sessions and note when one last opened or closed.
func (s *Records) InterceptStarted(ctx context.Context, handle string) error {
	return s.intercept(ctx, handle, "intercept_sessions + 1")
}

// InterceptEnded: see InterceptStarted.
func (s *Records) InterceptEnded(ctx context.Context, handle string) error {
	return s.intercept(ctx, handle, "greatest(intercept_sessions - 1, 0)")
}

func (s *Records) intercept(ctx context.Context, handle, sessions string) error {
	if _, err := s.pool.Exec(ctx, "UPDATE containers SET intercept_sessions = "+sessions+", last_intercept = now() WHERE handle = $1", handle); err != nil {
		return fmt.Errorf("record an intercept session of container %s: %w", handle, err)
	}
	return nil
}

// ExpiredContainers lists the container records of worker whose build
// finished before endedBefore: their pods may go.
func (s *Records) ExpiredContainers(ctx context.Context, worker string, endedBefore time.Time) ([]Container, error) {
	rows, err := s.pool.Query(ctx, "SELECT "+containerColumns+` FROM containers WHERE handle IN (
		SELECT c.handle FROM containers c LEFT JOIN builds b ON b.id = c.build_id
		WHERE c.worker_name = $1 AND ((b.id IS NULL AND c.create_time < $2) OR (NOT b.status IN ('pending', 'started') AND b.end_time < $2)))
		ORDER BY create_time, handle`, worker, endedBefore)
	if err != nil {
		return nil, fmt.Errorf("list the expired containers of worker %s: %w", worker, err)
	}
	cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Container, error) { return scanContainer(r) })
	if err != nil {
		return nil, fmt.Errorf("list the expired containers of worker %s: %w", worker, err)
	}
	return cs, nil
}
