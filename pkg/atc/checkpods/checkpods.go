// Package checkpods is the bookkeeping of check pods: pods the ATC keeps
// for a while to run many checks in, each as a session over the pod's
// sidecar stream (see pkg/atc/exec). It knows nothing of Kubernetes: the
// caller creates the pods; this package decides when one is needed, lets
// every waiting check share the one being created, and runs a check's
// process in a session.
package checkpods

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/hijack"
	"github.com/porter-ci/porter/pkg/resource"
)

// Key says which checks may share a pod. Neither teams nor pipelines share
// one: a check's request holds its resource's source, credentials
// included, and a pod shared with another pipeline would show that
// pipeline's requests to whoever intercepts it (Pipeline 0: one-off
// builds' image checks, which have no record to intercept them by).
type Key struct {
	Team                          string
	Pipeline                      int64
	Worker, Image, Tags, Platform string
}

// Pool keeps one pod per key. A pod takes new checks for the first half
// of its lifetime, so that the checks it runs end before it does; a pod
// whose sidecar went away is replaced.
type Pool struct {
	// Sessions run the checks' processes in the pods.
	Sessions Sessions
	Lifetime time.Duration
	// MaxChecks bounds the checks one pod runs at once (0: no bound): they
	// share the pod's memory and CPU, so a burst (a pipeline of many
	// resources set, a server restarted) queues instead of running the pod
	// out of memory. A check beyond it waits for one to end.
	MaxChecks int
	// Connected reports whether a pod's sidecar is connected now.
	Connected func(stepID string) bool
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	mu   sync.Mutex
	pods map[Key]*pod
}

type pod struct {
	stepID  string
	created time.Time
	ready   chan struct{} // closed once it can take sessions, or err says why not
	err     error
	// abandoned: its creation stopped because the creating check's own
	// context ended (its build aborted or timed out); the checks that
	// waited for it try again instead of taking that build's error.
	abandoned bool
	slots     chan struct{} // one per check running (nil: no bound)
}

// Sessions run processes in a connected step's pod, over its sidecar's
// stream: intercept's machinery, which check pods reuse.
type Sessions interface {
	// Connected reports whether the step's sidecar is connected now.
	Connected(stepID string) bool
	OpenSession(ctx context.Context, stepID string, open *eventspb.SessionOpen) (hijack.Session, error)
}

// NewPool is a pool of check pods that live for lifetime and run checks
// over sessions; nil (no pooling: a pod per check) when either is unset.
func NewPool(sessions Sessions, lifetime time.Duration, maxChecks int) *Pool {
	if sessions == nil || lifetime <= 0 {
		return nil
	}
	return &Pool{Sessions: sessions, Lifetime: lifetime, MaxChecks: maxChecks, Connected: sessions.Connected}
}

// Pooled reports whether a check's action can run in a check pod of p (nil:
// never): a linux, unprivileged check (a privileged type keeps its own pod:
// the pod's privilege would extend to every check of the key).
func (p *Pool) Pooled(a *action.Action) bool {
	return p != nil && a.Type == action.KindCheck && !a.Privileged && (a.Platform == "" || a.Platform == action.PlatformLinux)
}

// Lease is a check's place in a pod: Release it when the check ends.
type Lease struct {
	StepID string
	slots  chan struct{}
}

// Release gives the check's place back.
func (l Lease) Release() {
	if l.slots != nil {
		<-l.slots
	}
}

func (p *Pool) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// Acquire returns a place in a ready pod for key, once the pod runs fewer
// than MaxChecks checks. When there is no pod in its first half of life,
// newID names a new one and create starts it (the caller's step waits for
// it to be ready); checks that come meanwhile wait for that one. A failed
// creation is every waiter's error, unless it failed because its creator's
// ctx ended: the waiters then try again, one of them creating the pod.
func (p *Pool) Acquire(ctx context.Context, key Key, newID func() string, create func(stepID string) error) (Lease, error) {
	cur, err := p.readyPod(ctx, key, newID, create)
	if err != nil {
		return Lease{}, err
	}
	if cur.slots != nil {
		select {
		case cur.slots <- struct{}{}:
		case <-ctx.Done():
			return Lease{}, context.Cause(ctx)
		}
	}
	return Lease{StepID: cur.stepID, slots: cur.slots}, nil
}

// readyPod returns key's pod once it is ready, creating it when there is
// none to take checks, and again when another check's creation of it was
// abandoned.
func (p *Pool) readyPod(ctx context.Context, key Key, newID func() string, create func(stepID string) error) (*pod, error) {
	for {
		cur, mine := p.podFor(key, newID)
		if mine {
			cur.err = create(cur.stepID)
			if cur.err != nil {
				cur.abandoned = ctx.Err() != nil
				p.mu.Lock()
				if p.pods[key] == cur {
					delete(p.pods, key)
				}
				p.mu.Unlock()
			}
			close(cur.ready)
			return cur, cur.err
		}
		select {
		case <-cur.ready:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		if cur.err == nil || !cur.abandoned {
			return cur, cur.err
		}
	}
}

// podFor is key's pod if it takes checks (ready or being created), else a
// new one this caller must create (mine).
func (p *Pool) podFor(key Key, newID func() string) (cur *pod, mine bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pods == nil {
		p.pods = map[Key]*pod{}
	}
	cur, ok := p.pods[key]
	if ok && p.now().Sub(cur.created) < p.Lifetime/2 {
		select {
		case <-cur.ready:
			if cur.err == nil && p.Connected(cur.stepID) {
				return cur, false
			}
		default: // being created: wait for it
			return cur, false
		}
	}
	cur = &pod{stepID: newID(), created: p.now(), ready: make(chan struct{})}
	if p.MaxChecks > 0 {
		cur.slots = make(chan struct{}, p.MaxChecks)
	}
	p.pods[key] = cur
	return cur, true
}

// Retire takes the pod of stepID out of the pool: it runs the checks it
// has, and no new one. An intercepted check pod is retired before the
// person's session opens, so that what they change in it (the resource
// type's check script, say) never sees another check's request. It
// reports whether the pod was in the pool.
func (p *Pool) Retire(stepID string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, cur := range p.pods {
		if cur.stepID == stepID {
			delete(p.pods, k)
			return true
		}
	}
	return false
}

// Result is how a check's process ended.
type Result struct {
	ExitStatus int32
	// Error: the process could not start or run (the session's error).
	Error string
	// NotFound: with Error, the command is not in the pod's image.
	NotFound bool
	// Stdout is the response, valid JSON, when the process exited 0;
	// StdoutErr says what was wrong with it otherwise.
	Stdout    []byte
	StdoutErr error
}

// ErrGone: the session ended without the process's exit (the pod's
// sidecar went away).
var ErrGone = errors.New("the check pod went away")

// Run runs path in a session of the pod, with stdin, and returns how it
// ended; stderr gets each chunk of its stderr. The session is closed (its
// process killed) when ctx ends first: the error is then ctx's cause.
func Run(ctx context.Context, open func(context.Context, *eventspb.SessionOpen) (hijack.Session, error), path string, stdin []byte, stderr func([]byte)) (Result, error) {
	sess, err := open(ctx, &eventspb.SessionOpen{Command: []string{path}})
	if err != nil {
		return Result{}, err
	}
	defer sess.Close()
	if err := sess.Input(stdin, true); err != nil {
		return Result{}, err
	}
	out := resource.NewStdout(action.KindCheck.Script(), resource.MaxResponse)
	for {
		msg, ok, err := sess.Next(ctx)
		if err != nil || !ok {
			if cause := context.Cause(ctx); cause != nil {
				return Result{}, cause
			}
			return Result{}, ErrGone
		}
		if msg.GetStream() == eventspb.Stream_STREAM_STDOUT {
			out.Write(msg.GetData())
		} else if len(msg.GetData()) > 0 {
			stderr(msg.GetData())
		}
		if !msg.GetExited() {
			continue
		}
		res := Result{ExitStatus: msg.GetExitStatus(), Error: msg.GetError(), NotFound: msg.GetNotFound()}
		if res.Error == "" && res.ExitStatus == 0 {
			res.Stdout, res.StdoutErr = out.Body()
		}
		return res, nil
	}
}

// Finished is how a check that ran to its end (its process exited, or
// could not start) ended, as its own pod's sidecar would say it.
func (r Result) Finished(name, path string) *eventspb.StepFinished {
	switch {
	case r.NotFound:
		return &eventspb.StepFinished{Result: eventspb.Result_RESULT_ERRORED, ExitStatus: -1, Error: fmt.Sprintf("the resource type's image has no %s", path)}
	case r.Error != "":
		return &eventspb.StepFinished{Result: eventspb.Result_RESULT_ERRORED, ExitStatus: -1, Error: fmt.Sprintf("check %q: %s", name, r.Error)}
	case r.ExitStatus != 0:
		return &eventspb.StepFinished{Result: eventspb.Result_RESULT_FAILED, ExitStatus: r.ExitStatus}
	case r.StdoutErr != nil:
		return &eventspb.StepFinished{Result: eventspb.Result_RESULT_ERRORED, Error: r.StdoutErr.Error()}
	}
	return &eventspb.StepFinished{Result: eventspb.Result_RESULT_SUCCEEDED, Response: r.Stdout}
}
