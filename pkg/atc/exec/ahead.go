package exec

import (
	"context"
	"errors"
	"fmt"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/atc/exec/taskplan"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/worker"
)

// Pods declared ahead. A task's pod costs the kubelet's pod start (the
// sandbox, three containers), which on the build's critical path made each
// step twice Concourse's. While a step of a serial sequence runs, the
// server declares the pods of the next tasks whose action is already
// fully known, completely (a step's pod keeps its whole action in its own
// spec), gated: their sidecars fetch what inputs exist and wait. At a
// task's turn the server gives the go-ahead with the keys of the inputs
// the steps between made; a task that is not to run after all is
// withdrawn, its process never started.

// aheadPod is a task's pod declared ahead of its turn.
type aheadPod struct {
	// ready is closed once the declaration ended; then the fields below
	// are set, or err says why the task declares its pod at its turn.
	ready       chan struct{}
	err         error
	action      *action.Action
	eventConfig events.TaskConfig
	worker      Worker
	st          *StepState
	container   db.Container
	secrets     podspec.Secrets
}

// aheadDecl is what declaring a task ahead takes: its plan, and the
// artifact names the steps before it still make.
type aheadDecl struct {
	plan *concourse.Plan
	made map[string]bool
}

// declareAhead declares the pods of the tasks among rest, the steps after
// current in a serial sequence, whose action is known before current runs:
// at most Config.Lookahead, up to the first step whose effect on the
// build's artifacts or vars cannot be known ahead. The declarations run
// beside current.
func (x *RunState) declareAhead(ctx context.Context, current *concourse.Plan, rest []concourse.Plan) {
	// Not within across: its values share the plan's IDs, and each
	// value's steps see vars of their own.
	if x.r == nil || x.r.cfg.Lookahead <= 0 || x.b == nil || x.scope(ctx) != x.locals {
		return
	}
	made, known := stepMakes(current)
	if !known {
		return
	}
	var decls []aheadDecl
	for i := range rest {
		if len(decls) >= x.r.cfg.Lookahead {
			break
		}
		p := &rest[i]
		if p.Kind() == concourse.KindTask && declarableAhead(p.Task) {
			decls = append(decls, aheadDecl{plan: p, made: copySet(made)})
		}
		m, known := stepMakes(p)
		if !known {
			break
		}
		for name := range m {
			made[name] = true
		}
	}
	for _, d := range decls {
		ap, fresh := x.reserveAhead(d.plan.ID)
		if !fresh {
			continue
		}
		x.aheadWG.Add(1)
		go func() {
			defer x.aheadWG.Done()
			defer close(ap.ready)
			ap.err = x.declare(ctx, d, ap)
			if ap.err != nil {
				x.r.log.Debug("not declared ahead", "build", x.b.ID, "plan", d.plan.ID, "why", ap.err)
			}
		}()
	}
}

// declarableAhead: a task whose config is in the plan, and whose image is
// not an artifact of the build (one an earlier step may still make).
func declarableAhead(tp *concourse.TaskPlan) bool {
	return tp.ConfigPath == "" && len(tp.Config) > 0 && tp.ImageArtifactName == ""
}

// stepMakes is the build artifacts step p makes, and whether they are
// known before it runs; a step that may change anything else a later
// task's action is made of (local vars, the pipeline) is unknown.
func stepMakes(p *concourse.Plan) (map[string]bool, bool) {
	switch p.Kind() {
	case concourse.KindGet:
		return map[string]bool{p.Get.Name: true}, true
	case concourse.KindArtifactInput:
		return map[string]bool{p.ArtifactInput.Name: true}, true
	case concourse.KindArtifactOutput:
		return map[string]bool{}, true
	case concourse.KindTask:
		if p.Task.ConfigPath != "" {
			return nil, false
		}
		cfg, _, err := taskplan.Config(p.Task)
		if err != nil {
			return nil, false
		}
		out := map[string]bool{}
		for _, o := range cfg.Outputs {
			out[o.Name] = true
		}
		return out, true
	}
	return nil, false
}

func copySet(m map[string]bool) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

// reserveAhead notes that plan id's pod is being declared ahead; fresh is
// false when it already was.
func (x *RunState) reserveAhead(id concourse.PlanID) (*aheadPod, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.ahead == nil {
		x.ahead = map[concourse.PlanID]*aheadPod{}
	}
	if ap, ok := x.ahead[id]; ok {
		return ap, false
	}
	ap := &aheadPod{ready: make(chan struct{})}
	x.ahead[id] = ap
	return ap, true
}

// aheadKey stands for the key of an input a step before the task is still
// to make, while its action is built.
const aheadKey = "\x00ahead"

// declare resolves the task of d as it would run, places it on a worker
// that can take it now, and creates its pod, gated.
func (x *RunState) declare(ctx context.Context, d aheadDecl, ap *aheadPod) error {
	s, b, p := x.r, x.b, d.plan
	lookup := func(name string) (api.ArtifactRef, bool) {
		if d.made[name] {
			return api.ArtifactRef{Key: aheadKey}, true
		}
		return x.artifact(name)
	}
	a, eventConfig, pull, secretParams, err := x.resolvePreparedTaskWith(ctx, p, lookup)
	if err != nil {
		return err
	}
	a.Gated = true
	for i, in := range a.Inputs {
		if in.Key == aheadKey {
			a.Inputs[i].Key, a.Inputs[i].Digest, a.Inputs[i].From = "", "", in.Name
		}
	}
	if err := a.Validate(); err != nil {
		return err
	}
	tp := p.Task
	// A worker that cannot take the task now is not waited for: the task
	// waits at its turn, as any other.
	pctx, giveUp := context.WithCancel(ctx)
	w, err := s.pods.Place(pctx, privilegedRequirements(worker.StepRequirements(b.Team, tp.Tags, eventConfig.Platform, true), tp.Privileged),
		func(string) { giveUp() })
	giveUp()
	if err != nil {
		return fmt.Errorf("place: %w", err)
	}
	c, err := s.recordContainer(ctx, db.Container{TeamID: b.TeamID, BuildID: b.ID, BuildName: b.Name, PlanID: string(p.ID),
		StepName: tp.Name, Type: concourse.KindTask, WorkerName: w.Name(), Namespace: w.Namespace(), WorkingDirectory: a.WorkDir,
		User: a.Run.User, PodName: podspec.Name(a.StepID), StepID: a.StepID, State: concourse.ContainerWaiting})
	if err != nil {
		return err
	}
	b.Update(func() {
		if b.State.Ahead == nil {
			b.State.Ahead = map[concourse.PlanID]buildstate.AheadPod{}
		}
		b.State.Ahead[p.ID] = buildstate.AheadPod{StepID: a.StepID, Worker: w.Name(), Container: c.Handle}
	})
	s.SaveState(ctx, b)
	ap.action, ap.eventConfig, ap.worker, ap.container = a, eventConfig, w, c
	ap.secrets = podspec.Secrets{ImagePull: pull, Params: secretParams, Redact: x.d.SecretValues()}
	ap.st = x.registerStep(w, a.StepID, p.ID, eventConfig)
	if err := s.createStepPod(ctx, w, a, ap.secrets); err != nil {
		x.forgetAhead(context.WithoutCancel(ctx), p.ID, ap)
		return fmt.Errorf("create the pod: %w", err)
	}
	return nil
}

// takeAhead is the pod declared ahead for plan id, once its declaration
// has ended (nil: none, or the declaration failed and the task declares
// its pod now).
func (x *RunState) takeAhead(ctx context.Context, id concourse.PlanID) *aheadPod {
	x.mu.Lock()
	ap, ok := x.ahead[id]
	delete(x.ahead, id)
	x.mu.Unlock()
	if !ok {
		return nil
	}
	select {
	case <-ap.ready:
	case <-ctx.Done():
		x.withdraw(ctx, id, ap, "the build stopped")
		return nil
	}
	if ap.err != nil {
		return nil
	}
	return ap
}

// withdrawAhead withdraws the pods declared ahead for the steps of rest,
// which are not to run: why says so in their audit records.
func (x *RunState) withdrawAhead(ctx context.Context, rest []concourse.Plan, why string) {
	for i := range rest {
		id := rest[i].ID
		x.mu.Lock()
		ap, ok := x.ahead[id]
		delete(x.ahead, id)
		x.mu.Unlock()
		if ok {
			x.withdraw(ctx, id, ap, why)
		}
	}
}

// withdraw stops a pod declared ahead whose task is not to run, in the
// background: supervised as an aborted step, its sidecar is told why,
// which its sealed audit record keeps (a pod whose sidecar has not
// connected yet is deleted at once), then the pod and its records go.
// Run waits for it.
func (x *RunState) withdraw(ctx context.Context, id concourse.PlanID, ap *aheadPod, why string) {
	x.aheadWG.Add(1)
	go func() {
		defer x.aheadWG.Done()
		<-ap.ready
		if ap.err != nil {
			return
		}
		wctx, stop := context.WithCancelCause(context.WithoutCancel(ctx))
		stop(errors.New(why))
		fin := x.r.engine.Supervise(wctx, ap.st)
		x.r.log.Info("withdrew a pod declared ahead", "build", x.b.ID, "plan", id, "step", ap.st.ID(), "why", why,
			"sidecar_said", fin.GetError())
		x.forgetAhead(wctx, id, ap)
	}()
}

// forgetAhead deletes a pod declared ahead and its records.
func (x *RunState) forgetAhead(ctx context.Context, id concourse.PlanID, ap *aheadPod) {
	s := x.r
	s.pods.DeletePod(ctx, ap.worker, ap.st.ID())
	s.engine.Retire(ap.st.ID())
	if err := s.retryDB(ctx, "delete a withdrawn container", func(ctx context.Context) error {
		return s.db.DeleteContainer(ctx, ap.container.Handle)
	}); err != nil {
		s.log.Warn("delete a withdrawn container", "container", ap.container.Handle, "err", err)
	}
	x.b.Update(func() { delete(x.b.State.Ahead, id) })
	s.SaveState(ctx, x.b)
}

// endAhead withdraws what is still declared ahead when the build's plan
// has ended, and the pods a previous server declared ahead for a build it
// resumed, then waits for the withdrawals.
func (x *RunState) endAhead(ctx context.Context) {
	x.mu.Lock()
	left := x.ahead
	x.ahead = nil
	x.mu.Unlock()
	for id, ap := range left {
		x.withdraw(ctx, id, ap, "the build ended before its turn")
	}
	x.aheadWG.Wait()
	x.dropInheritedAhead(context.WithoutCancel(ctx), "")
}

// dropInheritedAhead deletes the pods a previous server declared ahead
// (all, or plan only's): this server did not declare them, and a task
// declares its pod again at its turn.
func (x *RunState) dropInheritedAhead(ctx context.Context, only concourse.PlanID) {
	if x.r == nil || x.b == nil {
		return
	}
	x.mu.Lock()
	ours := map[string]bool{}
	for _, ap := range x.ahead {
		select {
		case <-ap.ready:
			if ap.err == nil {
				ours[ap.st.ID()] = true
			}
		default:
		}
	}
	x.mu.Unlock()
	var drop map[concourse.PlanID]buildstate.AheadPod
	x.b.Update(func() {
		for id, rec := range x.b.State.Ahead {
			if (only == "" || id == only) && !ours[rec.StepID] {
				if drop == nil {
					drop = map[concourse.PlanID]buildstate.AheadPod{}
				}
				drop[id] = rec
			}
		}
	})
	if len(drop) == 0 {
		return
	}
	s := x.r
	for id, rec := range drop {
		if w, err := s.pods.Worker(rec.Worker); err == nil {
			s.pods.DeletePod(ctx, w, rec.StepID)
		}
		if err := s.retryDB(ctx, "delete a withdrawn container", func(ctx context.Context) error {
			return s.db.DeleteContainer(ctx, rec.Container)
		}); err != nil {
			s.log.Warn("delete a withdrawn container", "container", rec.Container, "err", err)
		}
		x.b.Update(func() { delete(x.b.State.Ahead, id) })
	}
	s.SaveState(ctx, x.b)
}

// proceedWith is the go-ahead of a pod declared ahead, and the action the
// task runs with once its inputs are known (a pod lost after the go-ahead
// is declared again with it, ungated). ok is false when an input the
// task needs was not made after all: the task then declares its pod at
// its turn, which says what is missing.
func (x *RunState) proceedWith(ctx context.Context, ap *aheadPod) (*eventspb.Proceed, *action.Action, bool, error) {
	a := *ap.action
	a.Gated = false
	a.Inputs = append([]action.Input(nil), ap.action.Inputs...)
	p := &eventspb.Proceed{}
	late := false
	for i, in := range a.Inputs {
		if in.From == "" {
			continue
		}
		late = true
		ref, ok := x.artifact(in.From)
		if !ok {
			if !in.Optional {
				return nil, nil, false, nil
			}
			a.Inputs[i].From = ""
			continue
		}
		a.Inputs[i].Key, a.Inputs[i].Digest, a.Inputs[i].From = ref.Key, ref.Digest, ""
		p.Inputs = append(p.Inputs, &eventspb.ResolvedInput{Name: in.Name, Key: ref.Key, Digest: ref.Digest})
	}
	if late && len(p.Inputs) > 0 {
		c, err := x.r.pods.StepCredentials(ctx, ap.worker, &a)
		if err != nil {
			return nil, nil, true, err
		}
		p.Credentials = c
	}
	return p, &a, true, nil
}

// runAhead runs a task whose pod was declared ahead: handled is false when
// the pod was withdrawn instead and the task runs as any other.
func (x *RunState) runAhead(ctx context.Context, p *concourse.Plan, r *buildstate.StepRecord, ap *aheadPod) (ok bool, err error, handled bool) {
	proceed, a, usable, err := x.proceedWith(ctx, ap)
	if !usable {
		x.withdraw(ctx, p.ID, ap, "an input it was declared with was not made")
		return false, nil, false
	}
	d := x.delegate(p.ID)
	if err != nil {
		x.withdraw(ctx, p.ID, ap, "the step errored at its turn")
		d.Errored(err.Error())
		x.b.Update(func() { r.Status, r.Error = concourse.StatusErrored, err.Error() })
		x.r.SaveState(ctx, x.b)
		return false, err, true
	}
	w, b, tp := ap.worker, x.b, p.Task
	d.InitializeTask(ap.eventConfig)
	d.SelectedWorker(w.Name())
	b.Update(func() { r.EventConfig = ap.eventConfig })
	st, fin, err := x.runStepPod(ctx, p, stepPod{record: r, worker: w, action: a, restartable: true, attempt: 1,
		container: db.Container{TeamID: b.TeamID, BuildID: b.ID, BuildName: b.Name, PlanID: string(p.ID),
			StepName: tp.Name, Type: concourse.KindTask, WorkerName: w.Name(), Namespace: w.Namespace(), WorkingDirectory: a.WorkDir, User: a.Run.User},
		secrets:  ap.secrets,
		register: func(id string) *StepState { return x.registerStep(w, id, p.ID, ap.eventConfig) },
		declared: &declaredPod{st: ap.st, container: ap.container, proceed: proceed}})
	if err != nil {
		return false, err, true
	}
	ok, err = x.endTask(ctx, p, r, st, fin)
	return ok, err, true
}

// declaredPod is the first pod of a step that was declared ahead: the
// step runs in it once given the go-ahead.
type declaredPod struct {
	st        *StepState
	container db.Container
	proceed   *eventspb.Proceed
}

// startDeclared gives the declared pod its go-ahead (nil), or says why the
// step errored.
func (x *RunState) startDeclared(ctx context.Context, dp *declaredPod) *eventspb.StepFinished {
	s := x.r
	if err := s.retryDB(ctx, "record the container's state", func(ctx context.Context) error {
		return s.db.SetContainerState(ctx, dp.container.Handle, concourse.ContainerCreated)
	}); err != nil {
		s.log.Warn("container state", "container", dp.container.Handle, "err", err)
	}
	if err := s.engine.Proceed(dp.st.ID(), dp.proceed); err != nil {
		return Errored(fmt.Sprintf("give the step's pod its go-ahead: %v", err))
	}
	return nil
}
