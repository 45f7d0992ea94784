package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// BenchServer is what a benchmark measures against: a server of its own
// (own namespace and database) on the local cluster, and a fly logged in to
// it as user bench, target "bench", with its own HOME.
type BenchServer struct {
	Env    *ATCEnv
	NS     WorkerNamespace
	Server *ATC
	Fly    *Fly
	// Home is fly's HOME (Porter's CLI shares its ~/.flyrc).
	Home string

	cleanups []func(context.Context) error
}

// StartBenchServer starts a BenchServer under dir; its namespace is named
// after prefix. Close undoes it all, also after a failed start.
func StartBenchServer(ctx context.Context, dir, prefix string) (*BenchServer, error) {
	env, err := NewATCEnv(ctx, dir)
	if err != nil {
		return nil, err
	}
	b := &BenchServer{Env: env}
	fail := func(err error) (*BenchServer, error) {
		return nil, errors.Join(err, b.Close(context.WithoutCancel(ctx)))
	}
	ns, removeNS, err := env.NewWorkerNamespace(ctx, prefix)
	b.NS = ns
	if removeNS != nil {
		b.cleanups = append(b.cleanups, removeNS)
	}
	if err != nil {
		return fail(err)
	}
	dsn, dropDB, err := env.NewDatabase(ctx)
	if err != nil {
		return fail(err)
	}
	b.cleanups = append(b.cleanups, dropDB)
	srv, err := env.NewATC(ATCConfig{Worker: ns, WorkerName: "bench", Database: dsn,
		LocalUsers: []string{"bench:bench"}, MainTeamUsers: []string{"bench"}, PodRetention: time.Minute})
	if err != nil {
		return fail(err)
	}
	if err := srv.Start(ctx); err != nil {
		return fail(err)
	}
	b.Server = srv
	b.cleanups = append(b.cleanups, func(context.Context) error { return srv.Stop() })
	flyBin, err := FindFly()
	if err != nil {
		return fail(err)
	}
	b.Home = filepath.Join(dir, "home")
	if err := os.MkdirAll(b.Home, 0o700); err != nil {
		return fail(err)
	}
	b.Fly = NewFly(flyBin, b.Home, "bench")
	if res, err := b.Fly.Login(ctx, srv.URL(), "bench", "bench"); err != nil || res.ExitCode != 0 {
		return fail(fmt.Errorf("fly login: %v %s", err, res))
	}
	return b, nil
}

// Close stops the server and removes its database and namespace.
func (b *BenchServer) Close(ctx context.Context) error {
	var errs []error
	for i := len(b.cleanups) - 1; i >= 0; i-- {
		errs = append(errs, b.cleanups[i](ctx))
	}
	b.cleanups = nil
	return errors.Join(errs...)
}
