// Package seedlog writes build logs of any size straight into a test
// server's storage, through the code the server writes with (a package of
// its own: buildlog's tests use testenv).
package seedlog

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/porter-ci/porter/pkg/atc/buildlog"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/test/testenv"
)

// seedPieceBytes is about the size of a seeded log event; seedSyncBytes
// how much output is appended between two waits for it to be stored
// (bounding the seeder's memory).
const (
	seedPieceBytes = 32 << 10
	seedSyncBytes  = 8 << 20
)

// Append appends n lines, line(1)..line(n), to the stored log of
// srv's finished build buildID, as output of its first task step, then a
// status event saying it succeeded. It writes through the storage code the
// server writes with (buildlog's segments in srv's bucket, indexed in its
// database), so a log of any size is made without a pod printing it. It
// returns the output's size in bytes.
func Append(ctx context.Context, env *testenv.ATCEnv, srv *testenv.ATC, buildID int64, n int64, line func(i int64) string) (int64, error) {
	d, err := db.Open(ctx, srv.Config.Database, slog.New(slog.DiscardHandler))
	if err != nil {
		return 0, fmt.Errorf("seed build %d's log: %w", buildID, err)
	}
	defer d.Close()
	b, err := d.Build(ctx, buildID)
	if err != nil {
		return 0, fmt.Errorf("seed build %d's log: %w", buildID, err)
	}
	step := firstTaskID(b.Plan)
	if step == "" {
		return 0, fmt.Errorf("seed build %d's log: its plan has no task: %s", buildID, b.Plan)
	}
	cl := env.Cluster
	store, err := blobstore.Open(ctx, blobstore.Config{Driver: blobstore.DriverMinio,
		Endpoint: cl["PORTER_CLUSTER_MINIO_ENDPOINT"], Bucket: srv.Config.Bucket, Region: cl["PORTER_CLUSTER_MINIO_REGION"],
		AccessKey: cl["PORTER_CLUSTER_MINIO_ACCESS_KEY"], SecretKey: cl["PORTER_CLUSTER_MINIO_SECRET_KEY"]})
	if err != nil {
		return 0, fmt.Errorf("seed build %d's log: %w", buildID, err)
	}
	logs, err := buildlog.New(buildlog.Config{Store: store, Index: d, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		return 0, err
	}
	l, err := logs.Restore(ctx, buildID)
	if err != nil {
		return 0, fmt.Errorf("seed build %d's log: %w", buildID, err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); l.Run(runCtx) }()
	defer func() { cancel(); <-done }()

	var total, unsynced int64
	var piece strings.Builder
	emit := func() error {
		if piece.Len() == 0 {
			return nil
		}
		l.Append(events.Log{Time: b.EndTime.Unix(), Origin: events.Origin{ID: step, Source: events.OriginSourceStdout}, Payload: piece.String()})
		total += int64(piece.Len())
		unsynced += int64(piece.Len())
		piece.Reset()
		if unsynced >= seedSyncBytes {
			unsynced = 0
			return l.Sync(ctx)
		}
		return nil
	}
	for i := int64(1); i <= n; i++ {
		piece.WriteString(line(i))
		piece.WriteByte('\n')
		if piece.Len() >= seedPieceBytes {
			if err := emit(); err != nil {
				return total, fmt.Errorf("seed build %d's log: %w", buildID, err)
			}
		}
	}
	if err := emit(); err != nil {
		return total, fmt.Errorf("seed build %d's log: %w", buildID, err)
	}
	l.Append(events.Status{Status: concourse.StatusSucceeded, Time: b.EndTime.Unix()})
	l.Finish()
	if err := l.Sync(ctx); err != nil {
		return total, fmt.Errorf("seed build %d's log: %w", buildID, err)
	}
	return total, nil
}

// firstTaskID is the plan id of a plan's first task step ("": none).
func firstTaskID(plan json.RawMessage) string {
	var v any
	if json.Unmarshal(plan, &v) != nil {
		return ""
	}
	var find func(v any) string
	find = func(v any) string {
		switch v := v.(type) {
		case map[string]any:
			if _, ok := v["task"]; ok {
				if id, ok := v["id"].(string); ok {
					return id
				}
			}
			for _, c := range v {
				if id := find(c); id != "" {
					return id
				}
			}
		case []any:
			for _, c := range v {
				if id := find(c); id != "" {
					return id
				}
			}
		}
		return ""
	}
	return find(v)
}
