// Package serverstate is the part of Porter's store that every server
// reads of the others: the wall message fly shows, and the periodic
// components (scheduler, scanner, collector) with when they last ran and
// whether a person paused them.
package serverstate

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/porter-ci/porter/pkg/db/internal/pg"
)

// State holds the wall and the components.
type State struct{ pool *pgxpool.Pool }

// New is the store on pool.
func New(pool *pgxpool.Pool) *State { return &State{pool: pool} }

// Wall is the message shown to every user; Expires is zero when it stays
// until cleared.
type Wall struct {
	Message string
	Expires time.Time
}

// Wall is the current wall message (zero: none, or expired).
func (s *State) Wall(ctx context.Context) (Wall, error) {
	var w Wall
	var exp *time.Time
	err := s.pool.QueryRow(ctx, `SELECT message, expires_at FROM wall WHERE expires_at IS NULL OR expires_at > now()`).Scan(&w.Message, &exp)
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
func (s *State) SetWall(ctx context.Context, w Wall) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO wall (id, message, expires_at) VALUES (true, $1, $2)
		ON CONFLICT (id) DO UPDATE SET message = excluded.message, expires_at = excluded.expires_at`,
		w.Message, pg.TimeArg(w.Expires))
	if err != nil {
		return fmt.Errorf("set the wall: %w", err)
	}
	return nil
}

// ClearWall removes the wall message.
func (s *State) ClearWall(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM wall`); err != nil {
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
func (s *State) Components(ctx context.Context) ([]Component, error) {
	rows, err := s.pool.Query(ctx, `SELECT name, paused, interval_ms, last_ran FROM components ORDER BY name`)
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
func (s *State) SetComponentPaused(ctx context.Context, name string, paused bool) error {
	if name == "" {
		_, err := s.pool.Exec(ctx, `UPDATE components SET paused = $1`, paused)
		if err != nil {
			return fmt.Errorf("set every component paused=%t: %w", paused, err)
		}
		return nil
	}
	return pg.ExecOne(ctx, s.pool, fmt.Sprintf("component %s", name), `UPDATE components SET paused = $2 WHERE name = $1`, name, paused)
}

// ComponentPaused says whether the named component is paused (an unknown
// one is not).
func (s *State) ComponentPaused(ctx context.Context, name string) (bool, error) {
	var paused bool
	err := s.pool.QueryRow(ctx, `SELECT paused FROM components WHERE name = $1`, name).Scan(&paused)
	switch {
	case err == pgx.ErrNoRows:
		return false, nil
	case err != nil:
		return false, fmt.Errorf("is component %s paused: %w", name, err)
	}
	return paused, nil
}

// PausedComponents are the names of the paused components, as a set.
func (s *State) PausedComponents(ctx context.Context) (map[string]bool, error) {
	rows, err := s.pool.Query(ctx, `SELECT name FROM components WHERE paused`)
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
func (s *State) ComponentsRan(ctx context.Context, names []string, interval time.Duration, at time.Time) error {
	if len(names) == 0 {
		return nil
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO components (name, interval_ms, last_ran) SELECT n, $2, $3 FROM unnest($1::text[]) n
		ON CONFLICT (name) DO UPDATE SET interval_ms = excluded.interval_ms, last_ran = excluded.last_ran`,
		names, interval.Milliseconds(), at)
	if err != nil {
		return fmt.Errorf("record a run of components %v: %w", names, err)
	}
	return nil
}

// ComponentRan records a run of the named component and its interval.
func (s *State) ComponentRan(ctx context.Context, name string, interval time.Duration, at time.Time) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO components (name, interval_ms, last_ran) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET interval_ms = excluded.interval_ms, last_ran = excluded.last_ran`,
		name, interval.Milliseconds(), at)
	if err != nil {
		return fmt.Errorf("record a run of component %s: %w", name, err)
	}
	return nil
}
