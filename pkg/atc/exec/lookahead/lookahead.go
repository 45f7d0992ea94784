// Package lookahead decides which steps of a serial sequence (tasks and
// puts) have their pods declared ahead of their turn, turns such a step's
// action into a gated one and back, and keeps the pods so declared until
// their turn or their withdrawal. Declaring, running and withdrawing a pod
// are exec's.
//
// A task's pod costs the kubelet's pod start (the sandbox, three
// containers); on the build's critical path that made each step twice
// Concourse's. A step's pod keeps its whole action in its own spec, so a
// pod is declared earlier only when its action is already known:
// completely, but for the keys of inputs the steps before it still make,
// which its go-ahead gives.
package lookahead

import (
	"context"
	"fmt"
	"sync"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atc/exec/resourceimage"
	"github.com/porter-ci/porter/pkg/atc/exec/taskplan"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events/eventspb"
)

// Decl is a step whose pod may be declared ahead.
type Decl struct {
	Plan *concourse.Plan
	// Made are the build artifacts the steps before Plan (the running one
	// included) make: the step's inputs of those names come from them.
	Made map[string]bool
}

// Window is the steps among rest, the steps after current in a serial
// sequence, whose pods may be declared before current runs: at most n, up
// to the first step whose effect on the build's artifacts or vars cannot
// be known before it runs. images are the server's base types' images.
func Window(current *concourse.Plan, rest []concourse.Plan, n int, images resourceimage.Images) []Decl {
	made, known := Makes(current)
	if !known {
		return nil
	}
	var decls []Decl
	for i := range rest {
		if len(decls) >= n {
			break
		}
		p := &rest[i]
		for _, t := range First(p) {
			if len(decls) < n && declarable(t, made, images) {
				decls = append(decls, Decl{Plan: t, Made: clone(made)})
			}
		}
		m, known := Makes(p)
		if !known {
			break
		}
		for name := range m {
			made[name] = true
		}
	}
	return decls
}

// First is the steps with a pod (tasks, puts, gets) that start as soon as
// step p's turn comes: p itself, the first of a do, every branch's first
// of an in_parallel, the first attempt, the step a try, a timeout or a
// hook holds (the hook's own step runs only after it: a put's implicit get
// is its on_success). Nothing within across: its values share the plan's
// IDs.
func First(p *concourse.Plan) []*concourse.Plan {
	switch p.Kind() {
	case concourse.KindTask, concourse.KindPut, concourse.KindGet:
		return []*concourse.Plan{p}
	case concourse.KindDo:
		if len(*p.Do) > 0 {
			return First(&(*p.Do)[0])
		}
	case concourse.KindInParallel:
		var out []*concourse.Plan
		for i := range p.InParallel.Steps {
			out = append(out, First(&p.InParallel.Steps[i])...)
		}
		return out
	case concourse.KindRetry:
		if len(*p.Retry) > 0 {
			return First(&(*p.Retry)[0])
		}
	case concourse.KindTry:
		return First(&p.Try.Step)
	case concourse.KindTimeout:
		return First(&p.Timeout.Step)
	case concourse.KindOnSuccess, concourse.KindOnFailure, concourse.KindOnError, concourse.KindOnAbort, concourse.KindEnsure:
		return First(&hook(p).Step)
	}
	return nil
}

// hook is the hook plan of p, a hook step.
func hook(p *concourse.Plan) *concourse.HookPlan {
	for _, h := range []*concourse.HookPlan{p.OnSuccess, p.OnFailure, p.OnError, p.OnAbort, p.Ensure} {
		if h != nil {
			return h
		}
	}
	return &concourse.HookPlan{}
}

// declarable: a step whose action is known before its turn, but for the
// keys of the inputs the steps before it make.
func declarable(p *concourse.Plan, made map[string]bool, images resourceimage.Images) bool {
	switch p.Kind() {
	case concourse.KindTask:
		return taskDeclarable(p.Task, made)
	case concourse.KindPut:
		// Its params and its inputs' names are in its plan; its image must
		// be known without running its type's check, a step of the build
		// of its own that runs at the put's turn.
		return !images.NeedsCheck(p.Put.TypeImage)
	case concourse.KindGet:
		// A get's version was chosen before the build began (by the
		// scheduler, or its plan); at its turn it takes the resource
		// cache instead if that holds the version by then, and its pod
		// is withdrawn. A put's implicit get (version_from) never can be
		// declared: its version is the one the put makes, known only once
		// the put ran.
		return p.Get.VersionFrom == nil && p.Get.Version != nil && !images.NeedsCheck(p.Get.TypeImage)
	}
	return false
}

// taskDeclarable: a task whose config is in the plan, or in a file of an
// artifact the build has now (one no step before the task makes again),
// and whose image is not an artifact of the build (one an earlier step may
// still make).
func taskDeclarable(tp *concourse.TaskPlan, made map[string]bool) bool {
	if tp.ImageArtifactName != "" {
		return false
	}
	if tp.ConfigPath != "" {
		artifact, _, err := taskplan.SplitConfigPath(tp.ConfigPath)
		return err == nil && !made[artifact]
	}
	return len(tp.Config) > 0
}

// Makes is the build artifacts step p makes, and whether they are known
// before it runs; a step that may change anything else a later task's
// action is made of (local vars, the pipeline), or whose effects are its
// own steps', is unknown.
func Makes(p *concourse.Plan) (map[string]bool, bool) {
	switch p.Kind() {
	case concourse.KindGet:
		return map[string]bool{p.Get.Name: true}, true
	case concourse.KindArtifactInput:
		return map[string]bool{p.ArtifactInput.Name: true}, true
	case concourse.KindArtifactOutput:
		return map[string]bool{}, true
	case concourse.KindPut:
		// A put makes no artifact of the build (its implicit get does, a
		// step of its own) and changes nothing a later step's action is
		// made of: only a get of the version it makes (version_from) is
		// not known before it ran.
		return map[string]bool{}, true
	case concourse.KindInParallel:
		// Fetching several inputs at once (a job's gets, fly execute's
		// uploads) is how most plans begin.
		return makesAll(p.InParallel.Steps)
	case concourse.KindDo:
		return makesAll(*p.Do)
	// What a step that may not run (a hook's, a failed attempt's, a try's)
	// makes may not be made: a later task's input of its name is resolved
	// at the go-ahead from what the build has then, whoever made it.
	case concourse.KindRetry:
		return makesAll(*p.Retry)
	case concourse.KindTry:
		return Makes(&p.Try.Step)
	case concourse.KindTimeout:
		return Makes(&p.Timeout.Step)
	case concourse.KindOnSuccess, concourse.KindOnFailure, concourse.KindOnError, concourse.KindOnAbort, concourse.KindEnsure:
		h := hook(p)
		return makesAll([]concourse.Plan{h.Step, h.Next})
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

// makesAll is what steps make together, known when what each makes is.
func makesAll(steps []concourse.Plan) (map[string]bool, bool) {
	out := map[string]bool{}
	for i := range steps {
		m, known := Makes(&steps[i])
		if !known {
			return nil, false
		}
		for name := range m {
			out[name] = true
		}
	}
	return out, true
}

func clone(m map[string]bool) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

// pendingKey stands for the key of an input a step before the declared
// step is still to make, while its action is built (Lookup, Gate).
const pendingKey = "\x00made-later"

// Lookup finds a declared step's inputs: those the steps before it make
// are pending, the others are the build's artifacts now.
func Lookup(made map[string]bool, artifact func(string) (api.ArtifactRef, bool)) func(string) (api.ArtifactRef, bool) {
	return func(name string) (api.ArtifactRef, bool) {
		if made[name] {
			return api.ArtifactRef{Key: pendingKey}, true
		}
		return artifact(name)
	}
}

// Available is what a put declared ahead finds among the build's
// artifacts (inputs: all, or detected from its params): those it has now,
// and those the steps before the put make, pending as in Lookup.
func Available(made map[string]bool, now map[string]api.ArtifactRef) map[string]api.ArtifactRef {
	out := make(map[string]api.ArtifactRef, len(now)+len(made))
	for name, ref := range now {
		out[name] = ref
	}
	for name := range made {
		out[name] = api.ArtifactRef{Key: pendingKey}
	}
	return out
}

// Gate makes an action built with Lookup a gated one: its pending inputs
// name the artifact they come from instead of a key.
func Gate(a *action.Action) error {
	a.Gated = true
	for i, in := range a.Inputs {
		if in.Key == pendingKey {
			a.Inputs[i].Key, a.Inputs[i].Digest, a.Inputs[i].From = "", "", in.Name
		}
	}
	return a.Validate()
}

// Resolve is a gated action's go-ahead: the keys of its inputs made by the
// steps before it, found by artifact, and the action it runs with (a pod
// lost after the go-ahead is declared again with it, ungated). ok is false
// when an input the task needs was not made after all.
func Resolve(gated *action.Action, artifact func(string) (api.ArtifactRef, bool)) (proceed *eventspb.Proceed, a *action.Action, ok bool) {
	resolved := *gated
	resolved.Gated = false
	resolved.Inputs = append([]action.Input(nil), gated.Inputs...)
	proceed = &eventspb.Proceed{}
	for i, in := range resolved.Inputs {
		if in.From == "" {
			continue
		}
		ref, made := artifact(in.From)
		switch {
		case made:
			resolved.Inputs[i].Key, resolved.Inputs[i].Digest = ref.Key, ref.Digest
			proceed.Inputs = append(proceed.Inputs, &eventspb.ResolvedInput{Name: in.Name, Key: ref.Key, Digest: ref.Digest})
		case !in.Optional:
			return nil, nil, false
		}
		resolved.Inputs[i].From = ""
	}
	return proceed, &resolved, true
}

// Pods are the pods a build declared ahead, by their steps' plans. P is
// exec's record of one.
type Pods[P any] struct {
	mu      sync.Mutex
	entries map[concourse.PlanID]*entry[P]
	// wg counts declarations and withdrawals in flight.
	wg sync.WaitGroup
}

type entry[P any] struct {
	// ready is closed once the declaration ended: pod, or err.
	ready chan struct{}
	pod   P
	err   error
}

// Declare runs declare in the background, unless id's pod was declared
// already.
func (ps *Pods[P]) Declare(id concourse.PlanID, declare func() (P, error)) {
	ps.mu.Lock()
	if ps.entries == nil {
		ps.entries = map[concourse.PlanID]*entry[P]{}
	}
	if _, ok := ps.entries[id]; ok {
		ps.mu.Unlock()
		return
	}
	e := &entry[P]{ready: make(chan struct{})}
	ps.entries[id] = e
	ps.mu.Unlock()
	ps.wg.Add(1)
	go func() {
		defer ps.wg.Done()
		defer close(e.ready)
		e.pod, e.err = declare()
	}()
}

// Take is id's pod declared ahead once its declaration ended; ok false:
// none was, or its declaration failed (err says why), and the task
// declares its pod at its turn. A pod declared while ctx ended is
// withdrawn.
func (ps *Pods[P]) Take(ctx context.Context, id concourse.PlanID, withdraw func(P)) (pod P, ok bool, err error) {
	e := ps.remove(id)
	if e == nil {
		return pod, false, nil
	}
	select {
	case <-e.ready:
	case <-ctx.Done():
		ps.withdraw(e, withdraw)
		return pod, false, context.Cause(ctx)
	}
	if e.err != nil {
		return pod, false, fmt.Errorf("not declared ahead: %w", e.err)
	}
	return e.pod, true, nil
}

// Has reports whether id's pod is declared (or being declared).
func (ps *Pods[P]) Has(id concourse.PlanID) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	_, ok := ps.entries[id]
	return ok
}

// Withdraw withdraws, in the background, the pods declared for the plans
// of rest and the steps they hold.
func (ps *Pods[P]) Withdraw(rest []concourse.Plan, withdraw func(P)) {
	for i := range rest {
		rest[i].Each(func(p *concourse.Plan) {
			if e := ps.remove(p.ID); e != nil {
				ps.withdraw(e, withdraw)
			}
		})
	}
}

// WithdrawAll withdraws every pod still declared ahead, then waits for
// the declarations and withdrawals in flight.
func (ps *Pods[P]) WithdrawAll(withdraw func(P)) {
	ps.mu.Lock()
	left := ps.entries
	ps.entries = nil
	ps.mu.Unlock()
	for _, e := range left {
		ps.withdraw(e, withdraw)
	}
	ps.wg.Wait()
}

func (ps *Pods[P]) remove(id concourse.PlanID) *entry[P] {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	e := ps.entries[id]
	delete(ps.entries, id)
	return e
}

func (ps *Pods[P]) withdraw(e *entry[P], withdraw func(P)) {
	ps.wg.Add(1)
	go func() {
		defer ps.wg.Done()
		<-e.ready
		if e.err == nil {
			withdraw(e.pod)
		}
	}()
}
