package exec

import (
	"context"
	"time"

	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/atc/exec/reuse"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events"
)

// showReused shows, once, a step that this build reuses from the failed
// build it resumes (package reuse): its events are in that build's log,
// not this one's. The step then replays its record as any finished step.
func (x *RunState) showReused(ctx context.Context, p *concourse.Plan) {
	var (
		evs []events.Event
		rec buildstate.StepRecord
	)
	x.b.Update(func() {
		r, ok := x.b.State.Steps[p.ID]
		if !ok || r.ReusedFrom == "" || r.ReuseShown {
			return
		}
		evs = reuse.Events(p.ID, *r, time.Now().Unix())
		r.ReuseShown = true
		rec = *r
	})
	if evs == nil {
		return
	}
	// They are what the end of the step's pod showed, in the other build.
	x.delegate(p.ID).PodEnded(evs)
	x.r.SaveState(ctx, x.b)
	// A reused put's version is this build's output too (downstream
	// passed: constraints read it), a reused get's its input.
	if rec.Status != concourse.StatusSucceeded || len(rec.Version) == 0 {
		return
	}
	v := buildstate.Version{Version: rec.Version, Metadata: rec.Metadata}
	var err error
	switch {
	case p.Put != nil:
		err = x.r.recordBuildVersion(ctx, x.b, p.Put.Name, p.Put.Resource, v, false)
	case p.Get != nil:
		err = x.r.recordBuildVersion(ctx, x.b, p.Get.Name, p.Get.Resource, v, true)
	}
	if err != nil {
		x.r.log.Error("record a reused step's version", "build", x.b.ID, "plan", p.ID, "err", err)
	}
}
