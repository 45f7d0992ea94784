package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/porter-ci/porter/test/testenv"
	"github.com/porter-ci/porter/test/testenv/gitserver"
)

// soak is everything the load, the faults and the checks share.
type soak struct {
	cfg  config
	env  *testenv.ATCEnv
	ns   testenv.WorkerNamespace
	pg   *testenv.PrivatePostgres
	srv  *testenv.ATC
	fly  *testenv.Fly
	git  *gitserver.Server
	repo string
	dir  string
	rec  *recorder

	// randMu guards cfg.rand: every goroutine draws from it.
	randMu sync.Mutex
}

func (s *soak) intn(n int) int {
	s.randMu.Lock()
	defer s.randMu.Unlock()
	return s.cfg.rand.IntN(n)
}

// jitter is d scaled by a random factor in [0.5, 1.5).
func (s *soak) jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(s.intn(int(d)))
}

func run(ctx context.Context, cfg config) (ok bool, err error) {
	dir, err := os.MkdirTemp("", "porter-soak-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(dir)
	var cleanups []func(context.Context) error
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			err = errors.Join(err, cleanups[i](context.WithoutCancel(ctx)))
		}
	}()
	s := &soak{cfg: cfg, dir: dir, rec: newRecorder()}
	fmt.Printf("soak: %s of load, faults %v about every %s, seed %d\n", cfg.Duration, cfg.Faults, cfg.FaultEvery, cfg.Seed)

	if s.env, err = testenv.NewATCEnv(ctx, dir); err != nil {
		return false, err
	}
	ns, removeNS, err := s.env.NewWorkerNamespace(ctx, "porter-soak-")
	if removeNS != nil {
		cleanups = append(cleanups, removeNS)
	}
	if err != nil {
		return false, err
	}
	s.ns = ns
	// A PostgreSQL of its own: restarting it disturbs nobody else.
	if s.pg, err = testenv.StartPrivatePostgres(ctx, dir); err != nil {
		return false, err
	}
	cleanups = append(cleanups, s.pg.Down)
	// Kept pods as in the demo (hack/demo.sh): a finished step stays
	// interceptible for 10 minutes, every finished build's pods stay for 2,
	// so the cap on kept pods is what bounds them.
	if s.srv, err = s.env.NewATC(testenv.ATCConfig{Worker: ns, WorkerName: "soak", Database: s.pg.DSN,
		LocalUsers: []string{"soak:soak"}, MainTeamUsers: []string{"soak"},
		KeepAlive: 10 * time.Minute, PodRetention: 2 * time.Minute}); err != nil {
		return false, err
	}
	if err := s.srv.Start(ctx); err != nil {
		return false, err
	}
	// The server's log outlives the soak's directory, next to the results (copied after
	// the server stopped: cleanups run last first).
	cleanups = append(cleanups, func(context.Context) error {
		return keepLog(s.srv.LogPath(), filepath.Join(filepath.Dir(cfg.JSONPath), "soak-atc.log"))
	})
	cleanups = append(cleanups, func(context.Context) error { return s.srv.Stop() })
	bin, err := testenv.FindFly()
	if err != nil {
		return false, err
	}
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return false, err
	}
	s.fly = testenv.NewFly(bin, home, "soak")
	if res, err := s.fly.Login(ctx, s.srv.URL(), "soak", "soak"); err != nil || res.ExitCode != 0 {
		return false, fmt.Errorf("fly login: %v %s", err, res)
	}
	if s.git, err = gitserver.New(s.env.Cluster["PORTER_CLUSTER_NODE_IP"]); err != nil {
		return false, err
	}
	cleanups = append(cleanups, func(context.Context) error { return s.git.Close() })
	if err := s.setPipelines(ctx); err != nil {
		return false, fmt.Errorf("set the soak's pipelines: %w", err)
	}

	smp, err := newSampler(ctx, s)
	if err != nil {
		return false, err
	}
	cleanups = append(cleanups, func(context.Context) error { smp.close(); return nil })

	start := time.Now()
	loadCtx, stopLoad := context.WithTimeout(ctx, cfg.Duration)
	defer stopLoad()
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { smp.run(sampleCtx, 5*time.Second) })
	var load sync.WaitGroup
	for _, f := range s.loaders() {
		load.Go(func() { f(loadCtx) })
	}
	load.Go(func() { s.injectFaults(loadCtx) })
	load.Wait()
	fmt.Printf("soak: load stopped after %s; draining\n", time.Since(start).Round(time.Second))

	hung, err := s.drain(ctx, 5*time.Minute)
	if err != nil {
		stopSampling()
		wg.Wait()
		return false, fmt.Errorf("drain: %w", err)
	}
	smp.sampleOnce(ctx)
	stopSampling()
	wg.Wait()
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	res, err := s.check(ctx, smp, hung, time.Since(start))
	if err != nil {
		return false, err
	}
	res.print(os.Stdout)
	if err := res.writeJSON(cfg.JSONPath); err != nil {
		return false, err
	}
	fmt.Printf("soak: results in %s\n", cfg.JSONPath)
	return res.ok(), nil
}

// keepLog copies the server's log to dst.
func keepLog(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("keep the server's log: %w", err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		return fmt.Errorf("keep the server's log: %w", err)
	}
	fmt.Printf("soak: the server's log is in %s\n", dst)
	return nil
}
