package exec

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/atc/buildlog"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/test/testenv"
)

// minioStore is a fresh bucket of a real MinIO (Docker).
func minioStore(t *testing.T) blobstore.Store { return testenv.MinIOStore(t) }

// testLogs are build logs in store (nil: never committed, for tests that
// do not run a log), each chunk an object of its own.
func testLogs(t *testing.T, store blobstore.Store) *buildlog.Logs {
	t.Helper()
	logs, err := buildlog.New(buildlog.Config{Store: store, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return logs
}

// durableRecords commits l and returns its records.
func durableRecords(t *testing.T, l *buildlog.Log) []buildlog.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); l.Run(runCtx) }()
	defer func() { stop(); <-done }()
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	recs, _, err := l.Since(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}
