// Package db is Porter's store of record in PostgreSQL: teams, users, builds,
// containers, artifacts and workers, and the advisory locks that let several
// servers share one database. The schema is migrated at Open from the SQL files
// embedded in migrations/. Nothing above this package writes SQL.
package db

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrNotFound is wrapped by every lookup that finds nothing.
var ErrNotFound = errors.New("not found")

// ErrConflict is wrapped when a row already exists or a change is no longer
// allowed (e.g. finishing a build twice).
var ErrConflict = errors.New("already exists")

// connectTimeout bounds Open's wait for the server.
const connectTimeout = 10 * time.Second

// minPoolConns: each held TryLock keeps a connection, so the pgxpool default
// (the number of CPUs, at least 4) would be too few on a small machine.
const minPoolConns = 10

// DB is a pool of connections to Porter's database.
type DB struct {
	pool *pgxpool.Pool
	log  *slog.Logger
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
	return &DB{pool: pool, log: log}, nil
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

// Error codes of PostgreSQL this package turns into ErrConflict / ErrNotFound.
const (
	codeUniqueViolation     = "23505"
	codeForeignKeyViolation = "23503"
)

func pgCode(err error) string {
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pe.Code
	}
	return ""
}

// classify wraps err with what was being done, and with ErrConflict or
// ErrNotFound where PostgreSQL's error means one of those.
func classify(err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	case pgCode(err) == codeUniqueViolation:
		return fmt.Errorf("%s: %w: %w", what, ErrConflict, err)
	case pgCode(err) == codeForeignKeyViolation:
		// A reference to a team or build that does not exist.
		return fmt.Errorf("%s: %w: %w", what, ErrNotFound, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// nullTime is the zero time for NULL, so callers never see a nil pointer.
func nullTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// timeArg stores the zero time as NULL.
func timeArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// jsonArg passes JSON as text for a $n::jsonb parameter (PostgreSQL validates
// it), and no JSON as NULL.
func jsonArg(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

// zeroNull stores 0 (no team, no build) as NULL.
func zeroNull[T int | int64](v T) any {
	if v == 0 {
		return nil
	}
	return v
}
