package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/test/testenv"
)

// fakePlanner plans every job as an empty plan named after the job and
// remembers the inputs it was given (pkg/pipeline writes the real plans).
type fakePlanner struct {
	mu     sync.Mutex
	inputs map[string][]map[string]map[string]string // job -> one per planned build
	checks []map[string]string
	fail   error
}

func (p *fakePlanner) JobPlan(_ *concourse.Config, job *concourse.JobConfig, inputs map[string]map[string]string) (concourse.Plan, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		return concourse.Plan{}, p.fail
	}
	if p.inputs == nil {
		p.inputs = map[string][]map[string]map[string]string{}
	}
	p.inputs[job.Name] = append(p.inputs[job.Name], inputs)
	return concourse.Plan{ID: concourse.PlanID(job.Name)}, nil
}

func (p *fakePlanner) CheckPlan(_ *concourse.Config, res *concourse.ResourceConfig, from map[string]string) (concourse.Plan, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.checks = append(p.checks, from)
	return concourse.Plan{ID: concourse.PlanID("check-" + res.Name)}, nil
}

// dbStarter starts builds in the database only: tests finish them.
type dbStarter struct {
	d       *db.DB
	mu      sync.Mutex
	checks  []db.JobBuild
	aborted []string // names of the builds ended through AbortJobBuild
}

func (s *dbStarter) StartJobBuild(ctx context.Context, b db.JobBuild, plan concourse.Plan) error {
	body, _ := json.Marshal(plan)
	return s.d.StartJobBuild(ctx, b.ID, body, "test", time.Now())
}

func (s *dbStarter) FailJobBuild(ctx context.Context, b db.JobBuild, _ error) error {
	return s.d.FinishBuild(ctx, b.ID, concourse.StatusErrored, time.Now())
}

func (s *dbStarter) AbortJobBuild(ctx context.Context, b db.JobBuild) error {
	s.mu.Lock()
	s.aborted = append(s.aborted, b.Name)
	s.mu.Unlock()
	return s.d.FinishBuild(ctx, b.ID, concourse.StatusAborted, time.Now())
}

func (s *dbStarter) RunCheck(_ context.Context, b db.JobBuild, _ concourse.Plan, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks = append(s.checks, b)
	return nil
}

type env struct {
	t        *testing.T
	dsn      string
	d        *db.DB
	pool     *pgxpool.Pool
	planner  *fakePlanner
	starter  *dbStarter
	sched    *Scheduler
	checker  *Checker
	teamID   int
	pipeline int64
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dsn := testenv.Postgres(t)
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	d, err := db.Open(t.Context(), dsn, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	pool, err := pgxpool.New(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	team, err := d.EnsureTeam(t.Context(), "main", nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dsn: dsn, d: d, pool: pool, planner: &fakePlanner{}, starter: &dbStarter{d: d}, teamID: team.ID}
	e.sched = &Scheduler{DB: d, Planner: e.planner, Starter: e.starter, Log: log}
	e.checker = &Checker{DB: d, Planner: e.planner, Runner: e.starter, Server: "test", Log: log}
	return e
}

// setPipeline inserts pipeline p with its jobs and resources, as saving a
// pipeline would (that code lives elsewhere).
func (e *env) setPipeline(yamlJSON string) {
	e.t.Helper()
	ctx := e.t.Context()
	var cfg concourse.Config
	if err := json.Unmarshal([]byte(yamlJSON), &cfg); err != nil {
		e.t.Fatal(err)
	}
	if err := e.pool.QueryRow(ctx, `INSERT INTO pipelines (team_id, name, config) VALUES ($1, 'p', $2) RETURNING id`,
		e.teamID, yamlJSON).Scan(&e.pipeline); err != nil {
		e.t.Fatal(err)
	}
	for _, r := range cfg.Resources {
		body, _ := json.Marshal(r)
		if _, err := e.pool.Exec(ctx, `INSERT INTO resources (pipeline_id, name, type, config, config_hash) VALUES ($1, $2, $3, $4, 'h')`,
			e.pipeline, r.Name, r.Type, body); err != nil {
			e.t.Fatal(err)
		}
	}
	for _, j := range cfg.Jobs {
		body, _ := json.Marshal(j)
		if _, err := e.pool.Exec(ctx, `INSERT INTO jobs (pipeline_id, name, config) VALUES ($1, $2, $3)`, e.pipeline, j.Name, body); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) resource(name string) db.ResourceRef {
	e.t.Helper()
	r, err := e.d.LookupResource(e.t.Context(), e.teamID, "p", name)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) job(name string) db.JobRef {
	e.t.Helper()
	j, err := e.d.LookupJob(e.t.Context(), e.teamID, "p", name)
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

func (e *env) save(resource string, refs ...string) {
	e.t.Helper()
	var vs []db.NewVersion
	for _, r := range refs {
		vs = append(vs, db.NewVersion{Version: map[string]string{"ref": r}})
	}
	if _, err := e.d.SaveVersions(e.t.Context(), e.resource(resource).ID, vs); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) tick() {
	e.t.Helper()
	if err := e.sched.Tick(e.t.Context()); err != nil {
		e.t.Fatalf("tick: %v", err)
	}
}

// builds describes a job's builds, oldest first: "1:started:src=a,b=x".
func (e *env) builds(job string) string {
	e.t.Helper()
	bs, err := e.d.JobBuilds(e.t.Context(), e.job(job).ID, db.BuildFilter{Limit: 100})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for i := len(bs) - 1; i >= 0; i-- {
		b := bs[i]
		vs, err := e.d.BuildVersions(e.t.Context(), b.ID)
		if err != nil {
			e.t.Fatal(err)
		}
		var ins []string
		for _, v := range vs {
			if v.Input {
				ins = append(ins, v.Name+"="+v.Version.Version["ref"])
			}
		}
		out = append(out, fmt.Sprintf("%s:%s:%s", b.Name, b.Status, strings.Join(ins, ",")))
	}
	return strings.Join(out, " ")
}

func (e *env) finish(job, name string, status concourse.BuildStatus) {
	e.t.Helper()
	b, err := e.d.JobBuildByName(e.t.Context(), e.job(job).ID, name)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.d.FinishBuild(e.t.Context(), b.ID, status, time.Now()); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) want(job, want string) {
	e.t.Helper()
	if got := e.builds(job); got != want {
		e.t.Fatalf("builds of %s:\n got %s\nwant %s", job, got, want)
	}
}

func TestTriggerCreatesAndStartsABuildPerNewVersion(t *testing.T) {
	e := newEnv(t)
	e.setPipeline(`{"resources": [{"name": "src", "type": "mock", "source": {}}, {"name": "tools", "type": "mock", "source": {}}],
		"jobs": [{"name": "unit", "plan": [{"get": "src", "trigger": true}, {"get": "tools"}, {"task": "t"}]},
		         {"name": "manual", "plan": [{"get": "src"}]}]}`)
	e.tick()
	e.want("unit", "")
	e.save("src", "a")
	e.tick()
	// tools has no version: the job waits and says why.
	e.want("unit", "")
	if j := e.job("unit"); j.WaitingReason != "no versions of input tools" {
		t.Fatalf("waiting reason %q", j.WaitingReason)
	}
	e.save("tools", "t1")
	e.tick()
	e.want("unit", "1:started:src=a,tools=t1")
	if j := e.job("unit"); j.WaitingReason != "" {
		t.Fatalf("waiting reason %q after the start", j.WaitingReason)
	}
	if got := e.planner.inputs["unit"][0]; !maps.Equal(got["src"], map[string]string{"ref": "a"}) || got["tools"]["ref"] != "t1" {
		t.Fatalf("planned with %v", got)
	}
	e.tick()
	e.want("unit", "1:started:src=a,tools=t1")
	// A new version of a non-trigger input starts nothing.
	e.save("tools", "t2")
	e.tick()
	e.want("unit", "1:started:src=a,tools=t1")
	e.save("src", "b")
	e.tick()
	e.want("unit", "1:started:src=a,tools=t1 2:started:src=b,tools=t2")
	e.want("manual", "")

	// A manual build takes the current inputs when it starts.
	if _, err := e.d.CreateJobBuild(t.Context(), e.job("manual").ID, "alice", true, nil); err != nil {
		t.Fatal(err)
	}
	e.tick()
	e.want("manual", "1:started:src=b")
}

func TestEveryAndLatest(t *testing.T) {
	e := newEnv(t)
	e.setPipeline(`{"resources": [{"name": "src", "type": "mock", "source": {}}],
		"jobs": [{"name": "each", "plan": [{"get": "src", "trigger": true, "version": "every"}]},
		         {"name": "last", "plan": [{"get": "src", "trigger": true}]}]}`)
	e.save("src", "a", "b")
	e.tick()
	// With no build yet, every starts from the latest.
	e.want("each", "1:started:src=b")
	e.want("last", "1:started:src=b")
	e.save("src", "c", "d", "e")
	e.tick()
	e.want("each", "1:started:src=b 2:started:src=c 3:started:src=d 4:started:src=e")
	e.want("last", "1:started:src=b 2:started:src=e")
}

func TestPassedChainsAndSharedBuilds(t *testing.T) {
	e := newEnv(t)
	e.setPipeline(`{"resources": [{"name": "src", "type": "mock", "source": {}}, {"name": "cfg", "type": "mock", "source": {}}],
		"jobs": [{"name": "unit", "plan": [{"get": "src", "trigger": true}, {"get": "cfg", "trigger": true}]},
		         {"name": "deploy", "plan": [{"get": "src", "trigger": true, "passed": ["unit"]}, {"get": "cfg", "passed": ["unit"]}]}]}`)
	e.save("src", "a")
	e.save("cfg", "x")
	e.tick()
	e.want("unit", "1:started:cfg=x,src=a")
	e.want("deploy", "")
	e.finish("unit", "1", concourse.StatusFailed)
	e.tick()
	e.want("deploy", "")
	e.save("src", "b")
	e.tick()
	e.finish("unit", "2", concourse.StatusSucceeded)
	// cfg=y arrives: unit builds a third time, which fails. deploy must
	// take src and cfg from one succeeded build of unit: b with x, not b
	// with y (no succeeded build had that).
	e.save("cfg", "y")
	e.tick()
	e.finish("unit", "3", concourse.StatusFailed)
	e.tick()
	e.want("unit", "1:failed:cfg=x,src=a 2:succeeded:cfg=x,src=b 3:failed:cfg=y,src=b")
	e.want("deploy", "1:started:cfg=x,src=b")
}

func TestSerialMaxInFlightAndSerialGroups(t *testing.T) {
	e := newEnv(t)
	e.setPipeline(`{"jobs": [
		{"name": "one", "serial": true, "plan": [{"task": "t"}]},
		{"name": "two", "max_in_flight": 2, "plan": [{"task": "t"}]},
		{"name": "ga", "serial_groups": ["g"], "plan": [{"task": "t"}]},
		{"name": "gb", "serial_groups": ["g"], "plan": [{"task": "t"}]}]}`)
	ctx := t.Context()
	for _, job := range []string{"one", "two", "ga", "gb", "ga"} {
		for range 3 {
			if _, err := e.d.CreateJobBuild(ctx, e.job(job).ID, "", true, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.tick()
	e.want("one", "1:started: 2:pending: 3:pending:")
	e.want("two", "1:started: 2:started: 3:pending:")
	e.want("ga", "1:started: 2:pending: 3:pending: 4:pending: 5:pending: 6:pending:")
	e.want("gb", "1:pending: 2:pending: 3:pending:")
	e.finish("one", "1", concourse.StatusSucceeded)
	e.finish("two", "2", concourse.StatusSucceeded)
	e.finish("ga", "1", concourse.StatusSucceeded)
	e.tick()
	e.want("one", "1:succeeded: 2:started: 3:pending:")
	e.want("two", "1:started: 2:succeeded: 3:started:")
	// The group starts its builds in the order they were created: ga's.
	e.want("ga", "1:succeeded: 2:started: 3:pending: 4:pending: 5:pending: 6:pending:")
	e.want("gb", "1:pending: 2:pending: 3:pending:")

	// Paused jobs and pipelines start nothing.
	if _, err := e.pool.Exec(ctx, "UPDATE jobs SET paused = true WHERE name = 'one'"); err != nil {
		t.Fatal(err)
	}
	e.finish("one", "2", concourse.StatusSucceeded)
	e.tick()
	e.want("one", "1:succeeded: 2:succeeded: 3:pending:")
	if _, err := e.pool.Exec(ctx, "UPDATE jobs SET paused = false; UPDATE pipelines SET paused = true"); err != nil {
		t.Fatal(err)
	}
	e.tick()
	e.want("one", "1:succeeded: 2:succeeded: 3:pending:")
	if _, err := e.pool.Exec(ctx, "UPDATE pipelines SET paused = false"); err != nil {
		t.Fatal(err)
	}
	e.tick()
	e.want("one", "1:succeeded: 2:succeeded: 3:started:")
}

func TestAPendingBuildAbortedBeforeItStartsEndsAborted(t *testing.T) {
	e := newEnv(t)
	e.setPipeline(`{"jobs": [{"name": "one", "serial": true, "plan": [{"task": "t"}]}]}`)
	ctx := t.Context()
	for range 3 {
		if _, err := e.d.CreateJobBuild(ctx, e.job("one").ID, "", true, nil); err != nil {
			t.Fatal(err)
		}
	}
	e.tick()
	b2, err := e.d.JobBuildByName(ctx, e.job("one").ID, "2")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.d.RequestAbort(ctx, b2.ID); err != nil {
		t.Fatal(err)
	}
	e.tick()
	e.want("one", "1:started: 2:aborted: 3:pending:")
	if !slices.Equal(e.starter.aborted, []string{"2"}) {
		t.Errorf("builds ended through the starter's AbortJobBuild = %v, want [2]: its events must say aborted", e.starter.aborted)
	}
	e.finish("one", "1", concourse.StatusSucceeded)
	e.tick()
	e.want("one", "1:succeeded: 2:aborted: 3:started:")
	next, finished, err := e.d.JobNextAndFinished(ctx, e.job("one").ID)
	if err != nil || next == nil || next.Name != "3" || finished == nil || finished.Name != "2" {
		t.Fatalf("next %+v, finished %+v, %v", next, finished, err)
	}
}

// A paused job runs nothing, but an abort of its pending build still ends
// the build: someone following it (fly watch) would otherwise wait for ever.
func TestAnAbortedPendingBuildOfAPausedJobEndsAborted(t *testing.T) {
	e := newEnv(t)
	e.setPipeline(`{"jobs": [{"name": "one", "plan": [{"task": "t"}]}]}`)
	ctx := t.Context()
	if err := e.d.PauseJob(ctx, e.job("one").ID, "test"); err != nil {
		t.Fatal(err)
	}
	b, err := e.d.CreateJobBuild(ctx, e.job("one").ID, "", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.tick()
	e.want("one", "1:pending:")
	if err := e.d.RequestAbort(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	e.tick()
	e.want("one", "1:aborted:")
	if !slices.Equal(e.starter.aborted, []string{"1"}) {
		t.Errorf("builds ended through the starter's AbortJobBuild = %v, want [1]", e.starter.aborted)
	}
	e.tick()
	if len(e.starter.aborted) != 1 {
		t.Errorf("a finished build was ended again: %v", e.starter.aborted)
	}
}

func TestPinnedVersions(t *testing.T) {
	e := newEnv(t)
	e.setPipeline(`{"resources": [{"name": "src", "type": "mock", "source": {}}, {"name": "lib", "type": "mock", "source": {}, "version": {"ref": "l1"}}],
		"jobs": [{"name": "j", "plan": [{"get": "src", "version": {"ref": "b"}}, {"get": "lib"}]}]}`)
	ctx := t.Context()
	e.save("src", "a")
	e.save("lib", "l1", "l2")
	if _, err := e.d.CreateJobBuild(ctx, e.job("j").ID, "", true, nil); err != nil {
		t.Fatal(err)
	}
	e.tick()
	e.want("j", "1:pending:")
	if r := e.job("j").WaitingReason; r != `pinned version {"ref":"b"} of resource src not found` {
		t.Fatalf("waiting reason %q", r)
	}
	e.save("src", "b", "c")
	e.tick()
	// The step's pin and the resource's config pin win over the latest.
	e.want("j", "1:started:lib=l1,src=b")

	// A pin through the API wins over the step's.
	a, err := e.d.FindVersion(ctx, e.resource("src").ID, map[string]string{"ref": "a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.d.PinVersion(ctx, e.resource("src").ID, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.d.CreateJobBuild(ctx, e.job("j").ID, "", true, nil); err != nil {
		t.Fatal(err)
	}
	e.tick()
	e.want("j", "1:started:lib=l1,src=b 2:started:lib=l1,src=a")
	// A disabled pinned version is as good as none.
	if err := e.d.SetVersionEnabled(ctx, e.resource("src").ID, a.ID, false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.d.CreateJobBuild(ctx, e.job("j").ID, "", true, nil); err != nil {
		t.Fatal(err)
	}
	e.tick()
	e.want("j", "1:started:lib=l1,src=b 2:started:lib=l1,src=a 3:pending:")
}

func TestAPlanThatCannotBeMadeErrorsTheBuild(t *testing.T) {
	e := newEnv(t)
	e.setPipeline(`{"jobs": [{"name": "j", "plan": [{"task": "t"}]}]}`)
	if _, err := e.d.CreateJobBuild(t.Context(), e.job("j").ID, "", true, nil); err != nil {
		t.Fatal(err)
	}
	e.planner.fail = fmt.Errorf("task t has no config")
	if err := e.sched.Tick(t.Context()); err == nil || !strings.Contains(err.Error(), "task t has no config") {
		t.Fatalf("tick: %v", err)
	}
	e.want("j", "1:errored:")
	if r := e.job("j").WaitingReason; !strings.Contains(r, "task t has no config") {
		t.Fatalf("waiting reason %q", r)
	}
}

func TestCheckerStartsDueChecksFromTheLatestVersion(t *testing.T) {
	e := newEnv(t)
	e.setPipeline(`{"resources": [
		{"name": "src", "type": "mock", "source": {}, "check_every": "10s"},
		{"name": "quiet", "type": "mock", "source": {}, "check_every": "never"}]}`)
	ctx := t.Context()
	e.save("src", "a", "b")
	if err := e.checker.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if len(e.starter.checks) != 1 || e.starter.checks[0].ResourceName != "src" || e.planner.checks[0]["ref"] != "b" {
		t.Fatalf("checks %+v from %v", e.starter.checks, e.planner.checks)
	}
	src := e.resource("src")
	if d := time.Until(src.NextCheck); d < 8*time.Second || d > 12*time.Second || src.LastCheckBuild != e.starter.checks[0].ID {
		t.Fatalf("next check in %v, last build %d", d, src.LastCheckBuild)
	}
	// Not due, and its check is still running: nothing.
	if err := e.checker.Tick(ctx); err != nil || len(e.starter.checks) != 1 {
		t.Fatalf("second tick: %d checks, %v", len(e.starter.checks), err)
	}
	// A failed check shows on the resource; a requested one runs anyway,
	// from the version asked for, once the running one ended.
	if err := e.d.FinishBuild(ctx, src.LastCheckBuild, concourse.StatusErrored, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := e.checker.Finished(ctx, src.ID, "check: exit status 1"); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"src", "quiet"} {
		if err := e.d.RequestCheck(ctx, e.resource(r).ID, map[string]string{"ref": "a"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.checker.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if len(e.starter.checks) != 3 || e.planner.checks[1]["ref"] != "a" || e.planner.checks[2]["ref"] != "a" {
		t.Fatalf("checks %d from %v", len(e.starter.checks), e.planner.checks)
	}
	if r := e.resource("src"); r.CheckError != "check: exit status 1" || r.CheckRequested {
		t.Fatalf("src %+v", r)
	}
}

func TestNextInputsChoosesWithoutCreatingBuilds(t *testing.T) {
	e := newEnv(t)
	e.setPipeline(`{"resources": [{"name": "src", "type": "mock", "source": {}}],
		"jobs": [{"name": "unit", "plan": [{"get": "src", "trigger": true}]},
		         {"name": "deploy", "plan": [{"get": "code", "resource": "src", "passed": ["unit"]}]}]}`)
	next := func(job string) (map[string]db.BuildInput, string) {
		t.Helper()
		in, reason, err := e.sched.NextInputs(t.Context(), e.job(job))
		if err != nil {
			t.Fatal(err)
		}
		return in, reason
	}
	if in, reason := next("unit"); in != nil || reason != "no versions of input src" {
		t.Fatalf("with no versions: %v, %q", in, reason)
	}
	e.save("src", "a", "b")
	in, reason := next("unit")
	v, err := e.d.VersionByID(t.Context(), e.resource("src").ID, in["src"].VersionID)
	if reason != "" || err != nil || v.Version["ref"] != "b" {
		t.Fatalf("unit's next inputs: %v (%v), %q, %v", in, v.Version, reason, err)
	}
	e.want("unit", "")
	// deploy's input, named code, waits for a build of unit.
	if _, reason := next("deploy"); reason == "" {
		t.Fatal("deploy has inputs before unit ran")
	}
	e.tick()
	e.finish("unit", "1", concourse.StatusSucceeded)
	in, reason = next("deploy")
	if reason != "" || in["code"].ResourceID != e.resource("src").ID || in["code"].VersionID != v.ID {
		t.Fatalf("deploy's next inputs: %v, %q", in, reason)
	}
	e.want("deploy", "")
}

// TestCheckEveryNeverIsCheckedOnlyOnRequest: a check_every: never resource
// is never checked periodically, even once its record says it is due (a
// config changed to never), but `fly check-resource` (StartCheck) and a
// webhook (StartCheck, or RequestCheck behind a running check) check it.
func TestCheckEveryNeverIsCheckedOnlyOnRequest(t *testing.T) {
	e := newEnv(t)
	e.setPipeline(`{"resources": [{"name": "quiet", "type": "mock", "source": {}, "check_every": "never"}]}`)
	ctx := t.Context()
	tick := func(want int) {
		t.Helper()
		if err := e.checker.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		if len(e.starter.checks) != want {
			t.Fatalf("%d checks, want %d", len(e.starter.checks), want)
		}
	}
	tick(0)
	if _, err := e.pool.Exec(ctx, `UPDATE resources SET next_check = now() - interval '1 day' WHERE id = $1`, e.resource("quiet").ID); err != nil {
		t.Fatal(err)
	}
	tick(0)

	ref, err := e.d.LookupPipelineResource(ctx, e.pipeline, "quiet")
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.checker.StartCheck(ctx, ref, nil)
	if err != nil || len(e.starter.checks) != 1 {
		t.Fatalf("check on request: build %+v, %v; %d checks", b, err, len(e.starter.checks))
	}
	if next := e.resource("quiet").NextCheck; time.Until(next) < 50*365*24*time.Hour {
		t.Fatalf("next periodic check of a never resource at %v", next)
	}
	if err := e.d.FinishBuild(ctx, b.ID, concourse.StatusSucceeded, time.Now()); err != nil {
		t.Fatal(err)
	}
	tick(1)
	if err := e.d.RequestCheck(ctx, ref.ID, nil); err != nil {
		t.Fatal(err)
	}
	tick(2)
	tick(2)
}

func TestAResumedBuildRunsThePlanOfTheBuildItResumes(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.setPipeline(`{"jobs": [{"name": "j", "plan": [{"task": "t"}]}]}`)
	b, err := e.d.CreateJobBuild(ctx, e.job("j").ID, "", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.tick()
	if err := e.d.FinishBuild(ctx, b.ID, concourse.StatusFailed, time.Now()); err != nil {
		t.Fatal(err)
	}
	failed, err := e.d.JobBuildByID(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The job's config changed since; the resumed build keeps the failed
	// build's plan, with which it was recorded.
	own := json.RawMessage(`{"id":"the-failed-builds-plan"}`)
	if _, err := e.d.ResumeJobBuild(ctx, failed, "alice", db.Resume{Plan: own, State: json.RawMessage(`{"steps":{}}`)}); err != nil {
		t.Fatal(err)
	}
	e.planner.fail = fmt.Errorf("the job's config no longer plans")
	e.tick()
	e.want("j", "1:failed: 1.1:started:")
	resumed, err := e.d.JobBuildByName(ctx, e.job("j").ID, "1.1")
	if err != nil {
		t.Fatal(err)
	}
	var plan concourse.Plan
	if err := json.Unmarshal(resumed.Plan, &plan); err != nil || plan.ID != "the-failed-builds-plan" {
		t.Fatalf("the resumed build started with %s (%v)", resumed.Plan, err)
	}
}
