package db

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/porter-ci/porter/pkg/concourse"
)

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
func (d *DB) FinishedContainers(ctx context.Context, worker string) ([]FinishedContainer, error) {
	rows, err := d.pool.Query(ctx, `SELECT c.handle, coalesce(c.team_id, 0), coalesce(c.build_id, 0), c.build_name, c.plan_id,
			c.step_name, c.type, c.worker_name, c.namespace, c.pod_name, c.step_id, c.state, c.working_directory, c."user", c.create_time, c.kept_reason,
			coalesce(b.status, ''), coalesce(b.end_time, c.create_time), b.job_id IS NOT NULL, b.resource_id IS NOT NULL,
			b.job_id IS NOT NULL AND b.id = (SELECT lb.id FROM builds lb WHERE lb.job_id = b.job_id AND NOT lb.`+unfinished+`
				ORDER BY lb.id DESC LIMIT 1),
			b.resource_id IS NOT NULL AND b.id = (SELECT lc.id FROM builds lc WHERE lc.resource_id = b.resource_id AND NOT lc.`+unfinished+`
				ORDER BY lc.id DESC LIMIT 1),
			c.intercept_sessions, c.last_intercept
		FROM containers c LEFT JOIN builds b ON b.id = c.build_id
		WHERE c.worker_name = $1 AND (b.id IS NULL OR NOT b.`+unfinished+`)
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
func (d *DB) SetKeptReason(ctx context.Context, handle, reason string) error {
	if _, err := d.pool.Exec(ctx, "UPDATE containers SET kept_reason = $2 WHERE handle = $1 AND kept_reason <> $2", handle, reason); err != nil {
		return fmt.Errorf("record why container %s is kept: %w", handle, err)
	}
	return nil
}

// InterceptStarted and InterceptEnded count a container's open intercept
// sessions and note when one last opened or closed.
func (d *DB) InterceptStarted(ctx context.Context, handle string) error {
	return d.intercept(ctx, handle, "intercept_sessions + 1")
}

// InterceptEnded: see InterceptStarted.
func (d *DB) InterceptEnded(ctx context.Context, handle string) error {
	return d.intercept(ctx, handle, "greatest(intercept_sessions - 1, 0)")
}

func (d *DB) intercept(ctx context.Context, handle, sessions string) error {
	if _, err := d.pool.Exec(ctx, "UPDATE containers SET intercept_sessions = "+sessions+", last_intercept = now() WHERE handle = $1", handle); err != nil {
		return fmt.Errorf("record an intercept session of container %s: %w", handle, err)
	}
	return nil
}
