package db

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/porter-ci/porter/pkg/db/internal/pg"
)

// TeamUnfinishedBuilds lists the ids of a team's pending and started
// builds (one-off, job and check builds).
func (d *DB) TeamUnfinishedBuilds(ctx context.Context, teamID int) ([]int64, error) {
	rows, err := d.pool.Query(ctx, `
		SELECT id FROM builds WHERE team_id = $1 AND status IN ('pending', 'started') ORDER BY id`, teamID)
	if err != nil {
		return nil, fmt.Errorf("unfinished builds of team %d: %w", teamID, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("unfinished builds of team %d: %w", teamID, err)
	}
	return ids, nil
}

// DeleteTeam deletes a team with its pipelines, builds, containers' and
// artifacts' records and resource caches' records.
func (d *DB) DeleteTeam(ctx context.Context, id int) error {
	return d.execOne(ctx, fmt.Sprintf("delete team %d", id), "DELETE FROM teams WHERE id = $1", id)
}

// RenameTeam renames a team; a name another team has is ErrConflict.
func (d *DB) RenameTeam(ctx context.Context, id int, name string) error {
	return d.execOne(ctx, fmt.Sprintf("rename team %d to %s", id, name), "UPDATE teams SET name = $2 WHERE id = $1", id, name)
}

// ArchivePipeline archives a pipeline: it is paused (by by, unless it was
// already) until set again.
func (d *DB) ArchivePipeline(ctx context.Context, id int64, by string) error {
	return d.execOne(ctx, fmt.Sprintf("archive pipeline %d", id), `
		UPDATE pipelines SET archived = true, paused = true,
			paused_by = CASE WHEN paused THEN paused_by ELSE $2 END,
			paused_at = CASE WHEN paused THEN paused_at ELSE now() END,
			last_updated = now()
		WHERE id = $1`, id, by)
}

// Wall is the message shown to every user; Expires is zero when it stays
// until cleared.
type Wall struct {
	Message string
	Expires time.Time
}

// Wall is the current wall message (zero: none, or expired).
func (d *DB) Wall(ctx context.Context) (Wall, error) {
	var w Wall
	var exp *time.Time
	err := d.pool.QueryRow(ctx, `SELECT message, expires_at FROM wall WHERE expires_at IS NULL OR expires_at > now()`).Scan(&w.Message, &exp)
	switch {
	case err == pgx.ErrNoRows:
		return Wall{}, nil
	case err != nil:
		return Wall{}, fmt.Errorf("read the wall: %w", err)
	}
	w.Expires = pg.NullTime(exp)
	return w, nil
}

// SetWall replaces the wall message.
func (d *DB) SetWall(ctx context.Context, w Wall) error {
	_, err := d.pool.Exec(ctx, `
		INSERT INTO wall (id, message, expires_at) VALUES (true, $1, $2)
		ON CONFLICT (id) DO UPDATE SET message = excluded.message, expires_at = excluded.expires_at`,
		w.Message, pg.TimeArg(w.Expires))
	if err != nil {
		return fmt.Errorf("set the wall: %w", err)
	}
	return nil
}

// ClearWall removes the wall message.
func (d *DB) ClearWall(ctx context.Context) error {
	if _, err := d.pool.Exec(ctx, `DELETE FROM wall`); err != nil {
		return fmt.Errorf("clear the wall: %w", err)
	}
	return nil
}

// Component is one of the servers' periodic loops.
type Component struct {
	Name     string
	Paused   bool
	Interval time.Duration
	LastRan  time.Time // zero: never
}

// Components lists the periodic loops by name.
func (d *DB) Components(ctx context.Context) ([]Component, error) {
	rows, err := d.pool.Query(ctx, `SELECT name, paused, interval_ms, last_ran FROM components ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list components: %w", err)
	}
	cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Component, error) {
		var c Component
		var ms int64
		var last *time.Time
		err := r.Scan(&c.Name, &c.Paused, &ms, &last)
		c.Interval, c.LastRan = time.Duration(ms)*time.Millisecond, pg.NullTime(last)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("list components: %w", err)
	}
	return cs, nil
}

// SetComponentPaused pauses or unpauses the named component ("" for every
// one); an unknown name is ErrNotFound.
func (d *DB) SetComponentPaused(ctx context.Context, name string, paused bool) error {
	if name == "" {
		_, err := d.pool.Exec(ctx, `UPDATE components SET paused = $1`, paused)
		if err != nil {
			return fmt.Errorf("set every component paused=%t: %w", paused, err)
		}
		return nil
	}
	return d.execOne(ctx, fmt.Sprintf("component %s", name), `UPDATE components SET paused = $2 WHERE name = $1`, name, paused)
}

// ComponentPaused says whether the named component is paused (an unknown
// one is not).
func (d *DB) ComponentPaused(ctx context.Context, name string) (bool, error) {
	var paused bool
	err := d.pool.QueryRow(ctx, `SELECT paused FROM components WHERE name = $1`, name).Scan(&paused)
	switch {
	case err == pgx.ErrNoRows:
		return false, nil
	case err != nil:
		return false, fmt.Errorf("is component %s paused: %w", name, err)
	}
	return paused, nil
}

// PausedComponents are the names of the paused components, as a set.
func (d *DB) PausedComponents(ctx context.Context) (map[string]bool, error) {
	rows, err := d.pool.Query(ctx, `SELECT name FROM components WHERE paused`)
	if err != nil {
		return nil, fmt.Errorf("list paused components: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list paused components: %w", err)
	}
	out := make(map[string]bool, len(names))
	for _, n := range names {
		out[n] = true
	}
	return out, nil
}

// ComponentsRan records a run of each named component, in one statement.
func (d *DB) ComponentsRan(ctx context.Context, names []string, interval time.Duration, at time.Time) error {
	if len(names) == 0 {
		return nil
	}
	_, err := d.pool.Exec(ctx, `
		INSERT INTO components (name, interval_ms, last_ran) SELECT n, $2, $3 FROM unnest($1::text[]) n
		ON CONFLICT (name) DO UPDATE SET interval_ms = excluded.interval_ms, last_ran = excluded.last_ran`,
		names, interval.Milliseconds(), at)
	if err != nil {
		return fmt.Errorf("record a run of components %v: %w", names, err)
	}
	return nil
}

// ComponentRan records a run of the named component and its interval.
func (d *DB) ComponentRan(ctx context.Context, name string, interval time.Duration, at time.Time) error {
	_, err := d.pool.Exec(ctx, `
		INSERT INTO components (name, interval_ms, last_ran) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET interval_ms = excluded.interval_ms, last_ran = excluded.last_ran`,
		name, interval.Milliseconds(), at)
	if err != nil {
		return fmt.Errorf("record a run of component %s: %w", name, err)
	}
	return nil
}

// ClearResourceVersions deletes every version of a resource (with the
// builds' records of using them), and says how many.
func (d *DB) ClearResourceVersions(ctx context.Context, resourceID int64) (int64, error) {
	tag, err := d.pool.Exec(ctx, `DELETE FROM resource_versions WHERE resource_id = $1`, resourceID)
	if err != nil {
		return 0, fmt.Errorf("clear the versions of resource %d: %w", resourceID, err)
	}
	return tag.RowsAffected(), nil
}

// DeleteResourceVersionCaches deletes the caches of one version of a
// resource (the version exactly, as Concourse matches it), and says how many.
func (d *DB) DeleteResourceVersionCaches(ctx context.Context, resourceID int64, version map[string]string) (int64, error) {
	tag, err := d.pool.Exec(ctx, "DELETE FROM resource_caches WHERE resource_id = $1 AND version = $2::jsonb", resourceID, version)
	if err != nil {
		return 0, fmt.Errorf("delete the caches of a version of resource %d: %w", resourceID, err)
	}
	return tag.RowsAffected(), nil
}
