// Package stepevents turns a step's sidecar events into the build events
// Concourse shows (log, start-task, finish-task, start-get, error, ...),
// and adds the events of the step's end that the ATC settles on. It is
// pure: the caller logs what it returns, and serializes the calls.
package stepevents

import (
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/pkg/events/eventspb"
)

// Translator is one step's translation; it remembers what it has shown.
type Translator struct {
	PlanID      concourse.PlanID
	EventConfig events.TaskConfig
	// Kind is a resource step's (check, get, put); empty for a task.
	Kind concourse.StepKind

	lastError string
	// finishShown: the build log has the task's finish-task (the sidecar's
	// process exit, or the ATC's for a container killed with its process).
	finishShown bool
}

// Translate turns one sidecar event into the build event people see, or
// nil for events that only matter to the ATC (they are still recorded, so
// the step's resume point survives a restart).
func (t *Translator) Translate(ev *eventspb.Event) events.Event {
	if t.Kind != "" {
		if shown, handled := t.translateResource(ev); handled {
			return shown
		}
	}
	origin := events.Origin{ID: string(t.PlanID)}
	at := ev.GetTime().AsTime().Unix()
	switch p := ev.Payload.(type) {
	case *eventspb.Event_Output:
		origin.Source = events.OriginSourceStdout
		if p.Output.GetStream() == eventspb.Stream_STREAM_STDERR {
			origin.Source = events.OriginSourceStderr
		}
		return events.Log{Time: at, Origin: origin, Payload: string(p.Output.GetData())}
	case *eventspb.Event_Status:
		if p.Status.GetStatus() == eventspb.StepStatus_STEP_STATUS_RUNNING {
			return events.StartTask{Time: at, Origin: origin, Config: t.EventConfig}
		}
	case *eventspb.Event_ProcessExited:
		// Concourse reports no exit status for an interrupted process.
		// One finish-task per task: the ATC may have shown one already for
		// a container killed for memory before a late exit came through.
		if !p.ProcessExited.GetAborted() && !p.ProcessExited.GetTimedOut() && !t.finishShown {
			t.finishShown = true
			return events.FinishTask{Time: at, Origin: origin, ExitStatus: int(p.ProcessExited.GetExitStatus())}
		}
	case *eventspb.Event_Error:
		t.lastError = p.Error.GetMessage()
		return events.Error{Time: at, Origin: origin, Message: p.Error.GetMessage()}
	case *eventspb.Event_StepFinished:
		// A lost entrypoint is what an OOM kill or an eviction looks like
		// from inside the pod: the ATC shows the step's error once it has
		// the kubelet's reason (End), not the sidecar's guess now.
		if p.StepFinished.GetEntrypointLost() {
			return nil
		}
		if msg := p.StepFinished.GetError(); msg != "" && msg != t.lastError && p.StepFinished.GetResult() != eventspb.Result_RESULT_ABORTED {
			t.lastError = msg
			return events.Error{Time: at, Origin: origin, Message: msg}
		}
	}
	return nil
}

// translateResource turns a resource step's sidecar event into the build
// event people see: its stderr as logs, start-get/start-put; the finish
// events carry the version and come from the ATC.
func (t *Translator) translateResource(ev *eventspb.Event) (events.Event, bool) {
	origin := events.Origin{ID: string(t.PlanID)}
	at := ev.GetTime().AsTime().Unix()
	switch p := ev.Payload.(type) {
	case *eventspb.Event_Status:
		if p.Status.GetStatus() == eventspb.StepStatus_STEP_STATUS_RUNNING {
			switch t.Kind {
			case concourse.KindGet:
				return events.StartGet{Time: at, Origin: origin}, true
			case concourse.KindPut:
				return events.StartPut{Time: at, Origin: origin}, true
			}
		}
		return nil, true
	case *eventspb.Event_ProcessExited:
		return nil, true
	}
	return nil, false
}

// End is the build events a step's end adds to what its sidecar's events
// already showed, given the result the ATC settled on (fin).
//
// A task killed for its memory limit gets the finish-task (exit status 137)
// that Concourse shows, when no process exit was shown: when the kubelet
// kills the whole step container the entrypoint goes with the process, and
// the sidecar has no exit to report. Then the step's error, unless it was
// shown already.
func (t *Translator) End(fin *eventspb.StepFinished, now int64) []events.Event {
	origin := events.Origin{ID: string(t.PlanID)}
	var evs []events.Event
	if t.Kind == "" && fin.GetOomKilled() && fin.GetResult() == eventspb.Result_RESULT_FAILED && !t.finishShown {
		t.finishShown = true
		evs = append(evs, events.FinishTask{Time: now, Origin: origin, ExitStatus: int(fin.GetExitStatus())})
	}
	// An aborted step says so in its status; Concourse shows no error for it.
	msg := fin.GetError()
	if msg != "" && msg != t.lastError && fin.GetResult() != eventspb.Result_RESULT_SUCCEEDED && fin.GetResult() != eventspb.Result_RESULT_ABORTED {
		t.lastError = msg
		evs = append(evs, events.Error{Time: now, Origin: origin, Message: msg})
	}
	return evs
}
