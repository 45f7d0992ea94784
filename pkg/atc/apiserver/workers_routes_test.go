package apiserver

import (
	"slices"
	"testing"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
)

// Workers (workers.go). w1 is shared, w2 team main's, w3 team other's.

var workerRoutes = []routeCase{
	{method: "GET", path: "/api/v1/workers", ok: 200},
	{method: "PUT", path: "/api/v1/workers/w2/land", role: "pipeline-operator", ok: 200},
	{method: "PUT", path: "/api/v1/workers/w2/retire", role: "pipeline-operator", ok: 200},
	{method: "PUT", path: "/api/v1/workers/w2/prune", role: "pipeline-operator", ok: 400},
	{method: "PUT", path: "/api/v1/workers/w1/land", role: "admin", ok: 200},
}

func TestWorkerRoutesAccess(t *testing.T)    { checkAccess(t, workerRoutes) }
func TestWorkerRoutesStoreDown(t *testing.T) { checkStoreDown(t, workerRoutes) }

func TestListWorkers(t *testing.T) {
	a := newTestAPI(t)
	for _, c := range []struct {
		name, token string
		want        []string
	}{
		{"viewer of main", a.roleIn(t, "viewer"), []string{"w1", "w2"}},
		{"owner of other", a.token(t, "o", map[string]string{"other": "owner"}), []string{"w1", "w3"}},
		{"no team", a.token(t, "n", nil), []string{"w1"}},
		{"admin", a.roleIn(t, "admin"), []string{"w1", "w2", "w3"}},
	} {
		ws := decode[[]concourse.Worker](t, a.do(t, "GET", "/api/v1/workers", c.token, ""), 200)
		var got []string
		for _, w := range ws {
			got = append(got, w.Name)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s sees workers %v, want %v", c.name, got, c.want)
		}
	}
	// fly's containers column is every pod the worker has a record of; its
	// tasks are those of unfinished builds.
	a.store.loads = map[string]db.WorkerLoad{"w2": {Containers: 1, Tasks: 1, Pods: 3}}
	ws := decode[[]concourse.Worker](t, a.do(t, "GET", "/api/v1/workers", a.roleIn(t, "viewer"), ""), 200)
	if w := ws[1]; w.Team != "main" || w.GardenAddr != "namespace/porter-main" || w.BaggageclaimURL != "s3://porter" || w.State != "running" ||
		w.Tags == nil || len(w.ResourceTypes) != 1 || w.StartTime != 1_700_000_000 || w.ActiveContainers != 3 || w.ActiveTasks != 1 {
		t.Errorf("worker %+v", w)
	}
	if w := ws[0]; w.ActiveContainers != 0 || w.ActiveTasks != 0 {
		t.Errorf("worker without pods %+v", w)
	}
}

func TestWorkerActions(t *testing.T) {
	for _, c := range []struct{ worker, action, change string }{
		{"w1", "land", "LandWorker w1"}, {"w1", "retire", "RetireWorker w1"}, {"w2", "land", "LandWorker w2"}, {"w2", "retire", "RetireWorker w2"},
	} {
		a := newTestAPI(t)
		if ans := a.do(t, "PUT", "/api/v1/workers/"+c.worker+"/"+c.action, a.roleIn(t, "admin"), ""); ans.code != 200 || !a.store.changed(c.change) {
			t.Errorf("%s %s: %d %s, changes %v", c.action, c.worker, ans.code, ans, a.store.calls)
		}
	}
	a := newTestAPI(t)
	// fly prints the stderr of a refused prune.
	if got := decode[map[string]string](t, a.do(t, "PUT", "/api/v1/workers/w1/prune", a.roleIn(t, "admin"), ""), 400); got["stderr"] != "cannot prune running worker" {
		t.Errorf("prune a running worker: %v", got)
	}
	for _, action := range []string{"land", "retire", "prune"} {
		want404(t, a.do(t, "PUT", "/api/v1/workers/ghost/"+action, a.roleIn(t, "admin"), ""), "Worker Not Found Error", "worker 'ghost' not found")
		// A shared worker is the admins'; another team's is that team's.
		wantText(t, a.do(t, "PUT", "/api/v1/workers/w1/"+action, a.roleIn(t, "member"), ""), 403, `not allowed to change worker "w1"`)
		// Another team's worker answers as a name nobody has: worker
		// names of other teams cannot be probed.
		want404(t, a.do(t, "PUT", "/api/v1/workers/w3/"+action, a.roleIn(t, "member"), ""), "Worker Not Found Error", "worker 'w3' not found")
		want404(t, a.do(t, "PUT", "/api/v1/workers/ghost/"+action, a.roleIn(t, "member"), ""), "Worker Not Found Error", "worker 'ghost' not found")
	}
	if len(a.store.calls) != 0 {
		t.Errorf("refused actions changed %v", a.store.calls)
	}
}
