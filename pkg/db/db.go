// Package db is Porter's store of record in PostgreSQL: pipelines, builds,
// versions, containers and artifacts, and the advisory locks that let several
// servers share one database. Five parts live in packages of their own and
// are embedded in DB: accounts (teams, users, logins, access tokens), workers
// (the worker registry), containers (the step pods as fly sees them),
// resourcecaches (fetched versions kept for later gets) and serverstate
// (the wall and the periodic components). The schema is migrated at Open from the SQL files
// embedded in migrations/. Nothing above this package writes SQL.
package db

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/porter-ci/porter/pkg/db/accounts"
	"github.com/porter-ci/porter/pkg/db/containers"
	"github.com/porter-ci/porter/pkg/db/internal/pg"
	"github.com/porter-ci/porter/pkg/db/resourcecaches"
	"github.com/porter-ci/porter/pkg/db/serverstate"
	"github.com/porter-ci/porter/pkg/db/workers"
)

// ErrNotFound is wrapped by every lookup that finds nothing (in this
// package and in the parts of the store under it).
var ErrNotFound = pg.ErrNotFound

// ErrConflict is wrapped when a row already exists or a change is no longer
// allowed (e.g. finishing a build twice).
var ErrConflict = pg.ErrConflict

// ErrWaitingLimit: a worker holds its share of pods declared ahead
// (CreateWaitingContainer).
var ErrWaitingLimit = containers.ErrWaitingLimit

// connectTimeout bounds Open's wait for the server.
const connectTimeout = 10 * time.Second

// minPoolConns: each held TryLock keeps a connection, so the pgxpool default
// (the number of CPUs, at least 4) would be too few on a small machine.
const minPoolConns = 10

// DB is a pool of connections to Porter's database.
type DB struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	// The store's parts (see the package comment); their methods are the
	// DB's.
	*accounts.Store
	*workers.Registry
	*containers.Records
	*serverstate.State
	*resourcecaches.Caches
}

// Open connects to dsn, waiting at most connectTimeout, and brings the schema
// up to date. Its errors name the server's host and port, never the password.
func Open(ctx context.Context, dsn string, log *slog.Logger) (*DB, error) {
	d, err := connect(ctx, dsn, log)
	if err != nil {
		return nil, err
	}
	ms, err := loadMigrations()
	if err != nil {
		d.Close()
		return nil, err
	}
	if err := d.migrate(ctx, ms); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// connect opens the pool and checks that the server answers, without migrating.
func connect(ctx context.Context, dsn string, log *slog.Logger) (*DB, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's parse errors redact the password; ours does not repeat the DSN.
		return nil, fmt.Errorf("parse PostgreSQL DSN: %w", err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 || cfg.ConnConfig.ConnectTimeout > connectTimeout {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	if !strings.Contains(dsn, "pool_max_conns") && cfg.MaxConns < minPoolConns {
		cfg.MaxConns = minPoolConns
	}
	where := fmt.Sprintf("%s:%d", cfg.ConnConfig.Host, cfg.ConnConfig.Port)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL at %s: %w", where, err)
	}
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to PostgreSQL at %s (database %q, user %q): %w",
			where, cfg.ConnConfig.Database, cfg.ConnConfig.User, err)
	}
	log.Debug("connected to PostgreSQL", "addr", where, "database", cfg.ConnConfig.Database)
	return &DB{pool: pool, log: log, Store: accounts.New(pool), Registry: workers.New(pool),
		Records: containers.New(pool), State: serverstate.New(pool), Caches: resourcecaches.New(pool)}, nil
}

// Close closes every connection. It waits for held TryLock connections, so
// release every lock first.
func (d *DB) Close() { d.pool.Close() }

// Ping checks that the database answers.
func (d *DB) Ping(ctx context.Context) error {
	if err := d.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping PostgreSQL: %w", err)
	}
	return nil
}
