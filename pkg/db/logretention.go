package db

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/porter-ci/porter/pkg/concourse"
)

// JobLogConfig is a job's name and config, as build log retention reads it.
type JobLogConfig struct {
	JobID  int64
	Config json.RawMessage
}

// JobLogConfigs are the jobs of unpaused pipelines that are not paused
// (Concourse reaps only those: a paused job's history is left as it is).
func (d *DB) JobLogConfigs(ctx context.Context) ([]JobLogConfig, error) {
	rows, err := d.pool.Query(ctx, `SELECT j.id, j.config FROM jobs j JOIN pipelines p ON p.id = j.pipeline_id
		WHERE NOT j.paused AND NOT p.paused ORDER BY j.id`)
	if err != nil {
		return nil, fmt.Errorf("list jobs for build log retention: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (JobLogConfig, error) {
		var j JobLogConfig
		err := r.Scan(&j.JobID, &j.Config)
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("list jobs for build log retention: %w", err)
	}
	return jobs, nil
}

// LoggedBuild is a job's build whose log has not been reaped.
type LoggedBuild struct {
	ID      int64
	Status  concourse.BuildStatus
	EndTime time.Time // zero while it runs
}

// LoggedBuilds are the job's builds whose logs are kept, newest first.
func (d *DB) LoggedBuilds(ctx context.Context, jobID int64) ([]LoggedBuild, error) {
	rows, err := d.pool.Query(ctx, `SELECT id, status, coalesce(end_time, 'epoch') FROM builds
		WHERE job_id = $1 AND reap_time IS NULL ORDER BY id DESC`, jobID)
	if err != nil {
		return nil, fmt.Errorf("list job %d's logged builds: %w", jobID, err)
	}
	builds, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LoggedBuild, error) {
		var b LoggedBuild
		err := r.Scan(&b.ID, &b.Status, &b.EndTime)
		if b.EndTime.Equal(time.Unix(0, 0)) {
			b.EndTime = time.Time{}
		}
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("list job %d's logged builds: %w", jobID, err)
	}
	return builds, nil
}

// ReapBuildLogs deletes the finished builds' log index and marks them
// reaped; the objects go with the collector's next look at unreferenced
// log objects (migration 0007's triggers note them). A build still running
// is left alone.
func (d *DB) ReapBuildLogs(ctx context.Context, ids []int64) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	var n int64
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE builds SET reap_time = now()
			WHERE id = ANY($1) AND end_time IS NOT NULL AND reap_time IS NULL`, ids)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		_, err = tx.Exec(ctx, `DELETE FROM build_event_chunks c USING builds b
			WHERE c.build_id = b.id AND b.id = ANY($1) AND b.reap_time IS NOT NULL`, ids)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("reap the logs of %d builds: %w", len(ids), err)
	}
	return n, nil
}
