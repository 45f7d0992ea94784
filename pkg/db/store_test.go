package db

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/concourse"
)

func TestTeamsAndUsers(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	main, err := d.EnsureTeam(ctx, "main", TeamAuth{"owner": {Users: []string{"local:admin"}}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := d.EnsureTeam(ctx, "other", TeamAuth{
		"member": {Users: []string{"local:alice"}, Groups: []string{"devs"}},
		"viewer": {Users: []string{"local:admin", "local:alice"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Ensuring again replaces the auth and keeps the id.
	again, err := d.EnsureTeam(ctx, "main", TeamAuth{"owner": {Users: []string{"local:admin"}}, "member": {Users: []string{"local:alice"}}})
	if err != nil || again.ID != main.ID {
		t.Fatalf("ensure again: %+v %v", again, err)
	}
	byID, err := d.TeamByID(ctx, other.ID)
	if err != nil || byID.Name != "other" || byID.Auth["member"].Groups[0] != "devs" {
		t.Fatalf("team by id: %+v %v", byID, err)
	}
	teams, err := d.Teams(ctx)
	if err != nil || len(teams) != 2 || teams[0].Name != "main" || teams[1].Name != "other" {
		t.Fatalf("teams %+v %v", teams, err)
	}
	roles, err := d.UserTeams(ctx, "local:alice")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(roles); got != "map[main:[member] other:[member viewer]]" {
		t.Fatalf("alice's teams: %s", got)
	}
	if roles, _ := d.UserTeams(ctx, "local:nobody"); len(roles) != 0 {
		t.Fatalf("nobody's teams: %v", roles)
	}

	if err := d.UpsertLocalUser(ctx, "alice", "$2a$10$first"); err != nil {
		t.Fatal(err)
	}
	if err := d.UpsertLocalUser(ctx, "alice", "$2a$10$second"); err != nil {
		t.Fatal(err)
	}
	if h, err := d.LocalUserHash(ctx, "alice"); err != nil || h != "$2a$10$second" {
		t.Fatalf("hash %q %v", h, err)
	}
}

func TestContainers(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	team, _ := d.EnsureTeam(ctx, "main", nil)
	b, err := d.CreateOneOffBuild(ctx, team.ID, nil, "", "s")
	if err != nil {
		t.Fatal(err)
	}
	task, err := d.CreateContainer(ctx, Container{
		TeamID: team.ID, BuildID: b.ID, BuildName: b.Name, PlanID: "p1", StepName: "hello", Type: "task",
		WorkerName: "local", Namespace: "ns", PodName: "pod-1", StepID: "s1", WorkingDirectory: "/tmp/build", User: "root",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(task.Handle) != 36 || task.State != "creating" || task.CreateTime.IsZero() {
		t.Fatalf("created %+v", task)
	}
	check, err := d.CreateContainer(ctx, Container{Handle: "check-1", Type: "check", State: "created"})
	if err != nil {
		t.Fatal(err)
	}
	if check.TeamID != 0 || check.BuildID != 0 {
		t.Fatalf("check container %+v", check)
	}
	if _, err := d.CreateContainer(ctx, Container{Handle: "check-1", Type: "check", State: "created"}); !errors.Is(err, ErrConflict) {
		t.Fatalf("same handle: want ErrConflict, got %v", err)
	}
	if _, err := d.CreateContainer(ctx, Container{Type: "bogus"}); err == nil {
		t.Fatal("a bogus type was accepted")
	}
	if err := d.SetContainerState(ctx, task.Handle, "waiting"); err != nil {
		t.Fatal(err)
	}
	// Of two racing for a pod declared ahead, one moves it out of waiting.
	if moved, err := d.MoveContainerState(ctx, task.Handle, "waiting", "created"); err != nil || !moved {
		t.Fatalf("claim a waiting container: moved %v, %v", moved, err)
	}
	if moved, err := d.MoveContainerState(ctx, task.Handle, "waiting", "destroying"); err != nil || moved {
		t.Fatalf("free a claimed container: moved %v, %v", moved, err)
	}
	got, err := d.Container(ctx, task.Handle)
	if err != nil || got.State != "created" || got.PodName != "pod-1" || got.User != "root" {
		t.Fatalf("container %+v %v", got, err)
	}
	for _, c := range []struct {
		f    ContainerFilter
		want int
	}{
		{ContainerFilter{}, 2},
		{ContainerFilter{TeamID: team.ID}, 1},
		{ContainerFilter{BuildID: b.ID, StepName: "hello", Type: "task", PlanID: "p1"}, 1},
		{ContainerFilter{Type: "check"}, 1},
		{ContainerFilter{StepName: "other"}, 0},
	} {
		cs, err := d.Containers(ctx, c.f)
		if err != nil || len(cs) != c.want {
			t.Errorf("filter %+v: %d containers (%v), want %d", c.f, len(cs), err, c.want)
		}
	}
	if err := d.DeleteContainer(ctx, check.Handle); err != nil {
		t.Fatal(err)
	}
	// A build's containers go with it.
	if _, err := d.pool.Exec(ctx, "DELETE FROM builds WHERE id = $1", b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Container(ctx, task.Handle); !errors.Is(err, ErrNotFound) {
		t.Fatalf("container of a deleted build: %v", err)
	}
}

// Builds declaring pods ahead at the same moment never pass a worker's
// share: of 12 at once with room for 3, 3 are recorded.
func TestCreateWaitingContainerKeepsTheShareExact(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	team, _ := d.EnsureTeam(ctx, "main", nil)
	b, err := d.CreateOneOffBuild(ctx, team.ID, nil, "", "s")
	if err != nil {
		t.Fatal(err)
	}
	// One waiting already on the worker, one on another worker.
	for _, w := range []string{"w1", "w2"} {
		if _, err := d.CreateWaitingContainer(ctx, Container{TeamID: team.ID, BuildID: b.ID, Type: "task", WorkerName: w, StepID: "old-" + w}, 4); err != nil {
			t.Fatal(err)
		}
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		made    int
		refused int
	)
	for i := range 12 {
		wg.Go(func() {
			_, err := d.CreateWaitingContainer(ctx, Container{TeamID: team.ID, BuildID: b.ID, Type: "task", WorkerName: "w1", StepID: fmt.Sprint("s", i)}, 4)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				made++
			case errors.Is(err, ErrWaitingLimit):
				refused++
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if made != 3 || refused != 9 {
		t.Fatalf("made %d, refused %d: want 3 and 9", made, refused)
	}
	loads, err := d.WorkerLoads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if loads["w1"].Waiting != 4 || loads["w2"].Waiting != 1 {
		t.Fatalf("waiting: w1 %d, w2 %d", loads["w1"].Waiting, loads["w2"].Waiting)
	}
}

func TestArtifacts(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	main, _ := d.EnsureTeam(ctx, "main", nil)
	other, _ := d.EnsureTeam(ctx, "other", nil)
	b, _ := d.CreateOneOffBuild(ctx, main.ID, nil, "", "s")
	a1, err := d.CreateArtifact(ctx, Artifact{TeamID: main.ID, BuildID: b.ID, Name: "out", Key: "artifacts/aa.tar.zst", Digest: "sha256:aa", Size: 10, WorkerName: "local"})
	if err != nil {
		t.Fatal(err)
	}
	a2, err := d.CreateArtifact(ctx, Artifact{TeamID: other.ID, Key: "artifacts/bb.tar.zst"})
	if err != nil {
		t.Fatal(err)
	}
	if a1.ID == 0 || a2.ID <= a1.ID || a1.CreateTime.IsZero() || a2.BuildID != 0 {
		t.Fatalf("artifacts %+v %+v", a1, a2)
	}
	got, err := d.Artifact(ctx, a1.ID)
	if err != nil || got != a1 {
		t.Fatalf("artifact %+v %v, want %+v", got, err, a1)
	}
	if as, err := d.BuildArtifacts(ctx, b.ID); err != nil || len(as) != 1 || as[0].ID != a1.ID {
		t.Fatalf("build artifacts %+v %v", as, err)
	}
	if as, _ := d.Artifacts(ctx, 0); len(as) != 2 {
		t.Fatalf("all artifacts %+v", as)
	}
	if as, _ := d.Artifacts(ctx, other.ID); len(as) != 1 || as[0].ID != a2.ID {
		t.Fatalf("other's artifacts %+v", as)
	}
}

func TestWorkers(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	start := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
	w := Worker{Name: "local", Tags: []string{"k8s"}, State: "running", Namespace: "porter", Version: "2.5", StartTime: start, ActiveContainers: 3}
	if err := d.UpsertWorker(ctx, w); err != nil {
		t.Fatal(err)
	}
	first, err := d.Worker(ctx, "local")
	if err != nil {
		t.Fatal(err)
	}
	if first.Platform != "linux" || first.Tags[0] != "k8s" || !first.StartTime.Equal(start) || first.Heartbeat.IsZero() || first.ActiveContainers != 3 {
		t.Fatalf("worker %+v", first)
	}
	w.State, w.Tags = "landing", nil
	if err := d.UpsertWorker(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := d.UpsertWorker(ctx, Worker{Name: "b-team", Team: "other", State: "running"}); err != nil {
		t.Fatal(err)
	}
	ws, err := d.Workers(ctx)
	if err != nil || len(ws) != 2 || ws[0].Name != "b-team" || !ws[0].StartTime.IsZero() {
		t.Fatalf("workers %+v %v", ws, err)
	}
	second := ws[1]
	if second.State != "landing" || len(second.Tags) != 0 || second.Heartbeat.Before(first.Heartbeat) {
		t.Fatalf("updated worker %+v (first heartbeat %v)", second, first.Heartbeat)
	}
	if err := d.UpsertWorker(ctx, Worker{Name: "x", State: "bogus"}); err == nil {
		t.Fatal("a bogus state was accepted")
	}
}

// A worker's load: the pods of unfinished builds and how many are tasks
// (what placement weighs), and every pod it has a record of, kept pods of
// finished builds and check pods included (what `fly workers` counts, as
// `fly containers` lists them), and apart the pods declared ahead.
func TestWorkerLoadsCountRunningKeptAndWaitingPods(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	team, _ := d.EnsureTeam(ctx, "main", nil)
	build := func() Build {
		b, err := d.CreateOneOffBuild(ctx, team.ID, nil, "", "s")
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	running, done := build(), build()
	if err := d.FinishBuild(ctx, done.ID, concourse.StatusSucceeded, time.Now()); err != nil {
		t.Fatal(err)
	}
	for i, c := range []Container{
		{TeamID: team.ID, BuildID: running.ID, Type: "task", WorkerName: "a"},
		{TeamID: team.ID, BuildID: running.ID, Type: "get", WorkerName: "a"},
		{TeamID: team.ID, BuildID: done.ID, Type: "task", WorkerName: "a"},
		{TeamID: team.ID, Type: "check", WorkerName: "a"},
		{TeamID: team.ID, BuildID: done.ID, Type: "task", WorkerName: "b"},
		// Declared ahead of its turn: no active step, but waiting.
		{TeamID: team.ID, BuildID: running.ID, Type: "task", WorkerName: "a", State: concourse.ContainerWaiting},
	} {
		c.Handle = fmt.Sprintf("c%d", i)
		if _, err := d.CreateContainer(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	loads, err := d.WorkerLoads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := loads["a"], (WorkerLoad{Containers: 2, Tasks: 1, Pods: 5, Waiting: 1}); got != want {
		t.Errorf("worker a: %+v, want %+v", got, want)
	}
	if got, want := loads["b"], (WorkerLoad{Pods: 1}); got != want {
		t.Errorf("worker b (only a finished build's kept pod): %+v, want %+v", got, want)
	}
}
