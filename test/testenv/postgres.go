package testenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresEnvFile is where hack/postgres.sh writes PORTER_POSTGRES_DSN.
const PostgresEnvFile = "/var/lib/porter-postgres/postgres.env"

// ErrNoPostgres says no PostgreSQL is configured or reachable; suites skip on
// it (or fail under CI).
var ErrNoPostgres = errors.New("no PostgreSQL")

// PostgresAdminDSN is PORTER_POSTGRES_DSN, or the one in PostgresEnvFile when
// a suite runs by hand. It is a superuser's DSN: use it to create databases.
func PostgresAdminDSN() (string, error) {
	if dsn := os.Getenv("PORTER_POSTGRES_DSN"); dsn != "" {
		return dsn, nil
	}
	f, err := os.Open(PostgresEnvFile)
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%w: PORTER_POSTGRES_DSN is unset and %s does not exist; run `hack/postgres.sh up` (or `make cluster-up`)", ErrNoPostgres, PostgresEnvFile)
	}
	if err != nil {
		return "", fmt.Errorf("read %s: %w", PostgresEnvFile, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "PORTER_POSTGRES_DSN="); ok && v != "" {
			return v, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read %s: %w", PostgresEnvFile, err)
	}
	return "", fmt.Errorf("%w: no PORTER_POSTGRES_DSN in %s", ErrNoPostgres, PostgresEnvFile)
}

// NewPostgresDatabase creates a database with a fresh random name on the
// server of adminDSN and returns its DSN and a function that drops it,
// disconnecting whoever is still connected (for Ginkgo's DeferCleanup).
// Errors that mean "no server here" wrap ErrNoPostgres.
func NewPostgresDatabase(ctx context.Context, adminDSN string) (dsn string, drop func(context.Context) error, err error) {
	u, err := url.Parse(adminDSN)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		// Never echo the DSN: it carries a password.
		return "", nil, errors.New("PORTER_POSTGRES_DSN must be a postgres:// URL")
	}
	name := "porter_test_" + randomHex(8)
	// The name is ours and only [a-z0-9_], so it is safe to splice in.
	if err := adminExec(ctx, adminDSN, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w", name, err)
	}
	u.Path = "/" + name
	drop = func(ctx context.Context) error {
		if err := adminExec(ctx, adminDSN, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		return nil
	}
	return u.String(), drop, nil
}

func adminExec(ctx context.Context, adminDSN, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(adminDSN)
	if err != nil {
		return errors.New("parse PORTER_POSTGRES_DSN: not a valid DSN")
	}
	cfg.ConnectTimeout = 10 * time.Second
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("%w: connect to %s:%d: %w", ErrNoPostgres, cfg.Host, cfg.Port, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, sql); err != nil {
		return err
	}
	return nil
}

// Postgres gives a test a fresh database on the shared server (see
// PostgresAdminDSN) and returns its DSN; the database is dropped when the
// test ends. Without a server the test is skipped, or fails when CI is set.
func Postgres(t testing.TB) string {
	t.Helper()
	admin, err := PostgresAdminDSN()
	if err == nil {
		var dsn string
		var drop func(context.Context) error
		dsn, drop, err = NewPostgresDatabase(t.Context(), admin)
		if err == nil {
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if err := drop(ctx); err != nil {
					t.Errorf("test database cleanup: %v", err)
				}
			})
			return dsn
		}
	}
	if errors.Is(err, ErrNoPostgres) {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v; CI is set, so this is a failure", err)
		}
		t.Skipf("%v (run `hack/postgres.sh up` or set PORTER_POSTGRES_DSN)", err)
	}
	t.Fatal(err)
	return ""
}

// PrivatePostgres is a PostgreSQL server of one suite's own, for specs
// that restart or stop their database: the shared server stays untouched,
// so suites running at the same time are not disturbed.
type PrivatePostgres struct {
	dir string
	env []string
	// DSN is its admin DSN.
	DSN string
}

// StartPrivatePostgres runs hack/postgres.sh up with its state in a new
// directory under dir and a free port. Stop it with Down.
func StartPrivatePostgres(ctx context.Context, dir string) (*PrivatePostgres, error) {
	pgDir, err := os.MkdirTemp(dir, "postgres-")
	if err != nil {
		return nil, err
	}
	// The server runs as the postgres user, which must reach its directory.
	for d := pgDir; d != filepath.Dir(d) && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			return nil, err
		}
	}
	addr, err := FreeAddr("127.0.0.1")
	if err != nil {
		return nil, err
	}
	_, port, _ := strings.Cut(addr, ":")
	p := &PrivatePostgres{dir: pgDir, env: []string{
		"PORTER_POSTGRES_STATE=" + filepath.Join(pgDir, "state"),
		"PORTER_POSTGRES_RUN=" + filepath.Join(pgDir, "run"),
		"PORTER_POSTGRES_LOG=" + filepath.Join(pgDir, "postgres.log"),
		"PORTER_POSTGRES_PORT=" + port,
	}}
	if err := p.script(ctx, "up"); err != nil {
		return nil, err
	}
	envFile, err := os.ReadFile(filepath.Join(pgDir, "state", "postgres.env"))
	if err != nil {
		return nil, fmt.Errorf("private PostgreSQL: %w", err)
	}
	for _, line := range strings.Split(string(envFile), "\n") {
		if v, ok := strings.CutPrefix(line, "PORTER_POSTGRES_DSN="); ok {
			p.DSN = strings.Trim(v, `'"`)
		}
	}
	if p.DSN == "" {
		return nil, errors.New("private PostgreSQL: no DSN in its env file")
	}
	return p, nil
}

// Restart stops the server (fast shutdown: every client is disconnected)
// and starts it again with its data.
func (p *PrivatePostgres) Restart(ctx context.Context) error {
	if err := p.Stop(ctx); err != nil {
		return err
	}
	return p.Start(ctx)
}

// Stop stops the server and keeps its data.
func (p *PrivatePostgres) Stop(ctx context.Context) error { return p.script(ctx, "stop") }

// Start starts a stopped server.
func (p *PrivatePostgres) Start(ctx context.Context) error { return p.script(ctx, "start") }

// Down stops the server and removes everything it had.
func (p *PrivatePostgres) Down(ctx context.Context) error {
	return errors.Join(p.script(ctx, "down"), os.RemoveAll(p.dir))
}

func (p *PrivatePostgres) script(ctx context.Context, verb string) error {
	return postgresScript(ctx, p.env, verb)
}

func postgresScript(ctx context.Context, env []string, verb string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "postgres.sh"), verb)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("hack/postgres.sh %s: %w\n%s", verb, err, strings.TrimSpace(out.String()))
	}
	return nil
}
