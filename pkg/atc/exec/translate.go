package exec

import (
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/pkg/events/eventspb"
)

// translate turns one sidecar event into the build event people see, or nil
// for events that only matter to the ATC (they are still recorded, so the
// step's resume point survives a restart).
func (st *StepState) translate(ev *eventspb.Event) events.Event {
	if st.kind != "" {
		if shown, handled := st.translateResource(ev); handled {
			return shown
		}
	}
	origin := events.Origin{ID: string(st.planID)}
	t := ev.GetTime().AsTime().Unix()
	switch p := ev.Payload.(type) {
	case *eventspb.Event_Output:
		origin.Source = events.OriginSourceStdout
		if p.Output.GetStream() == eventspb.Stream_STREAM_STDERR {
			origin.Source = events.OriginSourceStderr
		}
		return events.Log{Time: t, Origin: origin, Payload: string(p.Output.GetData())}
	case *eventspb.Event_Status:
		if p.Status.GetStatus() == eventspb.StepStatus_STEP_STATUS_RUNNING {
			return events.StartTask{Time: t, Origin: origin, Config: st.eventConfig}
		}
	case *eventspb.Event_ProcessExited:
		// Concourse reports no exit status for an interrupted process.
		// One finish-task per task: the ATC may have shown one already for
		// a container killed for memory before a late exit came through.
		if !p.ProcessExited.GetAborted() && !p.ProcessExited.GetTimedOut() && !st.finishShown {
			st.finishShown = true
			return events.FinishTask{Time: t, Origin: origin, ExitStatus: int(p.ProcessExited.GetExitStatus())}
		}
	case *eventspb.Event_Error:
		st.lastError = p.Error.GetMessage()
		return events.Error{Time: t, Origin: origin, Message: p.Error.GetMessage()}
	case *eventspb.Event_StepFinished:
		// A lost entrypoint is what an OOM kill or an eviction looks like
		// from inside the pod: the ATC shows the step's error once it has
		// the kubelet's reason (endEvents), not the sidecar's guess now.
		if p.StepFinished.GetEntrypointLost() {
			return nil
		}
		if msg := p.StepFinished.GetError(); msg != "" && msg != st.lastError && p.StepFinished.GetResult() != eventspb.Result_RESULT_ABORTED {
			st.lastError = msg
			return events.Error{Time: t, Origin: origin, Message: msg}
		}
	}
	return nil
}

// LogEvents logs a step's sidecar events in its build's log, as the build
// events people see where there are some, and passes on its end.
func (st *StepState) LogEvents(evs []*eventspb.Event) {
	for _, ev := range evs {
		st.mu.Lock()
		shown := st.translate(ev)
		st.mu.Unlock()
		st.b.Log.AppendStep(st.id, ev.GetSeq(), shown)
		if fin := ev.GetStepFinished(); fin != nil {
			select {
			case st.finished <- fin:
			default:
			}
		}
	}
}
