// Package buildlogtest helps tests of the packages that write build logs.
package buildlogtest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/atc/buildlog"
	"github.com/porter-ci/porter/pkg/blobstore"
)

// Logs are build logs in store (nil: never committed, for tests that do
// not run a log), each chunk an object of its own.
func Logs(t testing.TB, store blobstore.Store) *buildlog.Logs {
	t.Helper()
	logs, err := buildlog.New(buildlog.Config{Store: store, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return logs
}

// DurableRecords commits l and returns its records.
func DurableRecords(t testing.TB, l *buildlog.Log) []buildlog.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
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
