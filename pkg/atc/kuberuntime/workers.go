package kuberuntime

import (
	"context"
	"sync"
	"time"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/worker"
)

// Start tries to register every worker once (in parallel), then keeps each
// one's heartbeat in a goroutine owned by ctx; done is closed when they
// have all stopped. A worker that cannot register is retried at every
// heartbeat; the server serves without it meanwhile.
func (r *Runtime) Start(ctx context.Context) (done <-chan struct{}) {
	var wg sync.WaitGroup
	for _, w := range r.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.register(ctx, w)
		}()
	}
	wg.Wait()
	finished := make(chan struct{})
	for _, w := range r.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.keep(ctx, w)
			w.pods.Wait() // its pod watch ends with ctx too
		}()
	}
	go func() { wg.Wait(); close(finished) }()
	return finished
}

// register checks the worker's rights (one SelfSubjectAccessReview each),
// starts the watch over its pods and records it as running.
func (r *Runtime) register(ctx context.Context, w *Worker) bool {
	timeout, cancel := context.WithTimeout(ctx, r.probeTimeout())
	var err error
	if w.cfg.TeamNamespaceOf != "" {
		err = worker.EnsureTeamNamespace(timeout, w.kube, worker.TeamNamespace{Worker: w.cfg.TeamNamespaceOf, Team: w.cfg.Team,
			Namespace: w.cfg.Namespace, WorkerNamespace: r.byName[w.cfg.TeamNamespaceOf].cfg.Namespace, Privileged: w.cfg.AllowsPrivileged()})
	}
	if err == nil {
		err = worker.CheckAccess(timeout, w.kube, w.cfg.Namespace, worker.Required())
	}
	cancel()
	if err == nil {
		err = w.pods.Run(ctx)
	}
	if err == nil {
		_, err = r.store.HeartbeatWorker(ctx, r.record(w, concourse.WorkerRunning))
		if err == nil {
			// A worker that registers anew runs, as a Concourse worker that
			// restarts does, whatever it was left as.
			_, err = r.store.SetWorkerState(ctx, w.cfg.Name, concourse.WorkerLanded, concourse.WorkerRunning)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		if msg := err.Error(); msg != w.lastErr {
			r.log.Error("worker not registered", "worker", w.cfg.Name, "namespace", w.cfg.Namespace, "err", err)
			w.lastErr = msg
		}
		return false
	}
	w.registered, w.lastErr = true, ""
	r.metrics.WorkerState(w.cfg.Name, concourse.WorkerRunning)
	r.log.Info("worker registered", "worker", w.cfg.Name, "namespace", w.cfg.Namespace,
		"platform", w.cfg.Platform, "tags", w.cfg.Tags, "team", w.cfg.Team)
	return true
}

func (r *Runtime) probeTimeout() time.Duration {
	return min(r.cfg.Heartbeat, 10*time.Second)
}

func (r *Runtime) record(w *Worker, state concourse.WorkerState) db.Worker {
	return db.Worker{Name: w.cfg.Name, Platform: w.cfg.Platform, Tags: w.cfg.Tags, Team: w.cfg.Team, State: state,
		Namespace: w.cfg.Namespace, Version: concourse.WorkerVersion, StartTime: r.cfg.Started}
}

// keep heartbeats one worker until ctx ends or it retires.
func (r *Runtime) keep(ctx context.Context, w *Worker) {
	tick := time.NewTicker(r.cfg.Heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		w.mu.Lock()
		registered := w.registered
		w.mu.Unlock()
		if !registered {
			r.register(ctx, w)
			continue
		}
		if gone := r.heartbeat(ctx, w); gone {
			return
		}
	}
}

// heartbeat probes the worker's API server and records it running or
// stalled; a landing worker with nothing left to run becomes landed, a
// retiring one leaves. It reports whether the worker left.
func (r *Runtime) heartbeat(ctx context.Context, w *Worker) (gone bool) {
	probe, cancel := context.WithTimeout(ctx, r.probeTimeout())
	err := w.kube.Discovery().RESTClient().Get().AbsPath("/version").Do(probe).Error()
	cancel()
	state := concourse.WorkerRunning
	w.mu.Lock()
	switch {
	case err != nil && w.lastErr == "":
		r.log.Warn("worker stalled: its API server does not answer", "worker", w.cfg.Name, "err", err)
		w.lastErr = err.Error()
	case err == nil && w.lastErr != "":
		r.log.Info("worker running again", "worker", w.cfg.Name)
		w.lastErr = ""
	}
	w.mu.Unlock()
	if err != nil {
		state = concourse.WorkerStalled
	}
	recorded, err := r.store.HeartbeatWorker(ctx, r.record(w, state))
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("worker heartbeat", "worker", w.cfg.Name, "err", err)
		}
		return false
	}
	r.metrics.WorkerState(w.cfg.Name, recorded)
	if recorded != concourse.WorkerLanding && recorded != concourse.WorkerRetiring {
		return false
	}
	if n, err := r.store.BuildsOnWorker(ctx, w.cfg.Name); err != nil || n > 0 {
		if err != nil {
			r.log.Warn("worker heartbeat", "worker", w.cfg.Name, "err", err)
		}
		return false
	}
	if recorded == concourse.WorkerLanding {
		if ok, err := r.store.SetWorkerState(ctx, w.cfg.Name, concourse.WorkerLanding, concourse.WorkerLanded); err != nil {
			r.log.Warn("land worker", "worker", w.cfg.Name, "err", err)
		} else if ok {
			r.log.Info("worker landed", "worker", w.cfg.Name)
			r.metrics.WorkerState(w.cfg.Name, concourse.WorkerLanded)
		}
		return false
	}
	if err := r.store.DeleteWorker(ctx, w.cfg.Name); err != nil {
		r.log.Warn("retire worker", "worker", w.cfg.Name, "err", err)
		return false
	}
	w.mu.Lock()
	w.retired = true
	w.mu.Unlock()
	r.log.Info("worker retired", "worker", w.cfg.Name)
	r.metrics.WorkerState(w.cfg.Name, "")
	return true
}
