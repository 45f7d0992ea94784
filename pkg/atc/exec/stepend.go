package exec

import (
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/pkg/events/eventspb"
)

// endEvents are the build events a step's end adds to what its sidecar's
// events already showed, given the result the ATC settled on (fin). It
// must be called with st.mu held.
//
// A task killed for its memory limit gets the finish-task (exit status 137)
// that Concourse shows, when no process exit was shown: when the kubelet
// kills the whole step container the entrypoint goes with the process, and
// the sidecar has no exit to report. Then the step's error, unless it was
// shown already.
func (st *StepState) endEvents(fin *eventspb.StepFinished, now int64) []events.Event {
	origin := events.Origin{ID: string(st.planID)}
	var evs []events.Event
	if st.kind == "" && fin.GetOomKilled() && fin.GetResult() == eventspb.Result_RESULT_FAILED && !st.finishShown {
		st.finishShown = true
		evs = append(evs, events.FinishTask{Time: now, Origin: origin, ExitStatus: int(fin.GetExitStatus())})
	}
	// An aborted step says so in its status; Concourse shows no error for it.
	msg := fin.GetError()
	if msg != "" && msg != st.lastError && fin.GetResult() != eventspb.Result_RESULT_SUCCEEDED && fin.GetResult() != eventspb.Result_RESULT_ABORTED {
		st.lastError = msg
		evs = append(evs, events.Error{Time: now, Origin: origin, Message: msg})
	}
	return evs
}
