package atc

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/porter-ci/porter/pkg/atc/buildlog"
	"github.com/porter-ci/porter/pkg/atc/exec"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/pkg/events/eventspb"
)

// LogSink is a sidecar event sink as the server's (LastSeq, Append and
// Sync: translation into build events, redaction, the output cap, the
// build log and its chunks in the blobstore), for task steps registered by
// hand instead of by a running plan: no database, cluster or scheduler.
// The benchmarks under test/bench drive it to measure the sidecar stream
// and the build log path without a cluster. Its logs go into segments as a
// full server's do; with no database to index them it keeps the index in
// memory (a server adds one database statement per segment).
type LogSink struct {
	logs *buildlog.Logs

	mu     sync.Mutex
	builds map[int64]*exec.Build
	steps  map[string]*exec.StepState // by step ID
	// writers are closed when a build's log writer (Log.Run) returns.
	writers map[int64]chan struct{}
}

// NewLogSink returns a sink writing build logs to store, each build's
// output capped at maxBuildLogBytes (0: no cap), as --max-build-log-bytes does.
func NewLogSink(store blobstore.Store, maxBuildLogBytes int64, log *slog.Logger) (*LogSink, error) {
	logs, err := buildlog.New(buildlog.Config{Store: store, Index: buildlog.NewMemIndex(), Log: log, MaxBytes: maxBuildLogBytes})
	if err != nil {
		return nil, err
	}
	return &LogSink{logs: logs, builds: map[int64]*exec.Build{}, steps: map[string]*exec.StepState{}, writers: map[int64]chan struct{}{}}, nil
}

func (k *LogSink) step(id string) (*exec.StepState, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	st, ok := k.steps[id]
	if !ok {
		return nil, fmt.Errorf("unknown step %q", id)
	}
	return st, nil
}

// LastSeq implements stepserver.Sink.
func (k *LogSink) LastSeq(ctx context.Context, stepID string) (uint64, error) {
	st, err := k.step(stepID)
	if err != nil {
		return 0, err
	}
	return st.Build().Log.StepDurable(ctx, stepID)
}

// Append implements stepserver.Sink.
func (k *LogSink) Append(_ context.Context, stepID string, evs []*eventspb.Event) error {
	st, err := k.step(stepID)
	if err != nil {
		return err
	}
	if !st.Build().Ended() {
		st.LogEvents(evs)
	}
	return nil
}

// Sync implements stepserver.Sink.
func (k *LogSink) Sync(ctx context.Context, stepID string, _ uint64) error {
	st, err := k.step(stepID)
	if err != nil {
		return err
	}
	return st.Build().Log.Sync(ctx)
}

// StartBuild registers a running build with one task step per step ID and
// commits its log to the blobstore until FinishBuild, or until ctx ends.
func (k *LogSink) StartBuild(ctx context.Context, buildID int64, stepIDs ...string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, exists := k.builds[buildID]; exists {
		return fmt.Errorf("build %d is already running", buildID)
	}
	b := &exec.Build{ID: buildID, Name: fmt.Sprint(buildID), Team: "main", TeamID: 1, Log: k.logs.Open(buildID), Done: make(chan struct{})}
	b.Log.Append(events.Status{Status: concourse.StatusStarted, Time: time.Now().Unix()})
	// The log ends on its own once the build is finished and durable.
	logCtx, stop := context.WithCancel(ctx)
	written := make(chan struct{})
	go func() {
		defer close(written)
		defer stop()
		b.Log.Run(logCtx)
	}()
	k.builds[buildID] = b
	k.writers[buildID] = written
	delegates := logDelegates{}.BuildDelegate(b)
	for i, id := range stepIDs {
		planID := concourse.PlanID(fmt.Sprintf("task-%d", i))
		k.steps[id] = exec.NewStepState(b, delegates.StepDelegate(planID), nil, id, planID, events.TaskConfig{})
	}
	return nil
}

// FinishBuild ends a build: its last event is logged, everything is made
// durable, and its records leave memory.
func (k *LogSink) FinishBuild(ctx context.Context, buildID int64, status concourse.BuildStatus) error {
	k.mu.Lock()
	b, ok := k.builds[buildID]
	k.mu.Unlock()
	if !ok {
		return fmt.Errorf("build %d is not running", buildID)
	}
	b.Log.Append(events.Status{Status: status, Time: time.Now().Unix()})
	if err := b.Log.Sync(ctx); err != nil {
		return fmt.Errorf("make build %d's log durable: %w", buildID, err)
	}
	b.Log.Finish()
	k.mu.Lock()
	written := k.writers[buildID]
	delete(k.writers, buildID)
	k.mu.Unlock()
	// The writer ends once the finished log is durable.
	select {
	case <-written:
	case <-ctx.Done():
		return fmt.Errorf("build %d's log writer: %w", buildID, context.Cause(ctx))
	}
	k.mu.Lock()
	delete(k.builds, buildID)
	for id, st := range k.steps {
		if st.Build() == b {
			delete(k.steps, id)
		}
	}
	k.mu.Unlock()
	close(b.Done)
	return nil
}
