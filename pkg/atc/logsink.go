package atc

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/porter-ci/porter/pkg/atc/buildlog"
	"github.com/porter-ci/porter/pkg/atc/exec"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
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
	builds map[int64]*sinkBuild
	steps  map[string]*exec.StepState // by step ID
}

// sinkBuild is a running build and the writer of its log, which the sink
// owns: FinishBuild and Close return only once it has ended.
type sinkBuild struct {
	*buildstate.Build
	stopLog context.CancelFunc
	logDone chan struct{}
}

// endLog stops the build's log writer (after its last flush) and waits for it.
func (b *sinkBuild) endLog() {
	b.stopLog()
	<-b.logDone
}

// NewLogSink returns a sink writing build logs to store, each build's
// output capped at maxBuildLogBytes (0: no cap), as --max-build-log-bytes does.
func NewLogSink(store blobstore.Store, maxBuildLogBytes int64, log *slog.Logger) (*LogSink, error) {
	logs, err := buildlog.New(buildlog.Config{Store: store, Index: buildlog.NewMemIndex(), Log: log, MaxBytes: maxBuildLogBytes})
	if err != nil {
		return nil, err
	}
	return &LogSink{logs: logs, builds: map[int64]*sinkBuild{}, steps: map[string]*exec.StepState{}}, nil
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
// commits its log to the blobstore until FinishBuild or Close, or until ctx
// ends.
func (k *LogSink) StartBuild(ctx context.Context, buildID int64, stepIDs ...string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, exists := k.builds[buildID]; exists {
		return fmt.Errorf("build %d is already running", buildID)
	}
	b := &buildstate.Build{ID: buildID, Name: fmt.Sprint(buildID), Team: "main", TeamID: 1, Log: k.logs.Open(buildID), Done: make(chan struct{})}
	b.Log.Append(events.Status{Status: concourse.StatusStarted, Time: time.Now().Unix()})
	// The log ends on its own once the build is finished and durable.
	logCtx, stop := context.WithCancel(ctx)
	sb := &sinkBuild{Build: b, stopLog: stop, logDone: make(chan struct{})}
	go func() { defer close(sb.logDone); b.Log.Run(logCtx) }()
	k.builds[buildID] = sb
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
	b.endLog()
	k.mu.Lock()
	delete(k.builds, buildID)
	for id, st := range k.steps {
		if st.Build() == b.Build {
			delete(k.steps, id)
		}
	}
	k.mu.Unlock()
	close(b.Done)
	return nil
}

// Close stops the log writers of the builds still running, each after a
// last flush, and returns once they have ended. The builds stay registered:
// a sink is not used after Close.
func (k *LogSink) Close() {
	k.mu.Lock()
	builds := make([]*sinkBuild, 0, len(k.builds))
	for _, b := range k.builds {
		builds = append(builds, b)
	}
	k.mu.Unlock()
	for _, b := range builds {
		b.endLog()
	}
}
