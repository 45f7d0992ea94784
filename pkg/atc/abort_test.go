package atc

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/atc/exec"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/test/testenv"
)

// TestAbortOfARunningBuildIsRecorded: an abort accepted for a build this
// server runs is recorded in the database as well as acted on here, so a
// server killed before the build ends resumes it aborted (real PostgreSQL).
func TestAbortOfARunningBuildIsRecorded(t *testing.T) {
	ctx := t.Context()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	d, team := openDB(t, testenv.Postgres(t), log)
	rec, err := d.CreateOneOffBuild(ctx, team.ID, []byte(`{"id": "1", "do": []}`), "test", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.StartBuild(ctx, rec.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	runCtx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	s := &Server{db: d, log: log, cfg: Config{ServerID: "s1"}, builds: map[int64]*buildstate.Build{rec.ID: {Abort: abort}}}

	if rec, err = d.Build(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	if err := (APIEngine{s}).AbortBuild(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(runCtx), exec.ErrAborted) {
		t.Errorf("the running build was not aborted here: cause %v", context.Cause(runCtx))
	}
	got, err := d.Build(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !got.AbortRequested {
		t.Errorf("build %d: the abort is not recorded, so a restarted server would run it on", rec.ID)
	}
	ids, err := d.AbortsRequested(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(ids, rec.ID) {
		t.Errorf("aborts requested of s1 = %v, want build %d among them", ids, rec.ID)
	}
}

// TestAbortWithoutTheDatabase: a build this server runs is aborted here
// even when the abort cannot be recorded (the database is down).
func TestAbortWithoutTheDatabase(t *testing.T) {
	ctx := t.Context()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	dsn := testenv.Postgres(t)
	d, team := openDB(t, dsn, log)
	rec, err := d.CreateOneOffBuild(ctx, team.ID, []byte(`{"id": "1", "do": []}`), "test", "s1")
	if err != nil {
		t.Fatal(err)
	}
	down, err := db.Open(ctx, dsn, log)
	if err != nil {
		t.Fatal(err)
	}
	down.Close()
	runCtx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	s := &Server{db: down, log: log, cfg: Config{ServerID: "s1"}, builds: map[int64]*buildstate.Build{rec.ID: {Abort: abort}}}
	if err := (APIEngine{s}).AbortBuild(ctx, rec); err != nil {
		t.Errorf("abort of a build running here, database down: %v", err)
	}
	if !errors.Is(context.Cause(runCtx), exec.ErrAborted) {
		t.Errorf("the running build was not aborted: cause %v", context.Cause(runCtx))
	}
	// Nobody runs it here: the failed record is the answer.
	if err := (APIEngine{&Server{db: down, log: log, builds: map[int64]*buildstate.Build{}}}).AbortBuild(ctx, rec); err == nil {
		t.Error("abort of a build running elsewhere, database down: no error")
	}
}
