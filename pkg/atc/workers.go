package atc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/podwatch"
	"github.com/porter-ci/porter/pkg/worker"
)

// workerRT is one worker this server runs steps on: its API client, the
// watch over its step pods and what its pods are declared with.
type workerRT struct {
	cfg  worker.Config
	kube kubernetes.Interface
	pods *podwatch.Watcher
	spec podspec.Worker

	mu sync.Mutex
	// registered: the access check passed and the pod watch runs.
	registered bool
	// retired: the worker left after `fly retire-worker`; it takes no
	// steps until the server restarts.
	retired bool
	// lastErr is why the worker is not registered, or stalled.
	lastErr string
}

func (w *workerRT) usable() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.registered && !w.retired
}

// DefaultWorkerHeartbeat is how often a worker's API server is probed.
const DefaultWorkerHeartbeat = 30 * time.Second

// newWorkers prepares the server's workers; nothing talks to an API
// server yet.
func (s *Server) newWorkers(cfgs []worker.Config, client func(worker.Config) (kubernetes.Interface, error)) error {
	s.workerByName = map[string]*workerRT{}
	for _, c := range cfgs {
		kube, err := client(c)
		if err != nil {
			return fmt.Errorf("worker %s: %w", c.Name, err)
		}
		spec := s.podWorker
		spec.Name, spec.Namespace, spec.Platform = c.Name, c.Namespace, c.Platform
		spec.ImagePullSecrets = c.ImagePullSecrets
		spec.AllowPrivileged = c.AllowsPrivileged()
		for tag, p := range c.TagPlacement {
			if spec.TagPlacement == nil {
				spec.TagPlacement = map[string]podspec.Placement{}
			}
			spec.TagPlacement[tag] = podspec.Placement{NodeSelector: p.NodeSelector, Tolerations: p.Tolerations}
		}
		if err := spec.Validate(); err != nil {
			return err
		}
		w := &workerRT{cfg: c, kube: kube, spec: spec,
			pods: podwatch.New(kube, c.Namespace, c.Name, s.log.With("component", "podwatch", "worker", c.Name))}
		s.workers = append(s.workers, w)
		s.workerByName[c.Name] = w
	}
	return nil
}

// worker returns a worker by name; "" is the first (records from before
// there were several).
func (s *Server) worker(name string) (*workerRT, error) {
	if name == "" {
		return s.workers[0], nil
	}
	w, ok := s.workerByName[name]
	if !ok {
		return nil, fmt.Errorf("worker %q is not one of this server's workers", name)
	}
	return w, nil
}

// startWorkers tries to register every worker once (in parallel), then
// keeps each one's heartbeat in a goroutine owned by ctx; done is closed
// when they have all stopped. A worker that cannot register is retried at
// every heartbeat; the server serves without it meanwhile.
func (s *Server) startWorkers(ctx context.Context) (done <-chan struct{}) {
	var wg sync.WaitGroup
	for _, w := range s.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.registerWorker(ctx, w)
		}()
	}
	wg.Wait()
	finished := make(chan struct{})
	for _, w := range s.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.keepWorker(ctx, w)
		}()
	}
	go func() { wg.Wait(); close(finished) }()
	return finished
}

// registerWorker checks the worker's rights (one SelfSubjectAccessReview
// each), starts the watch over its pods and records it as running.
func (s *Server) registerWorker(ctx context.Context, w *workerRT) bool {
	timeout, cancel := context.WithTimeout(ctx, s.probeTimeout())
	var err error
	if w.cfg.TeamNamespaceOf != "" {
		err = worker.EnsureTeamNamespace(timeout, w.kube, worker.TeamNamespace{Worker: w.cfg.TeamNamespaceOf, Team: w.cfg.Team,
			Namespace: w.cfg.Namespace, WorkerNamespace: s.workerByName[w.cfg.TeamNamespaceOf].cfg.Namespace, Privileged: w.cfg.AllowsPrivileged()})
	}
	if err == nil {
		err = worker.CheckAccess(timeout, w.kube, w.cfg.Namespace, worker.Required())
	}
	cancel()
	if err == nil {
		err = w.pods.Run(ctx)
	}
	if err == nil {
		_, err = s.db.HeartbeatWorker(ctx, s.workerRecord(w, worker.StateRunning))
		if err == nil {
			// A worker that registers anew runs, as a Concourse worker that
			// restarts does, whatever it was left as.
			_, err = s.db.SetWorkerState(ctx, w.cfg.Name, worker.StateLanded, worker.StateRunning)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		if msg := err.Error(); msg != w.lastErr {
			s.log.Error("worker not registered", "worker", w.cfg.Name, "namespace", w.cfg.Namespace, "err", err)
			w.lastErr = msg
		}
		return false
	}
	w.registered, w.lastErr = true, ""
	s.obs.metrics.WorkerState(w.cfg.Name, worker.StateRunning)
	s.log.Info("worker registered", "worker", w.cfg.Name, "namespace", w.cfg.Namespace,
		"platform", w.cfg.Platform, "tags", w.cfg.Tags, "team", w.cfg.Team)
	return true
}

func (s *Server) probeTimeout() time.Duration {
	return min(s.cfg.WorkerHeartbeat, 10*time.Second)
}

func (s *Server) workerRecord(w *workerRT, state string) db.Worker {
	return db.Worker{Name: w.cfg.Name, Platform: w.cfg.Platform, Tags: w.cfg.Tags, Team: w.cfg.Team, State: state,
		Namespace: w.cfg.Namespace, Version: concourse.WorkerVersion, StartTime: s.started}
}

// keepWorker heartbeats one worker until ctx ends or it retires.
func (s *Server) keepWorker(ctx context.Context, w *workerRT) {
	tick := time.NewTicker(s.cfg.WorkerHeartbeat)
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
			s.registerWorker(ctx, w)
			continue
		}
		if gone := s.heartbeatWorker(ctx, w); gone {
			return
		}
	}
}

// heartbeatWorker probes the worker's API server and records it running
// or stalled; a landing worker with nothing left to run becomes landed, a
// retiring one leaves. It reports whether the worker left.
func (s *Server) heartbeatWorker(ctx context.Context, w *workerRT) (gone bool) {
	probe, cancel := context.WithTimeout(ctx, s.probeTimeout())
	err := w.kube.Discovery().RESTClient().Get().AbsPath("/version").Do(probe).Error()
	cancel()
	state := worker.StateRunning
	w.mu.Lock()
	switch {
	case err != nil && w.lastErr == "":
		s.log.Warn("worker stalled: its API server does not answer", "worker", w.cfg.Name, "err", err)
		w.lastErr = err.Error()
	case err == nil && w.lastErr != "":
		s.log.Info("worker running again", "worker", w.cfg.Name)
		w.lastErr = ""
	}
	w.mu.Unlock()
	if err != nil {
		state = worker.StateStalled
	}
	recorded, err := s.db.HeartbeatWorker(ctx, s.workerRecord(w, state))
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("worker heartbeat", "worker", w.cfg.Name, "err", err)
		}
		return false
	}
	s.obs.metrics.WorkerState(w.cfg.Name, recorded)
	if recorded != worker.StateLanding && recorded != worker.StateRetiring {
		return false
	}
	if n, err := s.db.BuildsOnWorker(ctx, w.cfg.Name); err != nil || n > 0 {
		if err != nil {
			s.log.Warn("worker heartbeat", "worker", w.cfg.Name, "err", err)
		}
		return false
	}
	if recorded == worker.StateLanding {
		if ok, err := s.db.SetWorkerState(ctx, w.cfg.Name, worker.StateLanding, worker.StateLanded); err != nil {
			s.log.Warn("land worker", "worker", w.cfg.Name, "err", err)
		} else if ok {
			s.log.Info("worker landed", "worker", w.cfg.Name)
			s.obs.metrics.WorkerState(w.cfg.Name, worker.StateLanded)
		}
		return false
	}
	if err := s.db.DeleteWorker(ctx, w.cfg.Name); err != nil {
		s.log.Warn("retire worker", "worker", w.cfg.Name, "err", err)
		return false
	}
	w.mu.Lock()
	w.retired = true
	w.mu.Unlock()
	s.log.Info("worker retired", "worker", w.cfg.Name)
	s.obs.metrics.WorkerState(w.cfg.Name, "")
	return true
}

// placeStep chooses the worker a step runs on, waiting while the workers
// that could run it cannot take it now (stalled, landing, at their task
// limit); the build's log says once what it waits for.
func (s *Server) placeStep(ctx context.Context, b *build, origin events.Origin, req worker.Requirements) (*workerRT, error) {
	req = s.ownNamespace(req)
	b.update(func() {
		for _, r := range b.state.Steps {
			if r.Worker != "" && !slices.Contains(req.Started, r.Worker) {
				req.Started = append(req.Started, r.Worker)
			}
		}
	})
	said := ""
	for {
		w, err := s.chooseWorker(ctx, req)
		var busy *worker.BusyError
		if !errors.As(err, &busy) {
			return w, err
		}
		if msg := busy.Error(); msg != said {
			b.log.Append(events.Log{Time: time.Now().Unix(), Origin: origin, Payload: msg + "\n"})
			said = msg
		}
		// Jittered, so that steps waiting for the same worker do not all
		// ask again in the same instant.
		select {
		case <-ctx.Done():
			return nil, interrupted(ctx)
		case <-time.After(wait.Jitter(time.Second, 0.5)):
		}
	}
}

// stoppedWaiting ends a step that was waiting for a worker when its build
// was aborted (or timed out); a server stopping leaves it to the next one,
// which places it again.
func (x *executor) stoppedWaiting(ctx context.Context, r *stepRecord) (bool, error) {
	err := interrupted(ctx)
	if !errors.Is(err, errShutdown) {
		x.b.update(func() { r.Status, r.EndTime = string(concourse.StatusAborted), time.Now().Unix() })
		x.s.saveState(ctx, x.b)
	}
	return false, err
}

func (s *Server) chooseWorker(ctx context.Context, req worker.Requirements) (*workerRT, error) {
	recs, err := s.db.Workers(ctx)
	if err != nil {
		return nil, err
	}
	loads, err := s.db.WorkerLoads(ctx)
	if err != nil {
		return nil, err
	}
	var cs []worker.Candidate
	for _, r := range recs {
		w, ok := s.workerByName[r.Name]
		if !ok || !w.usable() {
			continue // another server's, or not registered here
		}
		l := loads[r.Name]
		cs = append(cs, worker.Candidate{Name: r.Name, Platform: r.Platform, Team: r.Team, State: r.State, Tags: r.Tags,
			Privileged: w.cfg.AllowsPrivileged(), ActiveContainers: l.Containers, ActiveTasks: l.Tasks})
	}
	c, err := s.cfg.Placement.Choose(cs, req)
	if err != nil {
		return nil, err
	}
	return s.workerByName[c.Name], nil
}

// checkPlacement refuses, before anything runs, a step that none of the
// configured workers could ever run (whatever their state now).
func (s *Server) checkPlacement(req worker.Requirements) error {
	req = s.ownNamespace(req)
	var cs []worker.Candidate
	for _, w := range s.workers {
		cs = append(cs, worker.Candidate{Name: w.cfg.Name, Platform: w.cfg.Platform, Team: w.cfg.Team,
			Tags: w.cfg.Tags, Privileged: w.cfg.AllowsPrivileged(), State: worker.StateRunning})
	}
	_, err := worker.Placer{Intn: func(int) int { return 0 }}.Choose(cs, req)
	return err
}

// requirements are what a step asks of its worker.
func requirements(team string, tags []string, platform string, task bool) worker.Requirements {
	return worker.Requirements{Tags: slices.DeleteFunc(slices.Clone(tags), func(t string) bool { return t == "" }),
		Team: team, Platform: platform, Task: task}
}

// ownNamespace marks the requirements of a team that has a namespace of
// its own on some worker (team_namespaces): its steps run there only.
func (s *Server) ownNamespace(req worker.Requirements) worker.Requirements {
	req.OwnNamespace = worker.OwnNamespace(s.cfg.Workers, req.Team)
	return req
}

// privilegedRequirements are requirements of a step that may be
// privileged: such a step runs only on a worker that allows it.
func privilegedRequirements(req worker.Requirements, privileged bool) worker.Requirements {
	req.Privileged = privileged
	return req
}
