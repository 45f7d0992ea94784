package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"

	"github.com/porter-ci/porter/pkg/auditseal"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/podwatch"
)

// Step is a running step as Supervise follows it.
type Step struct {
	ID     string
	Worker *Worker
	// Finished delivers the sidecar's report of the step's end.
	Finished <-chan *eventspb.StepFinished
	// Abort asks the step's sidecar to stop, for reason; an error means
	// nobody in the pod can be told.
	Abort func(reason string) error
	// PodFailed records that the step failed because of its pod (a
	// *podwatch.Failure, or another error).
	PodFailed func(ctx context.Context, err error)
	// Settle is applied to the sidecar's report of a step that ended on
	// its own (nil: taken as is).
	Settle func(ctx context.Context, fin *eventspb.StepFinished) *eventspb.StepFinished
	// Waiting is told, each time the scheduler's reason changes, that the
	// step's pod waits for room (a line for the build log); first is true
	// the first time (free kept pods). Nil: nobody is told.
	Waiting func(ctx context.Context, msg string, first bool)
}

// Supervise waits for the step to end: its sidecar reports, Kubernetes
// says it cannot succeed, or ctx ends (an abort, a timeout). It returns nil
// when ctx ended with Config.Shutdown: the next server follows the step.
// An ended step's audit record is sealed before Supervise returns, so
// before the step's end is recorded: a server that stops in between
// leaves the step to the next one, which seals it when it follows the
// step again (or finds its pod gone, PodGone).
func (r *Runtime) Supervise(ctx context.Context, st Step) *eventspb.StepFinished {
	fin := r.supervise(ctx, st)
	if fin != nil {
		r.sealAudit(ctx, st.ID)
	}
	return fin
}

// sealPatience bounds how long a step's end waits for a blobstore outage
// to pass before its audit record is left staged.
const sealPatience = 30 * time.Second

// sealAudit seals what the step staged for its audit record into the
// audit trail (Deps.Sealer), retrying through a short blobstore outage.
// A record that could not be sealed stays staged, whole; sealing again
// later finishes it.
func (r *Runtime) sealAudit(ctx context.Context, stepID string) {
	if r.sealer == nil {
		return
	}
	// An abort or a timeout ends the step, not the writing of its record.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sealPatience)
	defer cancel()
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		res, err := r.sealer.Seal(ctx, stepID)
		if len(res.Ignored) > 0 {
			// Only the step's credentials write there: someone used them.
			r.log.Warn("staged objects that are none of the step's audit objects were deleted, not sealed", "step", stepID, "keys", res.Ignored)
		}
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			r.log.Error("seal the step's audit record: it stays staged", "step", stepID,
				"staged", auditseal.StagingPrefix(stepID), "err", err)
			return
		case <-time.After(wait):
		}
	}
}

func (r *Runtime) supervise(ctx context.Context, st Step) *eventspb.StepFinished {
	tracker := st.Worker.pods.Track(st.ID)
	defer tracker.Stop()
	var podEnded, abortGiveUp <-chan time.Time
	stopping := ctx.Done()
	aborting, waited := false, false
	for {
		select {
		case fin := <-st.Finished:
			stopped := ctx.Err() != nil && !errors.Is(context.Cause(ctx), r.cfg.Shutdown)
			if (aborting || stopped) && fin.GetResult() == eventspb.Result_RESULT_SUCCEEDED {
				// The step finished (its outputs stored) before the abort
				// reached it: the abort still wins, and its outputs are
				// never referenced.
				return abortedAfterAll(fin)
			}
			if !aborting && !stopped && fin.GetResult() != eventspb.Result_RESULT_SUCCEEDED {
				// Deleting or evicting the pod stops the step's process
				// (exit 143, or its entrypoint gone), which the sidecar may
				// report as the step's own end: the loss is the cause, and
				// the step may be started again.
				if f := lostNow(st.Worker, st.ID); f != nil {
					st.PodFailed(ctx, f)
					return errored(f.Error())
				}
			}
			if fin.GetResult() == eventspb.Result_RESULT_ERRORED {
				// An OOM kill or an eviction takes the entrypoint with the
				// process, and the sidecar reports that before the kubelet
				// says why: the kubelet's reason is the one people need.
				if f := awaitPodFailure(ctx, tracker, fin.GetEntrypointLost()); f != nil {
					if f.Kind == podwatch.KindOOMKilled {
						return OOMKilled(fin, f)
					}
					st.PodFailed(ctx, f)
					why := proto.Clone(fin).(*eventspb.StepFinished)
					why.Error = f.Error()
					return why
				}
			}
			if st.Settle != nil {
				return st.Settle(ctx, fin)
			}
			return fin
		case err := <-tracker.Failed():
			if f := (*podwatch.Failure)(nil); errors.As(err, &f) && f.Kind == podwatch.KindOOMKilled && !aborting {
				// The sidecar stays for intercept; its report (with the audit
				// trail) follows shortly.
				select {
				case fin := <-st.Finished:
					return OOMKilled(fin, f)
				case <-time.After(oomGrace):
					return OOMKilled(nil, f)
				}
			}
			st.PodFailed(ctx, err)
			r.DeletePod(ctx, st.Worker, st.ID)
			if aborting {
				return &eventspb.StepFinished{Result: eventspb.Result_RESULT_ABORTED, ExitStatus: -1, Error: err.Error()}
			}
			return errored(err.Error())
		case reason := <-tracker.Unschedulable():
			// Capacity usually frees (pods end, an autoscaler adds a node):
			// the step waits, within its timeout and abortable, unless it
			// can never fit.
			if pod, ok := st.Worker.Pod(st.ID); ok {
				if f := neverFits(ctx, st.Worker, pod, reason); f != nil {
					st.PodFailed(ctx, f)
					r.DeletePod(ctx, st.Worker, st.ID)
					return errored(f.Error())
				}
			}
			if st.Waiting != nil && !aborting {
				st.Waiting(ctx, waitingMessage(st.Worker, reason), !waited)
			}
			waited = true
		case end := <-tracker.Ended():
			// The sidecar's last events may still be on their way.
			r.log.Info("step pod ended", "step", st.ID, "phase", end.Phase, "reason", end.Reason)
			if podEnded == nil {
				podEnded = time.After(15 * time.Second)
			}
		case <-podEnded:
			if f := lostNow(st.Worker, st.ID); f != nil {
				st.PodFailed(ctx, f)
				return errored(f.Error())
			}
			return errored(fmt.Sprintf("pod %s ended without its sidecar reporting the step's end", podspec.Name(st.ID)))
		case <-stopping:
			// Only the server stopping leaves the step running; an abort, a
			// timeout or a failing sibling stops it.
			if errors.Is(context.Cause(ctx), r.cfg.Shutdown) {
				return nil
			}
			aborting, stopping = true, nil
			if err := st.Abort(context.Cause(ctx).Error()); err != nil {
				// Nobody in the pod to tell: stopping the pod is all that is left.
				r.DeletePod(ctx, st.Worker, st.ID)
				return &eventspb.StepFinished{Result: eventspb.Result_RESULT_ABORTED, ExitStatus: -1}
			}
			abortGiveUp = time.After(30 * time.Second)
		case <-abortGiveUp:
			r.DeletePod(ctx, st.Worker, st.ID)
			return &eventspb.StepFinished{Result: eventspb.Result_RESULT_ABORTED, ExitStatus: -1}
		}
	}
}

// PodLost reports whether f is the step's pod going away under it (deleted
// by someone else, evicted, preempted, its node drained or gone) rather than
// something of the step's own making: a step is not at fault for it, and
// may be started again in a new pod.
func PodLost(f *podwatch.Failure) bool {
	switch f.Kind {
	case podwatch.KindDeleted, podwatch.KindDisrupted:
		return true
	case podwatch.KindEvicted:
		// An eviction for the pod's own storage limits is the step's doing
		// and would happen again; one for the node's pressure is a loss.
		return !evictedForItsOwnLimit(f.Detail)
	}
	return false
}

// evictedForItsOwnLimit: the kubelet's eviction message says the pod went
// over a limit of its own (an emptyDir's sizeLimit, a container's or the
// pod's ephemeral-storage limit), not that the node ran short.
func evictedForItsOwnLimit(msg string) bool {
	for _, own := range []string{
		"Usage of EmptyDir volume",                   // an emptyDir over its sizeLimit
		"exceeded its local ephemeral storage limit", // a container over its limit
		"exceeds the total limit of containers",      // the pod over its containers' limits
	} {
		if strings.Contains(msg, own) {
			return true
		}
	}
	return false
}

// lostNow is the loss of the step's pod as the informer's cache shows it
// now, or nil.
func lostNow(w *Worker, stepID string) *podwatch.Failure {
	pod, ok := w.Pod(stepID)
	if !ok {
		return nil
	}
	return podLoss(pod)
}

// podLoss is the pod's loss under its step, or nil.
func podLoss(pod *corev1.Pod) *podwatch.Failure {
	if f := podwatch.Classify(pod); f != nil && PodLost(f) {
		return f
	}
	// A pod that ended because its node went (Classify reads an ended
	// pod's disruption as its end, not as a failure).
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return &podwatch.Failure{Kind: podwatch.KindDisrupted, Pod: pod.Namespace + "/" + pod.Name, Reason: c.Reason,
				Detail: fmt.Sprintf("stopped by Kubernetes (%s): %s", c.Reason, c.Message)}
		}
	}
	return nil
}

func errored(msg string) *eventspb.StepFinished {
	return &eventspb.StepFinished{Result: eventspb.Result_RESULT_ERRORED, ExitStatus: -1, Error: msg}
}

// abortedAfterAll is a step that succeeded after it was asked to abort:
// aborted, without outputs, its audit record kept.
func abortedAfterAll(reported *eventspb.StepFinished) *eventspb.StepFinished {
	return &eventspb.StepFinished{Result: eventspb.Result_RESULT_ABORTED, ExitStatus: reported.GetExitStatus(),
		AuditKey: reported.GetAuditKey()}
}

// oomGrace is how long a step the sidecar reports as errored waits for the
// kubelet to say the pod failed (OOMKilled, Evicted), when nothing says the
// kubelet stopped the step's container.
const oomGrace = 5 * time.Second

// entrypointLostGrace bounds the wait when the step's container stopped
// under the process (EntrypointLost): the kubelet writes why no later than
// the container's end, which a loaded API server can take tens of seconds
// to show.
const entrypointLostGrace = 60 * time.Second

// awaitPodFailure waits for Kubernetes' reason for an errored step. When the
// sidecar saw the entrypoint go, it waits until the pod's status shows the
// step container's end: a failure not written by then is not coming.
func awaitPodFailure(ctx context.Context, tracker *podwatch.Tracker, entrypointLost bool) *podwatch.Failure {
	grace, stepEnded := oomGrace, (<-chan struct{})(nil)
	if entrypointLost {
		grace, stepEnded = entrypointLostGrace, tracker.StepEnded()
	}
	timeout := time.NewTimer(grace)
	defer timeout.Stop()
	select {
	case err := <-tracker.Failed():
		f, _ := podwatch.AsFailure(err)
		return f
	case <-stepEnded:
		// The same status may have carried the failure.
		select {
		case err := <-tracker.Failed():
			f, _ := podwatch.AsFailure(err)
			return f
		default:
		}
		// The whole container was SIGKILLed and the runtime wrote its end
		// before the OOM event: name the likely cause, not the sidecar.
		if f := tracker.Killed(); f != nil {
			return f
		}
	case <-timeout.C:
	case <-ctx.Done():
	}
	return nil
}

// OOMKilled is a step killed for exceeding its memory limit: failed with
// 137 (SIGKILL), as Concourse reports it, saying so and naming the limit.
// What the sidecar reported (its audit trail) is kept.
func OOMKilled(reported *eventspb.StepFinished, f *podwatch.Failure) *eventspb.StepFinished {
	fin := &eventspb.StepFinished{}
	if reported != nil {
		fin = proto.Clone(reported).(*eventspb.StepFinished)
	}
	fin.Result, fin.ExitStatus, fin.OomKilled = eventspb.Result_RESULT_FAILED, 137, true
	fin.Error = "out of memory: " + f.Detail
	return fin
}
