package db

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Worker is a Kubernetes API and a namespace that runs step pods.
type Worker struct {
	Name             string
	Platform         string
	Tags             []string
	Team             string // "": every team
	State            string // running, stalled, landing, landed, retiring
	Namespace        string
	Version          string
	StartTime        time.Time
	Heartbeat        time.Time
	ActiveContainers int
}

const workerColumns = "name, platform, tags, team, state, namespace, version, start_time, heartbeat, active_containers"

func scanWorker(row pgx.Row) (Worker, error) {
	var w Worker
	var start *time.Time
	err := row.Scan(&w.Name, &w.Platform, &w.Tags, &w.Team, &w.State, &w.Namespace, &w.Version,
		&start, &w.Heartbeat, &w.ActiveContainers)
	w.StartTime = nullTime(start)
	return w, err
}

// UpsertWorker registers a worker or updates it, and sets its Heartbeat to now
// (the database's clock, so servers with skewed clocks agree).
func (d *DB) UpsertWorker(ctx context.Context, w Worker) error {
	if w.Platform == "" {
		w.Platform = "linux"
	}
	if w.Tags == nil {
		w.Tags = []string{}
	}
	_, err := d.pool.Exec(ctx, `
		INSERT INTO workers (name, platform, tags, team, state, namespace, version, start_time, heartbeat, active_containers)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now(), $9)
		ON CONFLICT (name) DO UPDATE SET
			platform = excluded.platform, tags = excluded.tags, team = excluded.team,
			state = excluded.state, namespace = excluded.namespace, version = excluded.version,
			start_time = excluded.start_time, heartbeat = now(),
			active_containers = excluded.active_containers`,
		w.Name, w.Platform, w.Tags, w.Team, w.State, w.Namespace, w.Version, timeArg(w.StartTime), w.ActiveContainers)
	if err != nil {
		return fmt.Errorf("save worker %s: %w", w.Name, err)
	}
	return nil
}

// Workers lists every worker by name.
func (d *DB) Workers(ctx context.Context) ([]Worker, error) {
	rows, err := d.pool.Query(ctx, "SELECT "+workerColumns+" FROM workers ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	ws, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Worker, error) { return scanWorker(r) })
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	return ws, nil
}

// Worker looks a worker up by name.
func (d *DB) Worker(ctx context.Context, name string) (Worker, error) {
	w, err := scanWorker(d.pool.QueryRow(ctx, "SELECT "+workerColumns+" FROM workers WHERE name = $1", name))
	if err != nil {
		return Worker{}, classify(err, "worker %s", name)
	}
	return w, nil
}
