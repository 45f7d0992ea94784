package atc

import (
	"context"
	"errors"
	"slices"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/atc/kuberuntime"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/stepcreds"
	"github.com/porter-ci/porter/pkg/worker"
)

// stepRuntime is how the steps place and run their pods: the workers,
// step pods and their supervision of pkg/atc/kuberuntime.
type stepRuntime interface {
	Worker(name string) (*kuberuntime.Worker, error)
	CheckPlacement(req worker.Requirements) error
	Place(ctx context.Context, req worker.Requirements, waiting func(msg string)) (*kuberuntime.Worker, error)
	CreatePod(ctx context.Context, w *kuberuntime.Worker, a *action.Action, given podspec.Secrets) error
	Supervise(ctx context.Context, st kuberuntime.Step) *eventspb.StepFinished
	PodGone(ctx context.Context, w *kuberuntime.Worker, stepID string) (bool, error)
	DeletePod(ctx context.Context, w *kuberuntime.Worker, stepID string)
}

// DefaultWorkerHeartbeat is how often a worker's API server is probed.
const DefaultWorkerHeartbeat = kuberuntime.DefaultHeartbeat

// placeStep chooses the worker a step runs on, waiting while the workers
// that could run it cannot take it now (stalled, landing, at their task
// limit); the build's log says once what it waits for.
func (s *Server) placeStep(ctx context.Context, b *build, origin events.Origin, req worker.Requirements) (*kuberuntime.Worker, error) {
	b.update(func() {
		for _, r := range b.state.Steps {
			if r.Worker != "" && !slices.Contains(req.Started, r.Worker) {
				req.Started = append(req.Started, r.Worker)
			}
		}
	})
	return s.pods.Place(ctx, req, func(msg string) {
		b.log.Append(events.Log{Time: time.Now().Unix(), Origin: origin, Payload: msg + "\n"})
	})
}

// stoppedWaiting ends a step that was waiting for a worker when its build
// was aborted (or timed out); a server stopping leaves it to the next one,
// which places it again.
func (x *executor) stoppedWaiting(ctx context.Context, r *stepRecord) (bool, error) {
	err := interrupted(ctx)
	if !errors.Is(err, errShutdown) {
		x.b.update(func() { r.Status, r.EndTime = string(concourse.StatusAborted), time.Now().Unix() })
		x.s.saveState(ctx, x.b)
	}
	return false, err
}

// requirements are what a step asks of its worker.
func requirements(team string, tags []string, platform string, task bool) worker.Requirements {
	return worker.Requirements{Tags: slices.DeleteFunc(slices.Clone(tags), func(t string) bool { return t == "" }),
		Team: team, Platform: platform, Task: task}
}

// privilegedRequirements are requirements of a step that may be
// privileged: such a step runs only on a worker that allows it.
func privilegedRequirements(req worker.Requirements, privileged bool) worker.Requirements {
	req.Privileged = privileged
	return req
}

// createStepPod creates the step's pod and Secrets (kuberuntime), the pod
// joining the step's trace.
func (s *Server) createStepPod(ctx context.Context, w *kuberuntime.Worker, a *action.Action, given podspec.Secrets) error {
	a.Telemetry = s.podTelemetry(ctx)
	return s.pods.CreatePod(ctx, w, a, given)
}

// superviseTask waits for the step to end (kuberuntime.Runtime.Supervise).
// It returns nil when the server is stopping: the next server follows the
// step.
func (s *Server) superviseTask(ctx context.Context, st *stepState) *eventspb.StepFinished {
	defer s.observePod(ctx, st.worker, st.id)
	return s.pods.Supervise(ctx, kuberuntime.Step{ID: st.id, Worker: st.worker, Finished: st.finished,
		Abort:     func(reason string) error { return s.streams.Abort(st.id, reason) },
		PodFailed: func(ctx context.Context, err error) { s.podFailed(ctx, st, err) },
		Settle: func(ctx context.Context, fin *eventspb.StepFinished) *eventspb.StepFinished {
			return s.dedupOutputs(ctx, st, fin)
		}})
}

// artifactWorker is the worker artifacts are recorded on: the first.
func (s *Server) artifactWorker() string {
	return s.runtime.Workers()[0].Name()
}

// newRuntime prepares the server's workers (s.podWorker, s.cfg.Workers);
// nothing talks to an API server yet.
func (s *Server) newRuntime(client func(worker.Config) (kubernetes.Interface, error), creds stepcreds.Issuer) (*kuberuntime.Runtime, error) {
	return kuberuntime.New(kuberuntime.Config{Workers: s.cfg.Workers, Pod: s.podWorker, Heartbeat: s.cfg.WorkerHeartbeat,
		Placement: s.cfg.Placement, Insecure: s.cfg.Insecure, Started: s.started, Shutdown: errShutdown},
		kuberuntime.Deps{Store: s.db, Metrics: s.obs.metrics, Log: s.log, Client: client, Tokens: s.keys,
			Credentials: creds, Audit: s.auditStore(), CA: func() []byte { return s.caPEM }})
}
