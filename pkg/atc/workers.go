package atc

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/porter-ci/porter/pkg/atc/exec"
	"github.com/porter-ci/porter/pkg/atc/kuberuntime"
	"github.com/porter-ci/porter/pkg/auditseal"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/podwatch"
	"github.com/porter-ci/porter/pkg/stepcreds"
	"github.com/porter-ci/porter/pkg/worker"
)

// stepRuntime is how the steps place and run their pods (exec.Runtime)
// and how the server supervises them: pkg/atc/kuberuntime.
type stepRuntime interface {
	exec.Runtime
	Supervise(ctx context.Context, st kuberuntime.Step) *eventspb.StepFinished
}

// DefaultWorkerHeartbeat is how often a worker's API server is probed.
const DefaultWorkerHeartbeat = kuberuntime.DefaultHeartbeat

// superviseTask waits for the step to end (kuberuntime.Runtime.Supervise).
// It returns nil when the server is stopping: the next server follows the
// step.
func (s *Server) superviseTask(ctx context.Context, st *exec.StepState) *eventspb.StepFinished {
	w := kubeWorker(st.Worker())
	defer s.observePod(ctx, w, st)
	return s.pods.Supervise(ctx, kuberuntime.Step{ID: st.ID(), Worker: w, Finished: st.Finished(),
		Abort: func(reason string) error { return s.streams.Abort(st.ID(), reason) },
		PodFailed: func(ctx context.Context, err error) {
			if f, ok := podwatch.AsFailure(err); ok && kuberuntime.PodLost(f) {
				st.PodLost(f)
			}
			s.podFailed(ctx, st, err)
		},
		Settle: func(ctx context.Context, fin *eventspb.StepFinished) *eventspb.StepFinished {
			return s.dedupOutputs(ctx, st, fin)
		},
		Waiting: func(ctx context.Context, msg string, first bool) { s.stepWaiting(ctx, st, msg, first) }})
}

// stepWaiting says in the build log that a step's pod waits for room, and
// the first time frees the worker's kept pods that hold a pod slot.
func (s *Server) stepWaiting(ctx context.Context, st *exec.StepState, msg string, first bool) {
	if first {
		s.obs.metrics.CapacityWait()
		if n := s.freeKeptPods(ctx, st.Worker().Name()); n > 0 {
			msg += fmt.Sprintf(" (freed %d pods: kept pods of finished steps, pods declared ahead of their turn)", n)
		}
	}
	s.log.Info("step waits for room", "step", st.ID(), "worker", st.Worker().Name(), "msg", msg)
	st.Build().Log.Append(events.Log{Time: time.Now().Unix(), Origin: events.Origin{ID: string(st.PlanID()), Source: events.OriginSourceStderr},
		Payload: msg + "\n"})
}

// artifactWorker is the worker artifacts are recorded on: the first.
func (s *Server) artifactWorker() string {
	return s.runtime.Workers()[0].Name()
}

// newRuntime prepares the server's workers (s.podWorker, s.cfg.Workers);
// nothing talks to an API server yet.
func (s *Server) newRuntime(client func(worker.Config) (kubernetes.Interface, error), creds stepcreds.Issuer) (*kuberuntime.Runtime, error) {
	return kuberuntime.New(kuberuntime.Config{Workers: s.cfg.Workers, Pod: s.podWorker, Heartbeat: s.cfg.WorkerHeartbeat,
		Placement: s.cfg.Placement, Insecure: s.cfg.Insecure, Started: s.started, Shutdown: exec.ErrShutdown},
		kuberuntime.Deps{Store: s.db, Metrics: s.obs.metrics, Log: s.log, Client: client, Tokens: s.keys,
			Credentials: creds, Audit: s.auditStore(), Sealer: auditseal.Sealer{Staging: s.store, Audit: s.auditStore()},
			CA: func() []byte { return s.caPEM }})
}
