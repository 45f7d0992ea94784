package db

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/test/testenv"
)

// These tests run against the real PostgreSQL of hack/postgres.sh, each on a
// fresh database (testenv.Postgres); there are no mocks.

func testLog(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// openTest opens (and migrates) a fresh database.
func openTest(t testing.TB) (*DB, string) {
	t.Helper()
	dsn := testenv.Postgres(t)
	d, err := Open(t.Context(), dsn, testLog(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(d.Close)
	return d, dsn
}

func mustMigrations(t testing.TB) []migration {
	t.Helper()
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func appliedVersions(t testing.TB, d *DB) []int {
	t.Helper()
	rows, err := d.pool.Query(t.Context(), "SELECT version FROM schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var vs []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return vs
}

func tableExists(t testing.TB, d *DB, name string) bool {
	t.Helper()
	var ok bool
	if err := d.pool.QueryRow(t.Context(), "SELECT to_regclass($1) IS NOT NULL", name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestMigrationsFromEmptyDatabase(t *testing.T) {
	d, _ := openTest(t)
	ms := mustMigrations(t)
	v, err := d.SchemaVersion(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if want := ms[len(ms)-1].version; v != want {
		t.Fatalf("schema version %d, want %d", v, want)
	}
	for _, table := range []string{"teams", "local_users", "builds", "build_event_chunks", "containers", "artifacts", "workers"} {
		if !tableExists(t, d, table) {
			t.Errorf("table %s is missing", table)
		}
	}
}

func TestMigratingTwiceIsANoop(t *testing.T) {
	d, dsn := openTest(t)
	before := appliedVersions(t, d)
	var applyTime time.Time
	if err := d.pool.QueryRow(t.Context(), "SELECT max(apply_time) FROM schema_migrations").Scan(&applyTime); err != nil {
		t.Fatal(err)
	}
	d2, err := Open(t.Context(), dsn, testLog(t))
	if err != nil {
		t.Fatalf("second Open: %v", err)
	}
	defer d2.Close()
	if err := d2.migrate(t.Context(), mustMigrations(t)); err != nil {
		t.Fatalf("third migration run: %v", err)
	}
	after := appliedVersions(t, d2)
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("applied versions changed: %v -> %v", before, after)
	}
	var applyTime2 time.Time
	if err := d2.pool.QueryRow(t.Context(), "SELECT max(apply_time) FROM schema_migrations").Scan(&applyTime2); err != nil {
		t.Fatal(err)
	}
	if !applyTime2.Equal(applyTime) {
		t.Fatalf("a migration was applied again (%v, then %v)", applyTime, applyTime2)
	}
}

func TestConcurrentOpenOnAFreshDatabase(t *testing.T) {
	dsn := testenv.Postgres(t)
	const servers = 4
	errs := make(chan error, servers)
	var wg sync.WaitGroup
	for range servers {
		wg.Go(func() {
			d, err := Open(t.Context(), dsn, testLog(t))
			if err == nil {
				d.Close()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent Open: %v", err)
		}
	}
	d, err := Open(t.Context(), dsn, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if got, want := len(appliedVersions(t, d)), len(mustMigrations(t)); got != want {
		t.Fatalf("%d migrations recorded, want %d", got, want)
	}
}

func TestMigrationsStepByStep(t *testing.T) {
	dsn := testenv.Postgres(t)
	d, err := connect(t.Context(), dsn, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ms := mustMigrations(t)
	if len(ms) < 2 {
		t.Skip("needs two migrations or more")
	}
	if err := d.migrate(t.Context(), ms[:1]); err != nil {
		t.Fatalf("first migration: %v", err)
	}
	if got := appliedVersions(t, d); fmt.Sprint(got) != "[1]" {
		t.Fatalf("applied %v, want [1]", got)
	}
	if !tableExists(t, d, "builds") || tableExists(t, d, "containers") {
		t.Fatal("after 0001: want builds and no containers yet")
	}
	// Data written under the first schema survives the later steps.
	if _, err := d.EnsureTeam(t.Context(), "main", nil); err != nil {
		t.Fatal(err)
	}
	if err := d.migrate(t.Context(), ms); err != nil {
		t.Fatalf("remaining migrations: %v", err)
	}
	if got := len(appliedVersions(t, d)); got != len(ms) {
		t.Fatalf("%d applied, want %d", got, len(ms))
	}
	if _, err := d.Team(t.Context(), "main"); err != nil {
		t.Fatal(err)
	}
}

func TestFailedMigrationAppliesNothingOfItself(t *testing.T) {
	d, _ := openTest(t)
	ms := mustMigrations(t)
	bad := migration{
		version: ms[len(ms)-1].version + 1,
		name:    "9999_broken.sql",
		sql:     "CREATE TABLE half_done (id int); SELECT no_such_function();",
	}
	err := d.migrate(t.Context(), append(ms, bad))
	if err == nil || !strings.Contains(err.Error(), "9999_broken.sql") {
		t.Fatalf("want an error naming the migration, got %v", err)
	}
	if tableExists(t, d, "half_done") {
		t.Fatal("the failed migration's first statement was kept")
	}
	if got := len(appliedVersions(t, d)); got != len(ms) {
		t.Fatalf("%d applied, want %d", got, len(ms))
	}
}

func TestOpenClosedPortFailsFast(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	const password = "s3cret-password-never-shown"
	start := time.Now()
	_, err = Open(t.Context(), "postgres://porter:"+password+"@"+addr+"/porter?sslmode=disable", testLog(t))
	if err == nil {
		t.Fatal("Open succeeded against a closed port")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("took %v to fail", took)
	}
	if !strings.Contains(err.Error(), addr) {
		t.Errorf("error does not name %s: %v", addr, err)
	}
	if strings.Contains(err.Error(), password) {
		t.Errorf("error shows the password: %v", err)
	}
	t.Log(err)
}

func TestLoadMigrations(t *testing.T) {
	ms := mustMigrations(t)
	for i, m := range ms {
		if m.version < 1 || (i > 0 && m.version <= ms[i-1].version) || m.sql == "" {
			t.Errorf("migration %d: %+v", i, m.name)
		}
	}
}

func TestTryLockIsExclusiveAcrossHandles(t *testing.T) {
	d1, dsn := openTest(t)
	d2, err := Open(t.Context(), dsn, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	ctx := t.Context()

	release, ok, err := d1.TryLock(ctx, LockGC)
	if err != nil || !ok {
		t.Fatalf("first TryLock: ok=%v err=%v", ok, err)
	}
	if _, ok, err := d2.TryLock(ctx, LockGC); err != nil || ok {
		t.Fatalf("second handle got the held lock: ok=%v err=%v", ok, err)
	}
	// Advisory locks are re-entrant within a session, but TryLock uses a fresh
	// pooled session each time, so even the same handle is refused.
	if _, ok, err := d1.TryLock(ctx, LockGC); err != nil || ok {
		t.Fatalf("same handle got the held lock: ok=%v err=%v", ok, err)
	}
	// Another lock id is independent.
	rs, ok, err := d2.TryLock(ctx, LockScheduler)
	if err != nil || !ok {
		t.Fatalf("other lock: ok=%v err=%v", ok, err)
	}
	rs()

	release()
	release() // idempotent
	r2, ok, err := d2.TryLock(ctx, LockGC)
	if err != nil || !ok {
		t.Fatalf("after release: ok=%v err=%v", ok, err)
	}
	if _, ok, err := d1.TryLock(ctx, LockGC); err != nil || ok {
		t.Fatalf("first handle got the lock the second holds: ok=%v err=%v", ok, err)
	}
	r2()
	r3, ok, err := d1.TryLock(ctx, LockGC)
	if err != nil || !ok {
		t.Fatalf("after the second released: ok=%v err=%v", ok, err)
	}
	r3()
}

func TestNotFoundIsWrapped(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	checks := map[string]error{}
	_, checks["Team"] = d.Team(ctx, "nope")
	_, checks["TeamByID"] = d.TeamByID(ctx, 4242)
	_, checks["LocalUserHash"] = d.LocalUserHash(ctx, "nope")
	_, checks["Build"] = d.Build(ctx, 4242)
	checks["StartBuild"] = d.StartBuild(ctx, 4242, time.Now())
	checks["FinishBuild"] = d.FinishBuild(ctx, 4242, concourse.StatusFailed, time.Now())
	checks["SaveBuildState"] = d.SaveBuildState(ctx, 4242, []byte(`{}`))
	checks["RequestAbort"] = d.RequestAbort(ctx, 4242)
	checks["SetBuildComment"] = d.SetBuildComment(ctx, 4242, "hi")
	checks["AddEventChunk"] = d.AddEventChunk(ctx, 4242, 0, 1, "k")
	_, checks["Container"] = d.Container(ctx, "nope")
	checks["SetContainerState"] = d.SetContainerState(ctx, "nope", "created")
	checks["DeleteContainer"] = d.DeleteContainer(ctx, "nope")
	_, checks["Artifact"] = d.Artifact(ctx, 4242)
	_, checks["CreateArtifact(no team)"] = d.CreateArtifact(ctx, Artifact{TeamID: 4242, Key: "k"})
	_, checks["Worker"] = d.Worker(ctx, "nope")
	for name, err := range checks {
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: want ErrNotFound, got %v", name, err)
		}
	}
}

func TestPingAndClose(t *testing.T) {
	d, _ := openTest(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := d.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}
