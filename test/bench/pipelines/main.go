// Command pipelines measures Porter's pipelines on the local cluster as a
// person sees them, each figure beside its baseline from the same run (or
// real Concourse 8.2.5's, measured on this machine kind):
//
//  1. git push to git's own http-backend in a pod of the cluster → the
//     triggered job's build started, with check_every: 1s, and with
//     check_every: never and the repository's post-receive hook calling the
//     resource's check webhook (image git-server: hack/images.sh git-server);
//  2. `fly trigger-job -w` of a one-task job, wall time;
//  3. 10- and 30-step serial jobs of `true` tasks, with pods declared
//     ahead and without, against 10 bare busybox pods run one after
//     another and the kubelet's floor (30 pods of a step's shape, as many
//     at once as the lookahead declares, no Porter); and where the 30-step jobs' time goes between one step's
//     process and the next's (the steps' audit records);
//  4. a repeated get of a cached version: the build's ATC time (start to
//     end, as PostgreSQL records them) and the pods it created;
//  5. a get → task (its config a file of the get) → put job, with pods
//     declared ahead and without;
//  6. a 5-step job failing at step 5: resuming it from the failed step
//     (`atc-porter-runtime resume -w`) against a full rerun (`fly
//     rerun-build -w`).
//
// It prints figures and never fails on timing.
//
//	go run ./test/bench/pipelines [-n 5] [-only commit]
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/porter-ci/porter/test/bench/internal/benchstat"
	"github.com/porter-ci/porter/test/bench/internal/floorpod"
	"github.com/porter-ci/porter/test/testenv"
	"github.com/porter-ci/porter/test/testenv/gitserver"
)

// concourseTriggerJob is `fly trigger-job -w` of a one-task job against a
// real Concourse 8.2.5 on this machine kind: 5–20 s, median 20 s (its
// scheduler ticks every 10 s; ../shared/reference/concourse-8.2.5/README.md).
const concourseTriggerJob = 20 * time.Second

const checkEvery = time.Second

func main() {
	n := flag.Int("n", 5, "runs of each")
	only := flag.String("only", "", "the figures to measure, e.g. 3 or 1,3 (default: all)")
	lookahead := flag.Int("lookahead", 4, "the server's --lookahead for the serial jobs' figures with pods declared ahead (-1: its default)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, max(*n, 1), *only, *lookahead); err != nil {
		fmt.Fprintln(os.Stderr, "bench-pipelines:", err)
		os.Exit(1)
	}
}

// bench is the server, fly and git server the measurements share.
type bench struct {
	env  *testenv.ATCEnv
	ns   testenv.WorkerNamespace
	srv  *testenv.ATC
	dsn  string
	fly  *testenv.Fly
	git  *gitserver.Server
	dir  string
	kube kubernetes.Interface
	// lookahead is the server's --lookahead for the serial jobs (-1: its
	// default).
	lookahead int
}

func run(ctx context.Context, n int, only string, lookahead int) (err error) {
	dir, err := os.MkdirTemp("", "porter-bench-pipelines-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bs, err := testenv.StartBenchServer(ctx, dir, "porter-bench-pipelines-")
	if err != nil {
		return err
	}
	cleanup := func(f func(context.Context) error) {
		err = errors.Join(err, f(context.WithoutCancel(ctx)))
	}
	defer cleanup(bs.Close)
	env, ns, srv, fly := bs.Env, bs.NS, bs.Server, bs.Fly
	git, err := gitserver.New(env.Cluster["PORTER_CLUSTER_NODE_IP"])
	if err != nil {
		return err
	}
	defer cleanup(func(context.Context) error { return git.Close() })
	b := &bench{env: env, ns: ns, srv: srv, dsn: srv.Config.Database, fly: fly, git: git, dir: dir, kube: env.Admin, lookahead: lookahead}

	fmt.Printf("pipelines on the local single-node cluster, %d runs each\n", n)
	figures := []struct {
		what    string
		measure func(context.Context, int) error
	}{{"push → build started", b.pushToBuild}, {"trigger-job -w", b.triggerJob}, {"serial jobs", b.serialJob}, {"cached get", b.cachedGet},
		{"get → task (file:) → put", b.getTaskPut}, {"resume", b.resume}}
	for i, f := range figures {
		if only != "" && !slices.Contains(strings.Split(only, ","), fmt.Sprint(i+1)) {
			continue
		}
		if err := f.measure(ctx, n); err != nil {
			return fmt.Errorf("%s: %w", f.what, err)
		}
	}
	return nil
}

// pushToBuild: a job triggered by a git resource on a repository of git's
// own http-backend in a pod (gitserver.InCluster), checked every second,
// beside the same job whose resource is checked only when the repository's
// post-receive hook calls the resource's check webhook. Each run commits on
// the host, then times git push → the build started, polling the API.
func (b *bench) pushToBuild(ctx context.Context, n int) (err error) {
	git, err := gitserver.StartInCluster(ctx, b.kube, b.ns.Name)
	if git != nil {
		defer func() { err = errors.Join(err, git.Close(context.WithoutCancel(ctx))) }()
	}
	if err != nil {
		return err
	}
	// The hook runs in the pod; the API listens on loopback.
	api, err := testenv.StartProxyOn(b.env.Cluster["PORTER_CLUSTER_NODE_IP"], strings.TrimPrefix(b.srv.URL(), "http://"))
	if err != nil {
		return err
	}
	defer api.Close()
	polled, _, err := b.timePushes(ctx, git, n, "trigger", fmt.Sprintf("check_every: %s", checkEvery), "")
	if err != nil {
		return err
	}
	token := rand.Text()
	p := "trigger-webhook"
	hook := fmt.Sprintf("http://%s/api/v1/teams/main/pipelines/%s/resources/repo/check/webhook?webhook_token=%s", api.Addr, p, token)
	hooked, pushes, err := b.timePushes(ctx, git, n, p, "check_every: never\n  webhook_token: "+token, hook)
	if err != nil {
		return err
	}
	fmt.Println("1. git push to git's http-backend in a pod → the triggered build started (polled every 20 ms)")
	line(fmt.Sprintf("Porter, check_every: %s", checkEvery), polled)
	fmt.Printf("  %-58s %+s against the check interval (goal: ≤ +2s, i.e. ≤ %s)\n", "", (benchstat.Median(polled) - checkEvery).Round(time.Millisecond), checkEvery+2*time.Second)
	line("Porter, check_every: never, post-receive hook → webhook", hooked)
	fmt.Printf("  %-58s (goal ≤ 0.5s)\n", "")
	line("of which git push itself (the hook's call included)", pushes)
	return nil
}

// timePushes sets pipeline p: a job triggered by a git resource (with the
// extra resource config) on a new repository of git, whose post-receive
// hook calls webhook when it is set. After the first commit's build (the
// pipeline is warm then) each of n runs commits on the host and times
// git push → the build started; pushes are the pushes' own times.
func (b *bench) timePushes(ctx context.Context, git *gitserver.InCluster, n int, p, resourceConfig, webhook string) (started, pushes []time.Duration, err error) {
	repo := "bench-" + strings.ToLower(rand.Text()[:6])
	var hooks []string
	if webhook != "" {
		hooks = append(hooks, webhook)
	}
	if err := git.CreateRepo(ctx, repo, "main", hooks...); err != nil {
		return nil, nil, err
	}
	if err := b.setPipeline(ctx, p, fmt.Sprintf(`
resources:
- name: repo
  type: git
  %s
  source: {uri: %q, branch: main}
jobs:
- name: j
  plan:
  - get: repo
    trigger: true
  - task: t
    config: {platform: linux, image_resource: {type: registry-image, source: {repository: busybox}}, run: {path: "true"}}
`, resourceConfig, git.URL(repo))); err != nil {
		return nil, nil, err
	}
	login, err := b.srv.Login(ctx, "bench", "bench")
	if err != nil {
		return nil, nil, err
	}
	work, err := os.MkdirTemp(b.dir, "work-")
	if err != nil {
		return nil, nil, err
	}
	w, err := git.Work(ctx, work, repo, "main")
	if err != nil {
		return nil, nil, err
	}
	for i := range n + 1 {
		if _, err := w.Commit(ctx, map[string]string{"README": fmt.Sprint(i)}, fmt.Sprint(i)); err != nil {
			return nil, nil, err
		}
		start := time.Now()
		if _, err := w.Push(ctx); err != nil {
			return nil, nil, err
		}
		pushed := time.Since(start)
		name := fmt.Sprint(i + 1)
		if _, err := b.waitBuild(ctx, login, p, "j", name, false); err != nil {
			return nil, nil, err
		}
		// The first commit's build warms the pipeline up: not measured.
		if i > 0 {
			started, pushes = append(started, time.Since(start)), append(pushes, pushed)
		}
		if _, err := b.waitBuild(ctx, login, p, "j", name, true); err != nil {
			return nil, nil, err
		}
	}
	return started, pushes, nil
}

// triggerJob: `fly trigger-job -w` of a one-task job.
func (b *bench) triggerJob(ctx context.Context, n int) error {
	p := "one-task"
	if err := b.setPipeline(ctx, p, `
jobs:
- name: j
  plan:
  - task: t
    config: {platform: linux, image_resource: {type: registry-image, source: {repository: busybox}}, run: {path: echo, args: [hello]}}
`); err != nil {
		return err
	}
	ds, err := b.timeTrigger(ctx, p, "j", n)
	if err != nil {
		return err
	}
	fmt.Println("2. fly trigger-job -w of a one-task job, wall time")
	fmt.Printf("  %-58s median %6s  (reference, ../shared/reference)\n", "Concourse 8.2.5 (scheduler ticks every 10 s)", concourseTriggerJob)
	line("Porter", ds)
	fmt.Printf("  %-58s %.2f× Concourse's (goal ≤ 2s)\n", "", float64(benchstat.Median(ds))/float64(concourseTriggerJob))
	return nil
}

// serialJob: jobs of 10 and 30 `true` tasks one after another, with pods
// declared ahead (the server's default lookahead) and without (the server
// restarted with --lookahead 0), against 10 bare pods one after another.
func (b *bench) serialJob(ctx context.Context, n int) error {
	conn, err := pgx.Connect(ctx, b.dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	token, err := b.srv.Login(ctx, "bench", "bench")
	if err != nil {
		return err
	}
	type figures struct {
		wall, build map[int][]time.Duration
		gaps        stepGaps // of the 30-step builds
	}
	measure := func() (figures, error) {
		f := figures{wall: map[int][]time.Duration{}, build: map[int][]time.Duration{}}
		for _, steps := range []int{10, 30} {
			p := fmt.Sprintf("serial-%d", steps)
			var plan strings.Builder
			for i := range steps {
				fmt.Fprintf(&plan, "  - task: t%d\n    config: {platform: linux, image_resource: {type: registry-image, source: {repository: busybox}}, run: {path: \"true\"}}\n", i)
			}
			if err := b.setPipeline(ctx, p, "jobs:\n- name: j\n  plan:\n"+plan.String()); err != nil {
				return f, err
			}
			for range n {
				ds, err := b.timeTrigger(ctx, p, "j", 1)
				if err != nil {
					return f, err
				}
				f.wall[steps] = append(f.wall[steps], ds...)
				id, d, err := latestBuildDuration(ctx, conn, p, "j")
				if err != nil {
					return f, err
				}
				f.build[steps] = append(f.build[steps], d)
				if steps == 30 {
					if err := f.gaps.add(ctx, b.srv.URL(), token, id); err != nil {
						return f, err
					}
				}
			}
		}
		return f, nil
	}
	var (
		ahead, none figures
		peak        waitingPeak
	)
	if err := b.aheadAndNot(ctx, func(declaredAhead bool) (err error) {
		if declaredAhead {
			// Its own connection: the sampler queries while measure does.
			sconn, err := pgx.Connect(ctx, b.dsn)
			if err != nil {
				return err
			}
			defer sconn.Close(context.WithoutCancel(ctx))
			sctx, stop := context.WithCancel(ctx)
			sampled := make(chan error, 1)
			go func() {
				var err error
				peak, err = b.sampleWaiting(sctx, sconn)
				sampled <- err
			}()
			ahead, err = measure()
			stop()
			return errors.Join(err, <-sampled)
		}
		none, err = measure()
		return err
	}); err != nil {
		return err
	}
	// The kubelet's floor for the serial job declared ahead: pods of a
	// step's shape, as many at once as the lookahead declares, no Porter
	// server involved (a step ran just now, so both images are pulled).
	stepImage, porterImage, err := b.stepPodImages(ctx)
	if err != nil {
		return err
	}
	inFlight := max(b.lookahead, 1)
	if b.lookahead < 0 {
		inFlight = 4 // the server's default
	}
	floor, err := floorpod.Throughput(ctx, b.kube, b.ns.Name, 30, inFlight, stepImage, porterImage)
	if err != nil {
		return fmt.Errorf("the kubelet's floor: %w", err)
	}
	var bare []time.Duration
	for i := range n {
		start := time.Now()
		for k := range 10 {
			if err := benchstat.RunBarePod(ctx, b.kube, b.ns.Name, fmt.Sprintf("bare-%d-%d", i, k)); err != nil {
				return err
			}
		}
		bare = append(bare, time.Since(start))
	}
	fmt.Println("3. `true` tasks one after another (Concourse 8.2.5, 10 steps: build 5 s)")
	line("10 steps, pods declared ahead: build start → end (goal ≤ 2.5s)", ahead.build[10])
	line("10 steps, no pod declared ahead (--lookahead 0): build", none.build[10])
	line("10 steps, pods declared ahead: fly trigger-job -w", ahead.wall[10])
	line("10 steps, no pod declared ahead: fly trigger-job -w", none.wall[10])
	line("30 steps, pods declared ahead: build start → end", ahead.build[30])
	line("30 steps, no pod declared ahead: build", none.build[30])
	fmt.Printf("  %-58s %s ahead, %s without (goal ≤ 300ms)\n", "30 steps, per step",
		(benchstat.Median(ahead.build[30]) / 30).Round(time.Millisecond), (benchstat.Median(none.build[30]) / 30).Round(time.Millisecond))
	fmt.Printf("  %-58s %s per pod (30 pods, %d at a time; create → step container running)\n",
		"the kubelet's floor: pods of a step's shape, no Porter", floor.Round(time.Millisecond), inFlight)
	ahead.gaps.print("30 steps, pods declared ahead, between steps")
	none.gaps.print("30 steps, no pod declared ahead, between steps")
	line("10 bare busybox pods: create → Succeeded, one by one", bare)
	fmt.Printf("  %-58s %d pods requesting %s CPU, %s memory\n", "pods waiting for their turn at peak", peak.pods, peak.cpu.String(), peak.mem.String())
	return nil
}

// stepPodImages are the step's and the sidecar's images of a step pod
// the server ran in the bench's namespace (one that is kept).
func (b *bench) stepPodImages(ctx context.Context) (step, porter string, err error) {
	pods, err := b.kube.CoreV1().Pods(b.ns.Name).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", "", fmt.Errorf("step pods: %w", err)
	}
	for i := range pods.Items {
		if step, porter = floorpod.Images(&pods.Items[i]); step != "" && porter != "" {
			return step, porter, nil
		}
	}
	return "", "", errors.New("no step pod left in the bench's namespace to take the images from")
}

// aheadAndNot calls measure with the server declaring pods ahead
// (b.lookahead) and then without (--lookahead 0), and restarts it with its
// default after.
func (b *bench) aheadAndNot(ctx context.Context, measure func(declaredAhead bool) error) error {
	args := b.srv.Config.Args
	restart := func(lookahead int) error {
		b.srv.Config.Args = slices.Clone(args)
		if lookahead >= 0 {
			b.srv.Config.Args = append(b.srv.Config.Args, "--lookahead", fmt.Sprint(lookahead))
		}
		return b.srv.Restart(ctx)
	}
	if b.lookahead >= 0 {
		if err := restart(b.lookahead); err != nil {
			return err
		}
	}
	if err := measure(true); err != nil {
		return err
	}
	if err := restart(0); err != nil {
		return err
	}
	err := measure(false)
	return errors.Join(err, restart(-1))
}

// latestBuildDuration is the latest build of pipeline/job: its id, and
// its time from start to end as PostgreSQL records them.
func latestBuildDuration(ctx context.Context, conn *pgx.Conn, pipeline, job string) (int64, time.Duration, error) {
	var id int64
	var start, end time.Time
	if err := conn.QueryRow(ctx, `SELECT b.id, b.start_time, b.end_time FROM builds b JOIN jobs j ON j.id = b.job_id
		JOIN pipelines p ON p.id = j.pipeline_id WHERE p.name = $1 AND j.name = $2 ORDER BY b.id DESC LIMIT 1`, pipeline, job).Scan(&id, &start, &end); err != nil {
		return 0, 0, fmt.Errorf("latest build of %s/%s: %w", pipeline, job, err)
	}
	return id, end.Sub(start), nil
}

// cachedGet: a job whose only step gets a version already fetched; the
// first build fills the cache, the next ones use it.
func (b *bench) cachedGet(ctx context.Context, n int) error {
	repo := "cached-" + strings.ToLower(rand.Text()[:6])
	if err := b.git.CreateRepo(ctx, repo, "main"); err != nil {
		return err
	}
	sha, err := b.git.Commit(ctx, repo, "main", map[string]string{"README": "cached"}, "cached")
	if err != nil {
		return err
	}
	p := "cached"
	if err := b.setPipeline(ctx, p, fmt.Sprintf(`
resources:
- name: repo
  type: git
  check_every: 1s
  source: {uri: %q, branch: main}
jobs:
- name: j
  plan:
  - get: repo
    version: {ref: %s}
`, b.git.URL(repo), sha)); err != nil {
		return err
	}
	if _, err := b.timeTrigger(ctx, p, "j", 1); err != nil { // fills the cache
		return err
	}
	conn, err := pgx.Connect(ctx, b.dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var atc, wall []time.Duration
	pods := 0
	for i := range n {
		d, err := b.timeTrigger(ctx, p, "j", 1)
		if err != nil {
			return err
		}
		wall = append(wall, d...)
		name := fmt.Sprint(i + 2)
		var id int64
		var start, end time.Time
		if err := conn.QueryRow(ctx, `SELECT b.id, b.start_time, b.end_time FROM builds b JOIN jobs j ON j.id = b.job_id
			JOIN pipelines p ON p.id = j.pipeline_id WHERE p.name = $1 AND j.name = 'j' AND b.name = $2`, p, name).Scan(&id, &start, &end); err != nil {
			return fmt.Errorf("build %s/j #%s: %w", p, name, err)
		}
		atc = append(atc, end.Sub(start))
		list, err := b.kube.CoreV1().Pods(b.ns.Name).List(ctx, metav1.ListOptions{LabelSelector: fmt.Sprintf("porter.dev/build=%d", id)})
		if err != nil {
			return err
		}
		pods += len(list.Items)
	}
	// fly's own floor on this machine now: one API call and its exit.
	var floor []time.Duration
	for range n {
		start := time.Now()
		res, err := b.fly.Run(ctx, "builds", "-c", "1")
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("fly builds: %s", res)
		}
		if err != nil {
			return err
		}
		floor = append(floor, time.Since(start))
	}
	fmt.Println("4. a repeated get of a cached version (a job of one get)")
	line("Porter: ATC time, build start → end (PostgreSQL)", atc)
	line("Porter: fly trigger-job -w, wall time (goal ≤ 200ms)", wall)
	line("fly builds -c 1, wall time (fly's own floor)", floor)
	fmt.Printf("  %-58s %d pods created in %d builds (goal: ATC ≤ 50ms, no pod)\n", "", pods, n)
	return nil
}

// timeTrigger runs `fly trigger-job -w` n times and returns the wall times.
func (b *bench) timeTrigger(ctx context.Context, pipeline, job string, n int) ([]time.Duration, error) {
	var ds []time.Duration
	for range n {
		start := time.Now()
		res, err := b.fly.Run(ctx, "trigger-job", "-j", pipeline+"/"+job, "-w")
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("fly trigger-job: %s", res)
		}
		if err != nil {
			return nil, err
		}
		ds = append(ds, time.Since(start))
	}
	return ds, nil
}

func (b *bench) setPipeline(ctx context.Context, name, config string) error {
	path := filepath.Join(b.dir, name+".yml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		return err
	}
	for _, args := range [][]string{{"set-pipeline", "-n", "-p", name, "-c", path}, {"unpause-pipeline", "-p", name}} {
		res, err := b.fly.Run(ctx, args...)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("fly %s: %s", args[0], res)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// waitBuild polls the job's builds (every 20 ms) until build name has
// started, or, with finished, has ended (an error unless it succeeded).
func (b *bench) waitBuild(ctx context.Context, token, pipeline, job, name string, finished bool) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	url := fmt.Sprintf("%s/api/v1/teams/main/pipelines/%s/jobs/%s/builds/%s", b.srv.URL(), pipeline, job, name)
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return "", err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			return "", fmt.Errorf("build %s/%s #%s: %w", pipeline, job, name, err)
		}
		var build struct {
			Status string `json:"status"`
		}
		if resp.StatusCode == http.StatusOK {
			err = json.NewDecoder(resp.Body).Decode(&build)
		}
		resp.Body.Close()
		if err != nil {
			return "", err
		}
		switch s := build.Status; {
		case s == "":
		case !finished && s != "pending":
			return s, nil
		case finished && s == "succeeded":
			return s, nil
		case finished && s != "pending" && s != "started":
			return s, fmt.Errorf("build %s/%s #%s %s", pipeline, job, name, s)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("build %s/%s #%s: %w", pipeline, job, name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func line(what string, ds []time.Duration) {
	fmt.Printf("  %-58s median %6s  (min %s, max %s)\n", what, benchstat.Median(ds).Round(time.Millisecond),
		slices.Min(ds).Round(time.Millisecond), slices.Max(ds).Round(time.Millisecond))
}
