package exec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/atc/exec/resourceimage"
	"github.com/porter-ci/porter/pkg/atc/exec/stepplan"
	"github.com/porter-ci/porter/pkg/atc/stepevents"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/worker"
)

// Resource steps run Concourse's resource protocol unchanged: the type's
// image's /opt/resource/check, in or out, with the request on stdin and the
// response on stdout (the sidecar returns it in StepFinished).

// resourceStep is what check, get and put share.
type resourceStep struct {
	kind    concourse.StepKind // check, get, put
	name    string
	typ     string
	source  map[string]any
	params  map[string]any
	image   concourse.TypeImage
	tags    []string
	timeout string
	// restartable: a pod lost under the step is replaced (stepPod).
	restartable bool
}

// resourceResponse is what in and out print.
type resourceResponse struct {
	Version  map[string]string         `json:"version"`
	Metadata []concourse.MetadataField `json:"metadata,omitempty"`
}

// resourceOption adjusts runResource.
type resourceOption func(*resourceRun)

type resourceRun struct {
	// cache, for a get, says whether the resource cache holds the version
	// (for the resolved image); then no pod runs.
	cache func(image string) (bool, error)
	// noWorkerEvent leaves out the selected-worker event (an image check).
	noWorkerEvent bool
}

// stillWanted is why a pod declared ahead is not to run after all: a
// get's version the resource cache holds now (filled by another build).
func (o resourceRun) stillWanted(request func() (map[string]any, error)) func(image string) string {
	return func(image string) string {
		if o.cache == nil {
			return ""
		}
		if _, err := request(); err != nil {
			return "" // its pod holds the request it was declared with
		}
		if hit, _ := o.cache(image); hit {
			return "its version was in the resource cache at its turn"
		}
		return ""
	}
}

func withCache(f func(image string) (bool, error)) resourceOption {
	return func(r *resourceRun) { r.cache = f }
}

func withoutWorkerEvent() resourceOption {
	return func(r *resourceRun) { r.noWorkerEvent = true }
}

// runResource runs a resource step's pod, or follows it again after a
// restart. done says the step had already finished (err is its outcome);
// otherwise fin is how the pod ended (nil: the server is stopping, err
// says why; or a cache hit, left to the caller).
func (x *RunState) runResource(ctx context.Context, p *concourse.Plan, r *buildstate.StepRecord, step resourceStep,
	initialize func(), request func() (map[string]any, error), opts ...resourceOption,
) (fin *eventspb.StepFinished, done bool, err error) {
	var o resourceRun
	for _, opt := range opts {
		opt(&o)
	}
	s, b := x.r, x.b
	var (
		rec      buildstate.StepRecord
		finished bool
	)
	b.Update(func() { rec, finished = *r, r.Finished() })
	if finished {
		_, err := x.replay(rec)
		return nil, true, err
	}
	attempt := 1
	if rec.StepID != "" {
		// The credentials the step read are redacted again from what its
		// pod still logs (the redactions died with the previous server).
		_, _ = request()
		w, err := s.pods.Worker(rec.Worker)
		if err != nil {
			return x.podEnded(ctx, r, x.registerResourceStep(nil, rec.StepID, p.ID, step.kind), Errored(err.Error()))
		}
		if !x.restartGone(ctx, p, w, rec, step.restartable) {
			st := x.registerResourceStep(w, rec.StepID, p.ID, step.kind)
			if fin = x.proceedAgain(ctx, w, rec); fin == nil {
				fin = s.resumeStep(ctx, w, st, rec.StepID)
			}
			return x.podEnded(ctx, r, st, fin)
		}
		attempt = max(rec.Attempt, 1) + 1
	} else if ap, declared, a := x.takeAhead(ctx, p.ID, o.stillWanted(request)); ap != nil {
		// A put or get whose pod was declared ahead (lookahead.Window) runs in it.
		initialize()
		if !o.noWorkerEvent {
			x.delegate(p.ID).SelectedWorker(ap.worker.Name())
		}
		st, fin, err := x.runStepPod(ctx, p, stepPod{record: r, worker: ap.worker, action: a, restartable: step.restartable, attempt: 1,
			container: x.resourceContainer(p, step, ap.worker, a), secrets: ap.secrets, declared: declared,
			register: func(id string) *StepState { return x.registerResourceStep(ap.worker, id, p.ID, step.kind) }})
		if err != nil {
			return nil, true, err
		}
		return x.podEnded(ctx, r, st, fin)
	}

	initialize()
	a, stdin, err := x.resolveResource(ctx, p, step, request, x.allArtifacts())
	if err == nil && o.cache != nil {
		var hit bool
		hit, err = o.cache(a.Image)
		if err == nil && hit {
			return nil, false, nil
		}
	}
	d := x.delegate(p.ID)
	var w Worker
	if err == nil {
		w, err = s.placeStep(ctx, b, d, privilegedRequirements(worker.StepRequirements(b.Team, step.tags, "", false), step.image.Privileged))
		if ctx.Err() != nil {
			_, err := x.stoppedWaiting(ctx, r)
			return nil, true, err
		}
	}
	if err != nil {
		_, err = x.failResource(ctx, p, r, err)
		return nil, true, err
	}
	x.workerImage(w, step, a)
	if !o.noWorkerEvent {
		d.SelectedWorker(w.Name())
	}
	if s.checkPods.Pooled(a) {
		fin := x.runPooledCheck(ctx, p, r, w, a, stdin, step.name)
		if fin == nil {
			return nil, false, interrupted(ctx)
		}
		x.pooledCheckEnded(p, r, fin)
		return fin, false, nil
	}
	st, fin, err := x.runStepPod(ctx, p, stepPod{record: r, worker: w, action: a, restartable: step.restartable, attempt: attempt,
		container: x.resourceContainer(p, step, w, a),
		secrets:   podspec.Secrets{Stdin: stdin},
		register:  func(id string) *StepState { return x.registerResourceStep(w, id, p.ID, step.kind) }})
	if err != nil {
		return nil, true, err
	}
	return x.podEnded(ctx, r, st, fin)
}

// workerImage gives a step of a base type the worker's own image of it,
// when the worker has one.
func (x *RunState) workerImage(w Worker, step resourceStep, a *action.Action) {
	if img, ok := w.BaseResourceType(step.image.BaseType); ok && step.image.CheckPlan == nil && step.image.GetPlan == nil {
		a.Image = img
	}
}

// resourceContainer is the record of a resource step's container on w,
// but for its pod.
func (x *RunState) resourceContainer(p *concourse.Plan, step resourceStep, w Worker, a *action.Action) db.Container {
	b := x.b
	return db.Container{TeamID: b.TeamID, BuildID: b.ID, BuildName: b.Name, PlanID: string(p.ID),
		StepName: step.name, Type: step.kind, WorkerName: w.Name(), Namespace: w.Namespace(), WorkingDirectory: a.WorkDir}
}

// podEnded shows a pod's error and lets its pod go; the record is written
// by endResource once the response is taken in.
func (x *RunState) podEnded(ctx context.Context, r *buildstate.StepRecord, st *StepState, fin *eventspb.StepFinished) (*eventspb.StepFinished, bool, error) {
	if fin == nil {
		return nil, false, interrupted(ctx)
	}
	st.d.PodEnded(st.endEvents(fin, time.Now().Unix()))
	x.b.Update(func() {
		r.AuditKey = fin.GetAuditKey()
		if fin.GetExitStatus() >= 0 {
			code := int(fin.GetExitStatus())
			r.ExitStatus = &code
		}
	})
	x.r.engine.Retire(st.id)
	return fin, false, nil
}

// replayed is the outcome of a step that ended earlier (or could not start).
func (x *RunState) replayed(r *buildstate.StepRecord, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	var rec buildstate.StepRecord
	x.b.Update(func() { rec = *r })
	return stepOutcome(rec.Status, rec.Error)
}

// endResource records how the step ended.
func (x *RunState) endResource(ctx context.Context, p *concourse.Plan, r *buildstate.StepRecord, fin *eventspb.StepFinished) (bool, error) {
	status := buildStatus(fin.GetResult())
	x.b.Update(func() { r.Status, r.Error, r.EndTime = status, fin.GetError(), time.Now().Unix() })
	x.r.SaveState(ctx, x.b)
	if cause := context.Cause(ctx); cause != nil && status == concourse.StatusAborted {
		return false, cause
	}
	return stepOutcome(status, fin.GetError())
}

// failResource ends the step as errored with err shown in the build.
func (x *RunState) failResource(ctx context.Context, p *concourse.Plan, r *buildstate.StepRecord, err error) (bool, error) {
	if errors.Is(err, ErrAborted) || errors.Is(err, ErrShutdown) || errors.Is(err, ErrTimeout) {
		return false, err
	}
	x.delegate(p.ID).Errored(err.Error())
	x.b.Update(func() { r.Status, r.Error, r.EndTime = concourse.StatusErrored, err.Error(), time.Now().Unix() })
	x.r.SaveState(ctx, x.b)
	return false, err
}

// resolveResource turns a resource step into an action, a put's inputs
// found among all. The request is returned apart: it travels in the
// step's Secret, as the source may hold credentials.
func (x *RunState) resolveResource(ctx context.Context, p *concourse.Plan, step resourceStep, request func() (map[string]any, error), all map[string]api.ArtifactRef) (*action.Action, []byte, error) {
	if err := x.r.pods.CheckPlacement(privilegedRequirements(worker.StepRequirements(x.b.Team, step.tags, "", false), step.image.Privileged)); err != nil {
		return nil, nil, err
	}
	var timeout time.Duration
	if step.timeout != "" {
		var err error
		if timeout, err = stepplan.PositiveDuration(step.timeout); err != nil {
			return nil, nil, fmt.Errorf("timeout: %w", err)
		}
	}
	image, err := x.resourceImage(ctx, step)
	if err != nil {
		return nil, nil, err
	}
	req, err := request()
	if err != nil {
		return nil, nil, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %q: request: %w", step.kind, step.name, err)
	}
	if len(body) > podspec.MaxSecretStdin {
		return nil, nil, fmt.Errorf("%s %q: the request (source, version and params) is %d bytes; at most %d fit in the step's Secret",
			step.kind, step.name, len(body), podspec.MaxSecretStdin)
	}
	r := stepplan.Resource{Kind: step.kind, Name: step.name, Image: image, Tags: step.tags, Privileged: step.image.Privileged, Timeout: timeout}
	id := x.identity()
	switch step.kind {
	case concourse.KindGet:
		r.Env = stepplan.ResourceEnv(id.Build, x.r.cfg.ExternalURL)
	case concourse.KindPut:
		r.Env = stepplan.ResourceEnv(id.Build, x.r.cfg.ExternalURL)
		if r.Inputs, err = stepplan.PutInputs(p.Put, all); err != nil {
			return nil, nil, err
		}
	}
	a, err := stepplan.ResourceAction(id, r)
	if err != nil {
		return nil, nil, err
	}
	return a, body, nil
}

// allArtifacts are the build's artifacts now.
func (x *RunState) allArtifacts() map[string]api.ArtifactRef {
	x.mu.Lock()
	defer x.mu.Unlock()
	return maps.Clone(x.artifacts)
}

// identity is what names the actions of the build's steps.
func (x *RunState) identity() stepplan.Identity {
	b := x.b
	return stepplan.Identity{Build: action.Build{ID: fmt.Sprint(b.ID), Name: b.Name, Team: b.Team, AuditID: b.AuditID()},
		BuildID: b.ID, KeepAlive: x.r.cfg.KeepAlive}
}

// resourceImage is the image a resource step runs (resourceimage): a
// pipeline's own type's is found by checking its own resource, unless its
// get names its version.
func (x *RunState) resourceImage(ctx context.Context, step resourceStep) (string, error) {
	ti := step.image
	if image, known, err := x.baseImages().Known(ti); known || err != nil {
		return image, err
	}
	source, typ, version := resourceimage.Source(ti)
	if version == nil && ti.CheckPlan != nil {
		if ti.CheckPlan.Check == nil {
			return "", fmt.Errorf("resource type %q: its image's check plan is not a check", step.typ)
		}
		ok, err := x.Run(ctx, ti.CheckPlan)
		if err != nil {
			return "", fmt.Errorf("check the image of resource type %q: %w", step.typ, err)
		}
		if !ok {
			return "", fmt.Errorf("check the image of resource type %q failed", step.typ)
		}
		x.b.Update(func() {
			if rec, ok := x.b.State.Steps[ti.CheckPlan.ID]; ok {
				version = rec.Version
			}
		})
		if source == nil {
			source, typ = ti.CheckPlan.Check.Source, ti.CheckPlan.Check.Type
		}
		if version == nil {
			return "", fmt.Errorf("resource type %q: the check of its image found no version", step.typ)
		}
	}
	if version == nil {
		return "", fmt.Errorf("resource type %q has no image (neither a base type nor a check of its own)", step.typ)
	}
	source, err := x.stepVars(nil).InterpolateMap(ctx, source)
	if err != nil {
		return "", fmt.Errorf("resource type %q: source: %w", step.typ, err)
	}
	return resourceimage.Pinned(step.typ, typ, source, version)
}

// baseImages are the server's images of the base resource types.
func (x *RunState) baseImages() resourceimage.Images {
	return resourceimage.Images(x.r.cfg.BaseResourceTypes)
}

// registerResourceStep is registerStep for a resource step: its events
// are translated as the step's kind.
func (x *RunState) registerResourceStep(w Worker, id string, planID concourse.PlanID, kind concourse.StepKind) *StepState {
	st := &StepState{id: id, worker: w, b: x.b, d: x.delegate(planID), ev: stepevents.Translator{PlanID: planID, Kind: kind},
		finished: make(chan *eventspb.StepFinished, 1)}
	x.r.engine.RegisterStep(st)
	return st
}
