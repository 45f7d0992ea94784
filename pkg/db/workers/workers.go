// Package workers is the part of Porter's store that registers the
// workers: their state (running, stalled, landing, landed, retiring), their
// heartbeats and the load of builds on them.
package workers

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

// Worker is a Kubernetes API and a namespace that runs step pods.
type Worker struct {
	Name             string
	Platform         string
	Tags             []string
	Team             string // "": every team
	State            concourse.WorkerState
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
	w.StartTime = pg.NullTime(start)
	return w, err
}

// UpsertWorker registers a worker or updates it, and sets its Heartbeat to now
// (the database's clock, so servers with skewed clocks agree).
func (s *Registry) UpsertWorker(ctx context.Context, w Worker) error {
	if w.Platform == "" {
		w.Platform = "linux"
	}
	if w.Tags == nil {
		w.Tags = []string{}
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO workers (name, platform, tags, team, state, namespace, version, start_time, heartbeat, active_containers)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now(), $9)
		ON CONFLICT (name) DO UPDATE SET
			platform = excluded.platform, tags = excluded.tags, team = excluded.team,
			state = excluded.state, namespace = excluded.namespace, version = excluded.version,
			start_time = excluded.start_time, heartbeat = now(),
			active_containers = excluded.active_containers`,
		w.Name, w.Platform, w.Tags, w.Team, w.State, w.Namespace, w.Version, pg.TimeArg(w.StartTime), w.ActiveContainers)
	if err != nil {
		return fmt.Errorf("save worker %s: %w", w.Name, err)
	}
	return nil
}

// Workers lists every worker by name.
func (s *Registry) Workers(ctx context.Context) ([]Worker, error) {
	rows, err := s.pool.Query(ctx, "SELECT "+workerColumns+" FROM workers ORDER BY name")
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
func (s *Registry) Worker(ctx context.Context, name string) (Worker, error) {
	w, err := scanWorker(s.pool.QueryRow(ctx, "SELECT "+workerColumns+" FROM workers WHERE name = $1", name))
	if err != nil {
		return Worker{}, pg.Classify(err, "worker %s", name)
	}
	return w, nil
}

// operatorStates are the states a person set (land, retire) or that
// follow from them: a heartbeat never overrides them.
const operatorStates = "('landing', 'landed', 'retiring')"

// HeartbeatWorker records that the server reached the worker's API server
// (w.State running) or did not (stalled), and returns the worker's state:
// landing, landed and retiring stay as they are.
func (s *Registry) HeartbeatWorker(ctx context.Context, w Worker) (concourse.WorkerState, error) {
	if w.Tags == nil {
		w.Tags = []string{}
	}
	var state concourse.WorkerState
	err := s.pool.QueryRow(ctx, `
		INSERT INTO workers (name, platform, tags, team, state, namespace, version, start_time, heartbeat)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now())
		ON CONFLICT (name) DO UPDATE SET
			platform = excluded.platform, tags = excluded.tags, team = excluded.team,
			namespace = excluded.namespace, version = excluded.version, start_time = excluded.start_time,
			heartbeat = CASE WHEN excluded.state = 'stalled' THEN workers.heartbeat ELSE now() END,
			state = CASE WHEN workers.state IN `+operatorStates+` THEN workers.state ELSE excluded.state END
		RETURNING state`,
		w.Name, w.Platform, w.Tags, w.Team, w.State, w.Namespace, w.Version, pg.TimeArg(w.StartTime)).Scan(&state)
	if err != nil {
		return "", fmt.Errorf("heartbeat worker %s: %w", w.Name, err)
	}
	return state, nil
}

// LandWorker asks a worker to take no new steps; it becomes landed when
// its running steps have finished. Landing a landed worker changes nothing.
func (s *Registry) LandWorker(ctx context.Context, name string) error {
	return s.workerState(ctx, name, "landing a worker",
		`UPDATE workers SET state = CASE WHEN state = 'landed' THEN state ELSE 'landing' END WHERE name = $1`)
}

// RetireWorker asks a worker to take no new steps and to leave once its
// running steps have finished.
func (s *Registry) RetireWorker(ctx context.Context, name string) error {
	return s.workerState(ctx, name, "retiring a worker", `UPDATE workers SET state = 'retiring' WHERE name = $1`)
}

// SetWorkerState moves a worker from one state to another; it reports
// whether the worker was in from.
func (s *Registry) SetWorkerState(ctx context.Context, name string, from, to concourse.WorkerState) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE workers SET state = $3 WHERE name = $1 AND state = $2`, name, from, to)
	if err != nil {
		return false, fmt.Errorf("set worker %s %s: %w", name, to, err)
	}
	return tag.RowsAffected() > 0, nil
}

func (s *Registry) workerState(ctx context.Context, name, what, sql string) error {
	tag, err := s.pool.Exec(ctx, sql, name)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, name, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%s %s: %w", what, name, pg.ErrNotFound)
	}
	return nil
}

// ErrWorkerRunning refuses to prune a running worker.
var ErrWorkerRunning = errors.New("cannot prune running worker")

// PruneWorker removes a worker that is not running (stalled, landed...)
// from the list, as Concourse's prune-worker does.
func (s *Registry) PruneWorker(ctx context.Context, name string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM workers WHERE name = $1 AND state <> 'running'`, name)
	if err != nil {
		return fmt.Errorf("prune worker %s: %w", name, err)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	if _, err := s.Worker(ctx, name); err != nil {
		return err
	}
	return fmt.Errorf("prune worker %s: %w", name, ErrWorkerRunning)
}

// DeleteWorker removes a worker's record (a retired worker leaving).
func (s *Registry) DeleteWorker(ctx context.Context, name string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM workers WHERE name = $1`, name); err != nil {
		return fmt.Errorf("delete worker %s: %w", name, err)
	}
	return nil
}

// WorkerLoad is what runs on a worker: step pods of builds that have not
// finished, and how many of them are tasks (what placement weighs); and
// every step pod it has a record of (Pods), running or kept, as `fly
// workers` counts its containers and `fly containers` lists them.
type WorkerLoad struct {
	Containers int
	Tasks      int
	Pods       int
	// Waiting are its pods declared ahead of their turn.
	Waiting int
}

// WorkerLoads returns the load of every worker that has any pod.
func (s *Registry) WorkerLoads(ctx context.Context) (map[string]WorkerLoad, error) {
	// A check pod serves many builds: it has no build of its own. A pod
	// declared ahead of its turn ('waiting') is no active step: it must
	// never make a step that is to run now wait for room.
	rows, err := s.pool.Query(ctx, `
		SELECT c.worker_name,
			count(*) FILTER (WHERE b.status IN ('pending', 'started') AND c.state <> 'waiting'),
			count(*) FILTER (WHERE b.status IN ('pending', 'started') AND c.type = 'task' AND c.state <> 'waiting'),
			count(*),
			count(*) FILTER (WHERE c.state = 'waiting')
		FROM containers c LEFT JOIN builds b ON b.id = c.build_id
		GROUP BY c.worker_name`)
	if err != nil {
		return nil, fmt.Errorf("count workers' active steps: %w", err)
	}
	defer rows.Close()
	out := map[string]WorkerLoad{}
	for rows.Next() {
		var name string
		var l WorkerLoad
		if err := rows.Scan(&name, &l.Containers, &l.Tasks, &l.Pods, &l.Waiting); err != nil {
			return nil, fmt.Errorf("count workers' active steps: %w", err)
		}
		out[name] = l
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count workers' active steps: %w", err)
	}
	return out, nil
}

// BuildsOnWorker counts the unfinished builds that ran a step on the
// worker (the build's saved state names each step's worker): a landing
// worker lands when there are none.
func (s *Registry) BuildsOnWorker(ctx context.Context, name string) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `
		SELECT count(*) FROM builds
		WHERE status IN ('pending', 'started')
		  AND jsonb_path_exists(state, '$.steps.* ? (@.worker == $w)', jsonb_build_object('w', $1::text))`, name).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count builds on worker %s: %w", name, err)
	}
	return n, nil
}

// StallUnresponsiveWorkers marks stalled the running workers whose last
// heartbeat is older than ttl: the server that heartbeats them is gone.
func (s *Registry) StallUnresponsiveWorkers(ctx context.Context, ttl time.Duration) error {
	_, err := s.pool.Exec(ctx, `UPDATE workers SET state = 'stalled'
		WHERE state = 'running' AND heartbeat < now() - make_interval(secs => $1)`, ttl.Seconds())
	if err != nil {
		return fmt.Errorf("stall unresponsive workers: %w", err)
	}
	return nil
}

// Registry reads and writes the workers' table.
type Registry struct{ pool *pgxpool.Pool }

// New is the worker registry on pool.
func New(pool *pgxpool.Pool) *Registry { return &Registry{pool: pool} }
