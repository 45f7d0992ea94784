package exec

import (
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/pkg/events/eventspb"
)

// LogEvents logs a step's sidecar events in its build's log, as the build
// events people see where there are some, and passes on its end.
func (st *StepState) LogEvents(evs []*eventspb.Event) {
	for _, ev := range evs {
		st.mu.Lock()
		shown := st.ev.Translate(ev)
		st.mu.Unlock()
		st.d.PodEvent(st.id, ev.GetSeq(), shown)
		if fin := ev.GetStepFinished(); fin != nil {
			select {
			case st.finished <- fin:
			default:
			}
		}
	}
}

// endEvents are the build events a step's end adds to what its sidecar's
// events already showed (stepevents.Translator.End).
func (st *StepState) endEvents(fin *eventspb.StepFinished, now int64) []events.Event {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ev.End(fin, now)
}
