package exec

import (
	"context"
	"time"

	"github.com/porter-ci/porter/pkg/atc/exec/reuse"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events"
)

// showReused shows, once, a step that this build reuses from the failed
// build it resumes (package reuse): its events are in that build's log,
// not this one's. The step then replays its record as any finished step.
func (x *RunState) showReused(ctx context.Context, p *concourse.Plan) {
	var evs []events.Event
	x.b.Update(func() {
		r, ok := x.b.State.Steps[p.ID]
		if !ok || r.ReusedFrom == "" || r.ReuseShown {
			return
		}
		evs = reuse.Events(p.ID, *r, time.Now().Unix())
		r.ReuseShown = true
	})
	if evs == nil {
		return
	}
	// They are what the end of the step's pod showed, in the other build.
	x.delegate(p.ID).PodEnded(evs)
	x.r.SaveState(ctx, x.b)
}
