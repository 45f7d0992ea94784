package atc

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/pkg/events/eventspb"
)

// LogSink is the server's sidecar event sink, the one it gives
// stepserver.New (Server.LastSeq, Append and Sync: translation into build
// events, redaction, the output cap, the build log and its chunks in the
// blobstore), for task steps registered by hand instead of by a running
// plan: no database, cluster or scheduler. The benchmarks under test/bench
// drive it to measure the sidecar stream and the build log path without a
// cluster. Its logs go into segments as a full server's do; with no
// database to index them it keeps the index in memory (a server adds one
// database statement per segment).
type LogSink struct {
	s *Server
}

// NewLogSink returns a sink writing build logs to store, each build's
// output capped at maxBuildLogBytes (0: no cap), as --max-build-log-bytes does.
func NewLogSink(store blobstore.Store, maxBuildLogBytes int64, log *slog.Logger) (*LogSink, error) {
	if log == nil {
		log = slog.Default()
	}
	enc, err := newChunkEncoder()
	if err != nil {
		return nil, err
	}
	index := newMemIndex()
	return &LogSink{s: &Server{cfg: Config{MaxBuildLogBytes: maxBuildLogBytes}, log: log, store: store, chunkEnc: enc,
		logIndex: index, segments: newSegmentWriter(store, index, segmentPrefix, segmentWrites),
		builds: map[int64]*build{}, steps: map[string]*stepState{}}}, nil
}

// LastSeq implements stepserver.Sink.
func (k *LogSink) LastSeq(ctx context.Context, stepID string) (uint64, error) {
	return k.s.LastSeq(ctx, stepID)
}

// Append implements stepserver.Sink.
func (k *LogSink) Append(ctx context.Context, stepID string, evs []*eventspb.Event) error {
	return k.s.Append(ctx, stepID, evs)
}

// Sync implements stepserver.Sink.
func (k *LogSink) Sync(ctx context.Context, stepID string, seq uint64) error {
	return k.s.Sync(ctx, stepID, seq)
}

// StartBuild registers a running build with one task step per step ID and
// commits its log to the blobstore until FinishBuild, or until ctx ends.
func (k *LogSink) StartBuild(ctx context.Context, buildID int64, stepIDs ...string) error {
	k.s.mu.Lock()
	_, exists := k.s.builds[buildID]
	k.s.mu.Unlock()
	if exists {
		return fmt.Errorf("build %d is already running", buildID)
	}
	b := k.s.newBuild(db.Build{ID: buildID, Name: fmt.Sprint(buildID)}, db.Team{ID: 1, Name: "main"})
	b.log.appendEvent(events.Status{Status: concourse.StatusStarted, Time: time.Now().Unix()}, "", 0)
	// The log ends on its own once the build is finished and durable.
	logCtx, stop := context.WithCancel(ctx)
	go func() { defer stop(); b.log.run(logCtx) }()
	k.s.mu.Lock()
	k.s.builds[buildID] = b
	k.s.mu.Unlock()
	for i, id := range stepIDs {
		k.s.registerStep(b, nil, id, concourse.PlanID(fmt.Sprintf("task-%d", i)), events.TaskConfig{})
	}
	return nil
}

// FinishBuild ends a build: its last event is logged, everything is made
// durable, and its records leave memory.
func (k *LogSink) FinishBuild(ctx context.Context, buildID int64, status concourse.BuildStatus) error {
	b, ok := k.s.running(buildID)
	if !ok {
		return fmt.Errorf("build %d is not running", buildID)
	}
	b.log.appendEvent(events.Status{Status: status, Time: time.Now().Unix()}, "", 0)
	if err := b.log.sync(ctx, b.log.lastID()); err != nil {
		return fmt.Errorf("make build %d's log durable: %w", buildID, err)
	}
	b.log.finish()
	k.s.mu.Lock()
	delete(k.s.builds, buildID)
	for id, st := range k.s.steps {
		if st.b == b {
			delete(k.s.steps, id)
		}
	}
	k.s.mu.Unlock()
	close(b.done)
	return nil
}
