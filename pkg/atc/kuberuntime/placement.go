package kuberuntime

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/worker"
)

// Place chooses the worker a step runs on, waiting while the workers that
// could run it cannot take it now (stalled, landing, at their task limit);
// waiting is told once what it waits for, each time that changes.
func (r *Runtime) Place(ctx context.Context, req worker.Requirements, waiting func(msg string)) (*Worker, error) {
	req = r.ownNamespace(req)
	said := ""
	for {
		w, err := r.choose(ctx, req)
		var busy *worker.BusyError
		if !errors.As(err, &busy) {
			return w, err
		}
		if msg := busy.Error(); msg != said {
			waiting(msg)
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

func (r *Runtime) choose(ctx context.Context, req worker.Requirements) (*Worker, error) {
	recs, err := r.store.Workers(ctx)
	if err != nil {
		return nil, err
	}
	loads, err := r.store.WorkerLoads(ctx)
	if err != nil {
		return nil, err
	}
	var cs []worker.Candidate
	for _, rec := range recs {
		w, ok := r.byName[rec.Name]
		if !ok || !w.Usable() {
			continue // another server's, or not registered here
		}
		l := loads[rec.Name]
		cs = append(cs, worker.Candidate{Name: rec.Name, Platform: rec.Platform, Team: rec.Team, State: rec.State, Tags: rec.Tags,
			Privileged: w.cfg.AllowsPrivileged(), ActiveContainers: l.Containers, ActiveTasks: l.Tasks, Waiting: l.Waiting})
	}
	c, err := r.cfg.Placement.Choose(cs, req)
	if err != nil {
		return nil, err
	}
	return r.byName[c.Name], nil
}

// CheckPlacement refuses, before anything runs, a step that none of the
// configured workers could ever run (whatever their state now).
func (r *Runtime) CheckPlacement(req worker.Requirements) error {
	req = r.ownNamespace(req)
	var cs []worker.Candidate
	for _, w := range r.workers {
		cs = append(cs, worker.Candidate{Name: w.cfg.Name, Platform: w.cfg.Platform, Team: w.cfg.Team,
			Tags: w.cfg.Tags, Privileged: w.cfg.AllowsPrivileged(), State: concourse.WorkerRunning})
	}
	_, err := worker.Placer{Intn: func(int) int { return 0 }}.Choose(cs, req)
	return err
}

// ownNamespace marks the requirements of a team that has a namespace of
// its own on some worker (team_namespaces): its steps run there only.
func (r *Runtime) ownNamespace(req worker.Requirements) worker.Requirements {
	req.OwnNamespace = worker.OwnNamespace(r.cfg.Workers, req.Team)
	return req
}
