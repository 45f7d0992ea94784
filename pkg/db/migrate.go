package db

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// lockMigrate serialises migrations across servers that start together. It is
// a session-level advisory lock, in the same key space as LockID.
const lockMigrate LockID = 1000

// migration is one forward-only step of the schema.
type migration struct {
	version int
	name    string // file name, for logs and schema_migrations
	sql     string
}

var migrationName = regexp.MustCompile(`^(\d{4})_[a-z0-9_]+\.sql$`)

// loadMigrations reads the embedded migrations in version order, and refuses
// duplicates so that a misnamed file cannot be skipped silently.
func loadMigrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	var ms []migration
	for _, e := range entries {
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration file %s: name must be NNNN_description.sql", e.Name())
		}
		v, _ := strconv.Atoi(m[1]) // the pattern allows digits only
		b, err := migrationFiles.ReadFile(path.Join("migrations", e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	// Parts developed side by side reserve their numbers ahead, so a
	// version may be missing until its part lands; a version used twice
	// would be skipped silently and is refused.
	for i, m := range ms {
		if m.version < 1 || (i > 0 && m.version == ms[i-1].version) {
			return nil, fmt.Errorf("migration %s: version %04d is used twice or is not positive", m.name, m.version)
		}
	}
	return ms, nil
}

// migrate applies the migrations of ms that the database has not recorded,
// each in its own transaction, holding lockMigrate throughout so two servers
// never apply the same step. A failed step leaves the earlier ones applied and
// nothing of itself.
func (d *DB) migrate(ctx context.Context, ms []migration) error {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: acquire a connection: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(lockMigrate)); err != nil {
		return fmt.Errorf("migrate: take the migration lock: %w", err)
	}
	defer func() {
		// Unlock even when ctx is done; if that fails, closing the session
		// releases the lock instead.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, "SELECT pg_advisory_unlock($1)", int64(lockMigrate)); err != nil {
			_ = conn.Conn().Close(uctx)
		}
	}()

	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		apply_time timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("migrate: create schema_migrations: %w", err)
	}
	rows, err := conn.Query(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return fmt.Errorf("migrate: read schema_migrations: %w", err)
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return fmt.Errorf("migrate: read schema_migrations: %w", err)
	}
	done := make(map[int]bool, len(applied))
	for _, v := range applied {
		done[v] = true
	}
	for _, m := range ms {
		if done[m.version] {
			continue
		}
		start := time.Now()
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", m.version, m.name)
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate: apply %s: %w", m.name, err)
		}
		d.log.Info("applied database migration", "migration", m.name, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// SchemaVersion is the highest migration applied.
func (d *DB) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	if err := d.pool.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}
