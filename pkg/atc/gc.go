package atc

import (
	"context"
	"time"

	"github.com/porter-ci/porter/pkg/gc"
)

// GCConfig tunes the garbage collector (see pkg/gc).
type GCConfig struct {
	// Interval between passes; 0 turns GC off.
	Interval          time.Duration
	ArtifactRetention time.Duration
	// LogRetention: how many builds' logs a job keeps (build_log_retention).
	LogRetention gc.LogRetentionLimits
	// OrphanGrace and StagingAge are there for tests; the defaults suit
	// production.
	OrphanGrace time.Duration
	StagingAge  time.Duration
	// Which finished steps' pods stay, as Concourse's --gc-* flags (see
	// gc.Retention); --pod-retention is the minimum for builds' pods.
	OneOffGrace      time.Duration
	FailedGrace      time.Duration
	HijackGrace      time.Duration
	MaxKeptPerWorker int
}

// gcWorkers are the workers whose pods GC looks after.
func (s *Server) gcWorkers() []gc.Worker {
	var ws []gc.Worker
	for _, w := range s.runtime.Workers() {
		if w.Usable() {
			ws = append(ws, gc.Worker{Name: w.Name(), Namespace: w.Namespace(), Kube: w.Kube(), Pods: w.Pods})
		}
	}
	return ws
}

// newCollector is the server's collector: a finished step's pod stays
// while a retention rule keeps it (gc.Retention), within the cap per worker.
func (s *Server) newCollector() *gc.Collector {
	g := s.cfg.GC
	return gc.New(gc.Config{
		Retention: gc.Retention{Minimum: s.cfg.PodRetention, OneOffGrace: g.OneOffGrace, FailedGrace: g.FailedGrace,
			HijackGrace: g.HijackGrace, MaxKeptPerWorker: g.MaxKeptPerWorker, CheckPodLifetime: s.cfg.CheckPodLifetime},
		OrphanGrace:       s.cfg.GC.OrphanGrace,
		StagingAge:        s.cfg.GC.StagingAge,
		ArtifactRetention: s.cfg.GC.ArtifactRetention,
		LogRetention:      s.cfg.GC.LogRetention,
	}, s.db, s.store, s.gcWorkers, s.log.With("component", "gc"))
}

// runGC runs the collector until ctx ends; the returned channel closes
// when it has stopped.
func (s *Server) runGC(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	if s.cfg.GC.Interval <= 0 {
		close(done)
		return done
	}
	c := s.collector
	c.Switch = s.db
	c.OnPass = func(r gc.Result, _ error) {
		m := s.obs.metrics
		if r.Kept != nil {
			m.KeptPods(r.Kept, r.KeptByWorker)
		}
		m.GCReclaimed("pods", r.Pods+r.OrphanPods, 0)
		m.GCReclaimed("kept_pods_evicted", r.Evicted, 0)
		m.GCReclaimed("kept_pods_resized", r.Resized, 0)
		m.GCReclaimed("containers", r.Containers, 0)
		m.GCReclaimed("resource_caches", r.ResourceCaches, 0)
		m.GCReclaimed("staging", r.StagingObjects, r.StagingBytes)
		m.GCReclaimed("artifacts", r.ArtifactBlobs, r.ArtifactBytes)
		m.GCReclaimed("build_logs", r.BuildLogObjects, 0)
		m.GCReclaimed("build_log_retention", r.ReapedBuildLogs, 0)
	}
	// One collector among replicas (a Lease when in-cluster); the advisory
	// lock guards each pass either way.
	go func() {
		defer close(done)
		s.whileLeading(ctx, "gc", func(ctx context.Context) { c.Run(ctx, s.cfg.GC.Interval) })
	}()
	return done
}

// nudgeGC asks the collector for a pass over the pods soon (a build
// finished: an earlier check's pod, or one past the cap, can go).
func (s *Server) nudgeGC() {
	if s.collector != nil {
		s.collector.Nudge()
	}
}

// freeKeptPods deletes the worker's kept pods that still hold a pod slot,
// for a step the cluster cannot place (kuberuntime.Config.FreeCapacity).
func (s *Server) freeKeptPods(ctx context.Context, worker string) int {
	if s.collector == nil {
		return 0
	}
	n, err := s.collector.FreeWorker(ctx, worker)
	if err != nil {
		s.log.Warn("free kept pods", "worker", worker, "err", err)
	}
	return n
}
