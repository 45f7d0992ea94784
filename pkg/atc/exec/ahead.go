package exec

import (
	"context"
	"errors"
	"fmt"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/atc/exec/lookahead"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/worker"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Pods declared ahead (package lookahead): while a step of a serial
// sequence runs, the pods of the next tasks and puts whose action is known
// are declared, gated; at a step's turn its pod gets the go-ahead, and a
// step that is not to run after all has its pod withdrawn.

// aheadPod is a step's pod declared ahead of its turn.
type aheadPod struct {
	plan   concourse.PlanID
	action *action.Action
	// eventConfig is a task's (none for a put).
	eventConfig events.TaskConfig
	worker      Worker
	st          *StepState
	container   db.Container
	secrets     podspec.Secrets
	// image is a resource step's image but for its worker's own: a get's
	// resource cache key is made of it.
	image string
	// span is the step's span, begun when its pod was declared: the
	// pod's phases and its sidecar's spans are its children.
	span trace.Span
}

// declareAhead declares, beside the running step current, the pods of the
// steps after it whose action is known (lookahead.Window).
func (x *RunState) declareAhead(ctx context.Context, current *concourse.Plan, rest []concourse.Plan) {
	// Not within across: its values share the plan's IDs, and each
	// value's steps see vars of their own.
	if x.r == nil || x.r.cfg.Lookahead <= 0 || x.b == nil || x.scope(ctx) != x.locals {
		return
	}
	if t := current.Task; t != nil && t.ConfigPath != "" && len(rest) > 0 && !x.begun(current.ID) {
		// What a task from a file makes is known once its file is read;
		// its turn, which comes next, takes the config read here.
		tp, err := x.prepareTask(ctx, t)
		if err != nil {
			return // its turn says what is wrong
		}
		if !x.ahead.Has(current.ID) { // else its pod, declared, has it
			x.mu.Lock()
			if x.prepared == nil {
				x.prepared = map[concourse.PlanID]*concourse.TaskPlan{}
			}
			x.prepared[current.ID] = tp
			x.mu.Unlock()
		}
		read := *current
		read.Task = tp
		current = &read
	}
	for _, d := range lookahead.Window(current, rest, x.r.cfg.Lookahead, x.baseImages()) {
		if x.ahead.Has(d.Plan.ID) || x.begun(d.Plan.ID) {
			continue
		}
		// The step's span begins now: a task's image's check, its pod's
		// phases and its sidecar's spans are its children. The step runs
		// under it at its turn (observed).
		sctx, span := x.stepSpan(ctx, d.Plan)
		x.mu.Lock()
		if x.aheadSpans == nil {
			x.aheadSpans = map[concourse.PlanID]trace.Span{}
		}
		x.aheadSpans[d.Plan.ID] = span
		x.mu.Unlock()
		x.ahead.Declare(d.Plan.ID, func() (*aheadPod, error) {
			ap, err := x.declare(sctx, d)
			if errors.Is(err, db.ErrWaitingLimit) {
				x.r.engine.PodAhead("over_share")
			} else if err != nil {
				x.r.engine.PodAhead("failed")
			}
			if err != nil {
				return nil, err
			}
			ap.span = span
			return ap, nil
		})
	}
}

// begun reports whether the step of plan id has begun, in this server or
// the one whose build it resumes: its pod is its own.
func (x *RunState) begun(id concourse.PlanID) bool {
	var begun bool
	x.b.Update(func() {
		r, ok := x.b.State.Steps[id]
		begun = ok && (r.StepID != "" || r.Finished())
	})
	return begun
}

// declare resolves the step of d as it would run, places it on a worker
// that can take it now, and creates its pod, gated.
func (x *RunState) declare(ctx context.Context, d lookahead.Decl) (*aheadPod, error) {
	if d.Plan.Task == nil {
		return x.declareResource(ctx, d)
	}
	b, p, tp := x.b, d.Plan, d.Plan.Task
	a, eventConfig, pull, secretParams, err := x.resolvePreparedTaskWith(ctx, p, lookahead.Lookup(d.Made, x.artifact))
	if err == nil {
		err = lookahead.Gate(a)
	}
	if err != nil {
		return nil, err
	}
	w, err := x.placeAhead(ctx, privilegedRequirements(worker.StepRequirements(b.Team, tp.Tags, eventConfig.Platform, true), tp.Privileged))
	if err != nil {
		return nil, err
	}
	ap := &aheadPod{plan: p.ID, action: a, eventConfig: eventConfig, worker: w, container: x.taskContainer(p, w, a),
		secrets: podspec.Secrets{ImagePull: pull, Params: secretParams}}
	return ap, x.declarePod(ctx, ap, func(id string) *StepState { return x.registerStep(w, id, p.ID, eventConfig) })
}

// declareResource declares the pod of a put (lookahead.Window) as its
// turn would: its request (source and params, their ((vars)) filled in
// now) in its Secret, its inputs named, those the steps before it make
// by the artifact they come from.
func (x *RunState) declareResource(ctx context.Context, d lookahead.Decl) (*aheadPod, error) {
	p := x.r.cfg.BaseResourceTypeDefaults.Apply(d.Plan)
	var (
		step    resourceStep
		request func() (map[string]any, error)
		g       *getRequest
	)
	switch {
	case p.Put != nil:
		step, request = x.putStep(ctx, p)
	case p.Get != nil:
		g = &getRequest{x: x, gp: p.Get}
		step, request = getStep(p.Get), func() (map[string]any, error) { return g.request(ctx) }
	default:
		return nil, fmt.Errorf("plan %s: only tasks, puts and gets are declared ahead", p.ID)
	}
	if x.baseImages().NeedsCheck(step.image) {
		// Its type's check is a step of the build, run at the step's turn.
		return nil, fmt.Errorf("%s %q: its type's image is known only once its check ran", step.kind, step.name)
	}
	a, stdin, err := x.resolveResource(ctx, p, step, request, lookahead.Available(d.Made, x.allArtifacts()))
	if err == nil && g != nil {
		// A version the resource cache holds needs no pod.
		var hit bool
		if hit, err = g.cached(ctx, a.Image); hit {
			err = fmt.Errorf("get %q: its version is in the resource cache", step.name)
		}
	}
	if err == nil {
		err = lookahead.Gate(a)
	}
	if err != nil {
		return nil, err
	}
	w, err := x.placeAhead(ctx, privilegedRequirements(worker.StepRequirements(x.b.Team, step.tags, "", false), step.image.Privileged))
	if err != nil {
		return nil, err
	}
	image := a.Image
	x.workerImage(w, step, a)
	ap := &aheadPod{plan: p.ID, action: a, image: image, worker: w, container: x.resourceContainer(p, step, w, a), secrets: podspec.Secrets{Stdin: stdin}}
	return ap, x.declarePod(ctx, ap, func(id string) *StepState { return x.registerResourceStep(w, id, p.ID, step.kind) })
}

// placeAhead places a step declared ahead: a worker that cannot take it
// now is not waited for, the step waits at its turn, as any other.
func (x *RunState) placeAhead(ctx context.Context, req worker.Requirements) (Worker, error) {
	pctx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	req.Ahead = true
	w, err := x.r.pods.Place(pctx, req, func(string) { giveUp() })
	if err != nil {
		return nil, fmt.Errorf("place: %w", err)
	}
	return w, nil
}

// declarePod records the container of ap (waiting) and the pod in the
// build's state, registers its step and creates its pod, gated.
func (x *RunState) declarePod(ctx context.Context, ap *aheadPod, register func(stepID string) *StepState) error {
	s, b, a, w := x.r, x.b, ap.action, ap.worker
	c := ap.container
	c.PodName, c.StepID = podspec.Name(a.StepID), a.StepID
	c, err := s.db.CreateWaitingContainer(ctx, c, s.cfg.AheadPerWorker)
	if err != nil {
		return fmt.Errorf("record the container of %s %q: %w", c.Type, c.StepName, err)
	}
	ap.container = c
	b.Update(func() {
		if b.State.Ahead == nil {
			b.State.Ahead = map[concourse.PlanID]buildstate.AheadPod{}
		}
		b.State.Ahead[ap.plan] = buildstate.AheadPod{StepID: a.StepID, Worker: w.Name(), Container: c.Handle}
	})
	s.SaveState(ctx, b)
	ap.secrets.Redact = x.d.SecretValues()
	ap.st = register(a.StepID)
	if err := s.createStepPod(ctx, w, a, ap.secrets); err != nil {
		x.forgetAhead(context.WithoutCancel(ctx), ap)
		return fmt.Errorf("create the pod: %w", err)
	}
	return nil
}

// withdrawAhead withdraws the pods declared for the steps of rest, which
// are not to run: why says so in their audit records.
func (x *RunState) withdrawAhead(ctx context.Context, rest []concourse.Plan, why string) {
	x.ahead.Withdraw(rest, func(ap *aheadPod) { x.withdraw(ctx, ap, why) })
}

// withdraw stops a pod declared ahead whose step is not to run: supervised
// as an aborted step, its sidecar is told why, which its sealed audit
// record keeps (a pod whose sidecar has not connected yet is deleted at
// once), then the pod and its records go.
func (x *RunState) withdraw(ctx context.Context, ap *aheadPod, why string) {
	if errors.Is(context.Cause(ctx), ErrShutdown) {
		return // the next server drops them (State.Ahead) and declares its own
	}
	wctx, stop := context.WithCancelCause(context.WithoutCancel(ctx))
	stop(errors.New(why))
	fin := x.r.engine.Supervise(wctx, ap.st)
	ap.span.SetAttributes(attribute.String("porter.step.not_run", why))
	ap.span.End()
	x.r.engine.PodAhead("withdrawn")
	x.r.log.Info("withdrew a pod declared ahead", "build", x.b.ID, "plan", ap.plan, "step", ap.st.ID(), "why", why, "sidecar_said", fin.GetError())
	x.forgetAhead(wctx, ap)
}

// forgetAhead deletes a pod declared ahead and its records.
func (x *RunState) forgetAhead(ctx context.Context, ap *aheadPod) {
	s := x.r
	s.pods.DeletePod(ctx, ap.worker, ap.st.ID())
	s.engine.Retire(ap.st.ID())
	x.deleteAheadRecords(ctx, ap.plan, ap.container.Handle)
}

func (x *RunState) deleteAheadRecords(ctx context.Context, id concourse.PlanID, handle string) {
	s := x.r
	if err := s.retryDB(ctx, "delete a withdrawn container", func(ctx context.Context) error {
		return s.db.DeleteContainer(ctx, handle)
	}); err != nil && !errors.Is(err, db.ErrNotFound) {
		s.log.Warn("delete a withdrawn container", "container", handle, "err", err)
	}
	x.b.Update(func() { delete(x.b.State.Ahead, id) })
	s.SaveState(ctx, x.b)
}

// endAhead withdraws what is still declared ahead when the build's plan
// has ended, and waits for the withdrawals.
func (x *RunState) endAhead(ctx context.Context) {
	x.ahead.WithdrawAll(func(ap *aheadPod) { x.withdraw(ctx, ap, "the build ended before its turn") })
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, span := range x.aheadSpans {
		span.End() // of steps that never had their turn
	}
	x.aheadSpans = nil
}

// aheadSpan takes the step span begun for plan id when its pod was
// declared ahead.
func (x *RunState) aheadSpan(id concourse.PlanID) (trace.Span, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	span, ok := x.aheadSpans[id]
	delete(x.aheadSpans, id)
	return span, ok
}

// dropInheritedAhead deletes, before a resumed build runs again, the pods
// a previous server declared ahead and did not give the go-ahead: their
// steps declare pods again at their turn.
func (x *RunState) dropInheritedAhead(ctx context.Context) {
	var left map[concourse.PlanID]buildstate.AheadPod
	x.b.Update(func() { left = x.b.State.Ahead })
	for id, rec := range left {
		if w, err := x.r.pods.Worker(rec.Worker); err == nil {
			x.r.pods.DeletePod(ctx, w, rec.StepID)
		}
		x.deleteAheadRecords(ctx, id, rec.Container)
	}
}

// claimAhead moves the container of a pod declared ahead from waiting to
// created, and says whether it was still waiting (not freed by gc).
func (x *RunState) claimAhead(ctx context.Context, handle string) (bool, error) {
	var claimed bool
	err := x.r.retryDB(ctx, "claim a pod declared ahead", func(ctx context.Context) error {
		var err error
		claimed, err = x.r.db.MoveContainerState(ctx, handle, concourse.ContainerWaiting, concourse.ContainerCreated)
		return err
	})
	return claimed, err
}

// proceedAgain gives a resumed step's pod declared ahead its go-ahead
// again, resolved as before from its own spec (nil), or says why the step
// errored: the server that gave it may have stopped before the sidecar had
// it, and a sidecar takes only the first.
func (x *RunState) proceedAgain(ctx context.Context, w Worker, rec buildstate.StepRecord) *eventspb.StepFinished {
	if !rec.Gated {
		return nil
	}
	declared, err := x.r.pods.DeclaredAction(ctx, w, rec.StepID)
	if err == nil && !declared.Gated { // a pod replaced after a loss
		return nil
	}
	if err == nil {
		// The server that stopped may not have claimed it yet. A pod gc
		// freed meanwhile is lost, and the step starts again as after any
		// pod loss.
		_, err = x.claimAhead(ctx, rec.Container)
	}
	if err == nil {
		var proceed *eventspb.Proceed
		if proceed, _, err = x.goAhead(ctx, w, declared); err == nil {
			err = x.r.engine.Proceed(rec.StepID, proceed)
		}
	}
	if err != nil {
		return Errored(fmt.Sprintf("give the step's pod its go-ahead again: %v", err))
	}
	return nil
}

// goAhead is the go-ahead of gated, a pod declared ahead, now that its
// turn came: the keys of the inputs the steps before it made and, when
// there are any, blobstore credentials that may read them (its pod's were
// scoped when the keys were not known yet); and the action it runs with.
func (x *RunState) goAhead(ctx context.Context, w Worker, gated *action.Action) (*eventspb.Proceed, *action.Action, error) {
	proceed, a, made := lookahead.Resolve(gated, x.artifact)
	if !made {
		return nil, nil, errors.New("its inputs were not made as declared")
	}
	if len(proceed.Inputs) > 0 {
		creds, err := x.r.pods.StepCredentials(ctx, w, a)
		if err != nil {
			return nil, nil, err
		}
		proceed.Credentials = creds
	}
	return proceed, a, nil
}

// takeAhead is the pod declared ahead for the step of plan id, given the
// go-ahead (declared, with the action it runs): none when it was not
// declared, or was freed, lost or withdrawn instead, and the step declares
// its pod at its turn, as any other.
func (x *RunState) takeAhead(ctx context.Context, id concourse.PlanID, unwanted func(image string) string) (ap *aheadPod, declared *declaredPod, a *action.Action) {
	ap, ok, err := x.ahead.Take(ctx, id, func(ap *aheadPod) { x.withdraw(ctx, ap, "the build stopped") })
	if err != nil {
		x.r.log.Debug("step's pod not declared ahead", "build", x.b.ID, "plan", id, "err", err)
	}
	if !ok {
		return nil, nil, nil
	}
	if why := unwanted(ap.image); why != "" { // a get whose version was cached since
		x.withdraw(ctx, ap, why)
		return nil, nil, nil
	}
	// gc's FreeWorker may be freeing the pod for a running step at this
	// moment: whichever of the two moves its container out of waiting
	// first has it.
	claimed, err := x.claimAhead(ctx, ap.container.Handle)
	if err != nil {
		x.withdraw(ctx, ap, "its pod's record could not be read")
		return nil, nil, nil
	}
	if gone, _ := x.r.pods.PodGone(ctx, ap.worker, ap.st.ID()); gone || !claimed {
		x.r.engine.PodAhead("freed")
		x.forgetAhead(ctx, ap)
		return nil, nil, nil
	}
	proceed, a, err := x.goAhead(ctx, ap.worker, ap.action)
	if err != nil {
		// Declared again at its turn, the step says what went wrong.
		x.withdraw(ctx, ap, "its inputs were not made as declared")
		return nil, nil, nil
	}
	x.r.engine.PodAhead("started")
	return ap, &declaredPod{st: ap.st, container: ap.container, proceed: proceed}, a
}

// runAhead runs a task whose pod was declared ahead: handled is false when
// none was (takeAhead), and the task runs as any other.
func (x *RunState) runAhead(ctx context.Context, p *concourse.Plan, r *buildstate.StepRecord) (ok bool, err error, handled bool) {
	ap, declared, a := x.takeAhead(ctx, p.ID, func(string) string { return "" })
	if ap == nil {
		return false, nil, false
	}
	w, b := ap.worker, x.b
	d := x.delegate(p.ID)
	d.InitializeTask(ap.eventConfig)
	d.SelectedWorker(w.Name())
	b.Update(func() { r.EventConfig = ap.eventConfig })
	st, fin, err := x.runStepPod(ctx, p, stepPod{record: r, worker: w, action: a, restartable: true, attempt: 1,
		container: x.taskContainer(p, w, a),
		secrets:   ap.secrets,
		register:  func(id string) *StepState { return x.registerStep(w, id, p.ID, ap.eventConfig) },
		declared:  declared})
	if err != nil {
		return false, err, true
	}
	ok, err = x.endTask(ctx, p, r, st, fin)
	return ok, err, true
}
