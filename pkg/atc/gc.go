package atc

import (
	"context"
	"flag"
	"time"

	"github.com/porter-ci/porter/pkg/gc"
)

// GCConfig tunes the garbage collector (see pkg/gc).
type GCConfig struct {
	// Interval between passes; 0 turns GC off.
	Interval          time.Duration
	ArtifactRetention time.Duration
	// OrphanGrace and StagingAge are there for tests; the defaults suit
	// production.
	OrphanGrace time.Duration
	StagingAge  time.Duration
}

// gcFlags registers the GC flags of serve.
func gcFlags(fs *flag.FlagSet, c *GCConfig) {
	fs.DurationVar(&c.Interval, "gc-interval", 30*time.Second, "time between garbage-collection passes (0: no GC)")
	fs.DurationVar(&c.ArtifactRetention, "artifact-retention", gc.DefaultArtifactRetention,
		"how long an artifact nothing references any more (its build finished, no cache or pinned version) is kept")
	fs.DurationVar(&c.OrphanGrace, "gc-orphan-grace", gc.DefaultOrphanGrace, "age at which a step pod no container record knows is deleted")
	fs.DurationVar(&c.StagingAge, "gc-staging-age", gc.DefaultStagingAge, "age at which a staging/ object (an interrupted upload) is deleted")
}

// gcWorkers are the workers whose pods GC looks after.
func (s *Server) gcWorkers() []gc.Worker {
	return []gc.Worker{{Name: s.cfg.Worker, Namespace: s.cfg.Namespace, Kube: s.kube}}
}

// newCollector is the server's collector: a finished step's pod stays for
// the longer of the keep-alive (intercept) and the pod retention.
func (s *Server) newCollector() *gc.Collector {
	return gc.New(gc.Config{
		PodRetention:      max(s.cfg.PodRetention, s.cfg.KeepAlive),
		OrphanGrace:       s.cfg.GC.OrphanGrace,
		StagingAge:        s.cfg.GC.StagingAge,
		ArtifactRetention: s.cfg.GC.ArtifactRetention,
	}, s.db, s.store, s.gcWorkers(), s.log.With("component", "gc"))
}

// runGC runs the collector until ctx ends; the returned channel closes
// when it has stopped.
func (s *Server) runGC(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	if s.cfg.GC.Interval <= 0 {
		close(done)
		return done
	}
	// Metrics: set c.OnPass to see every pass's gc.Result.
	c := s.newCollector()
	go func() { defer close(done); c.Run(ctx, s.cfg.GC.Interval) }()
	return done
}
