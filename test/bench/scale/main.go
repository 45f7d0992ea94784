// Command scale measures the server at a scale the local cluster's one node
// cannot hold: 100 simulated nodes (kwok) and 2,000 concurrent steps.
//
// kwok (sigs.k8s.io/kwok, built from the module proxy at KWOK_VERSION of
// hack/versions.env) plays the nodes and the pods' status; this program
// plays what runs in the pods: for every step pod kwok reports running, it
// runs the real sidecar configured from the pod's declared environment and
// Secret, which reports to the server over gRPC+TLS and stores results and
// audit trail in the cluster's MinIO, and the real entrypoint logic with a
// process that prints a few lines, holds and exits 0. The server is the
// real atc-porter-runtime with its PostgreSQL database; the steps are
// one-off builds of one task each, posted as fly execute posts them.
//
// It prints steps started per second, pod creation → process started
// (the sidecar connected and told to start) p50/p99, the server's peak RSS
// and CPU per step, database transactions per step and the server's heap
// growth at peak (informer caches and step state), beside the goals.
//
//	go run ./test/bench/scale [-nodes 100] [-steps 2000] [-hold 2m]
package main

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/test/bench/internal/stepbench"
	"github.com/porter-ci/porter/test/testenv"
)

// The goals of issue 21, item 5.
const (
	goalStartsPerSec = 20
	goalRSS          = 1 << 30
)

const (
	kwokAnnotation = "kwok.x-k8s.io/node"
	kwokLabel      = "type"
)

type config struct {
	nodes, steps, lines, submitters int
	hold                            time.Duration
	verbose                         bool
}

func main() {
	var c config
	flag.IntVar(&c.nodes, "nodes", 100, "simulated nodes")
	flag.IntVar(&c.steps, "steps", 2000, "one-step builds, all running at once")
	flag.IntVar(&c.lines, "lines", 5, "lines each simulated process prints")
	flag.IntVar(&c.submitters, "submitters", 8, "concurrent build submissions")
	flag.BoolVar(&c.verbose, "v", false, "the simulated sidecars' logs on stderr")
	flag.DurationVar(&c.hold, "hold", 0, "how long each process runs (default: long enough for all steps to overlap: steps/10 s, at least 1m)")
	flag.Parse()
	if c.hold == 0 {
		c.hold = max(time.Minute, time.Duration(c.steps)*time.Second/10)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "bench-scale:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config) (err error) {
	dir, err := os.MkdirTemp("", "pscale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var cleanups []func(context.Context) error
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			err = errors.Join(err, cleanups[i](context.WithoutCancel(ctx)))
		}
	}()
	env, err := testenv.NewATCEnv(ctx, dir)
	if err != nil {
		return err
	}
	kwok, err := kwokBinary(ctx)
	if err != nil {
		return err
	}
	// The first worker is the real node's (nothing runs there); the kwok
	// worker's steps go to the simulated nodes by its tag's placement.
	local, removeLocal, err := env.NewWorkerNamespace(ctx, "porter-scale-local-")
	if removeLocal != nil {
		cleanups = append(cleanups, removeLocal)
	}
	if err != nil {
		return err
	}
	ns, removeNS, err := env.NewWorkerNamespace(ctx, "porter-scale-")
	if removeNS != nil {
		cleanups = append(cleanups, removeNS)
	}
	if err != nil {
		return err
	}
	dsn, dropDB, err := env.NewDatabase(ctx)
	if err != nil {
		return err
	}
	cleanups = append(cleanups, dropDB)

	removeNodes, err := createNodes(ctx, env, c.nodes)
	cleanups = append(cleanups, removeNodes)
	if err != nil {
		return err
	}
	stopKwok, err := startKwok(ctx, kwok, env, dir)
	if err != nil {
		return err
	}
	cleanups = append(cleanups, stopKwok)

	srv, err := env.NewATC(testenv.ATCConfig{Worker: local, WorkerName: "local", Database: dsn,
		LocalUsers: []string{"bench:bench"}, MainTeamUsers: []string{"bench"},
		MoreWorkers: []testenv.Worker{{Name: "kwok", Namespace: ns, Tags: []string{"kwok"},
			TagPlacement: map[string]any{"kwok": map[string]any{
				"node_selector": map[string]string{kwokLabel: "kwok"},
				"tolerations":   []map[string]string{{"key": kwokAnnotation, "operator": "Exists", "effect": "NoSchedule"}},
			}}}}})
	if err != nil {
		return err
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	cleanups = append(cleanups, func(context.Context) error { return srv.Stop() })
	token, err := srv.Login(ctx, "bench", "bench")
	if err != nil {
		return err
	}
	image, err := busyboxDigest(env)
	if err != nil {
		return err
	}

	sim := newSimulator(env.Admin, ns.Name, dir, c.hold, c.lines, c.verbose)
	simCtx, stopSim := context.WithCancel(ctx)
	simDone := make(chan error, 1)
	go func() { simDone <- sim.run(simCtx) }()
	defer func() { stopSim(); err = errors.Join(err, <-simDone) }()

	idleHeap := heapInuse(ctx, srv.OpsURL())
	cpu0, _ := stepbench.ProcessCPU(srv.Pid())
	tx0, err := transactions(ctx, dsn)
	if err != nil {
		return err
	}
	fmt.Printf("bench-scale: %d simulated nodes, %d one-step builds, each process holding %s\n", c.nodes, c.steps, c.hold)
	t0 := time.Now()
	if err := submit(ctx, srv.URL(), token, image, c); err != nil {
		return err
	}
	submitted := time.Since(t0)
	// Wait until every step has started (or there is no progress for 2m).
	var peakHeap int64
	last, lastChange := 0, time.Now()
	for {
		sim.mu.Lock()
		n := len(sim.started)
		sim.mu.Unlock()
		peakHeap = max(peakHeap, heapInuse(ctx, srv.OpsURL()))
		if n >= c.steps || time.Since(lastChange) > 2*time.Minute {
			break
		}
		if n != last {
			last, lastChange = n, time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	allStarted := time.Since(t0)
	peakRSS, _ := stepbench.ProcessPeakRSS(srv.Pid())
	cpu1, _ := stepbench.ProcessCPU(srv.Pid())
	sim.mu.Lock()
	starts := slices.Clone(sim.started)
	sim.mu.Unlock()
	// Let the steps finish, so the transactions count their whole life.
	finished, err := waitFinished(ctx, dsn, c.steps, c.hold+5*time.Minute)
	if err != nil {
		return err
	}
	tx1, err := transactions(ctx, dsn)
	if err != nil {
		return err
	}
	cpu2, _ := stepbench.ProcessCPU(srv.Pid())

	n := len(starts)
	lat := make([]time.Duration, 0, n)
	for _, s := range starts {
		lat = append(lat, s.latency)
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))].Round(time.Millisecond)
	}
	var window time.Duration
	if n > 1 {
		window = starts[n-1].at.Sub(starts[0].at)
	}
	rate := float64(n-1) / window.Seconds()
	fmt.Printf("\n%-58s %14s  %s\n", "", "Porter", "goal")
	row := func(name, v, goal string) { fmt.Printf("%-58s %14s  %s\n", name, v, goal) }
	row("steps started (process running)", fmt.Sprintf("%d of %d", n, c.steps), fmt.Sprintf("%d", c.steps))
	row("peak concurrent running steps", fmt.Sprint(sim.peak.Load()), fmt.Sprintf("%d", c.steps))
	row("builds finished succeeded", fmt.Sprintf("%d of %d", finished, c.steps), fmt.Sprintf("%d", c.steps))
	row("submitting the builds (POST …/builds)", submitted.Round(time.Millisecond).String(), "")
	row("first to last step start", window.Round(time.Millisecond).String(), "")
	row("steps started per second", fmt.Sprintf("%.1f", rate), fmt.Sprintf("≥ %d", goalStartsPerSec))
	row("pod created → process started, p50", pct(0.50).String(), "")
	row("pod created → process started, p99", pct(0.99).String(), "")
	row("submit → all started", allStarted.Round(time.Millisecond).String(), "")
	row("server peak RSS", fmt.Sprintf("%.0f MiB", float64(peakRSS)/(1<<20)), fmt.Sprintf("≤ %d MiB", goalRSS>>20))
	row("server heap in use: idle → peak (informers, step state)", fmt.Sprintf("%.0f → %.0f MiB", float64(idleHeap)/(1<<20), float64(peakHeap)/(1<<20)), "")
	if n > 0 {
		row("server CPU per step, to start", fmt.Sprintf("%.1f ms", float64(cpu1-cpu0)/float64(time.Millisecond)/float64(n)), "")
		row("server CPU per step, whole life", fmt.Sprintf("%.1f ms", float64(cpu2-cpu0)/float64(time.Millisecond)/float64(n)), "")
		row("database transactions per step (pg_stat_database)", fmt.Sprintf("%.1f", float64(tx1-tx0)/float64(n)), "")
	}
	row("simulated sidecars that failed", fmt.Sprint(sim.failed.Load()), "0")
	if finished < c.steps {
		lines := strings.Split(strings.TrimSpace(srv.Log()), "\n")
		fmt.Printf("\nnot every build succeeded; the server's last log lines (%s):\n%s\n", srv.LogPath(),
			strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
	return nil
}

// kwokBinary builds kwok at KWOK_VERSION into the tool cache once.
func kwokBinary(ctx context.Context) (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	versions, err := os.ReadFile(filepath.Join(root, "hack", "versions.env"))
	if err != nil {
		return "", err
	}
	var version string
	for line := range strings.SplitSeq(string(versions), "\n") {
		if v, ok := strings.CutPrefix(line, "KWOK_VERSION="); ok {
			version = strings.TrimSpace(v)
		}
	}
	if version == "" {
		return "", errors.New("no KWOK_VERSION in hack/versions.env")
	}
	home, _ := os.UserHomeDir()
	bin := filepath.Join(home, ".cache", "porter", "bin", "kwok-"+version)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	gobin, err := os.MkdirTemp(filepath.Dir(bin), ".kwok-gobin-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(gobin)
	fmt.Printf("bench-scale: building kwok %s (once)\n", version)
	cmd := exec.CommandContext(ctx, "go", "install", "-trimpath", "sigs.k8s.io/kwok/cmd/kwok@"+version)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOBIN="+gobin, "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build kwok: %w\n%s", err, out)
	}
	return bin, os.Rename(filepath.Join(gobin, "kwok"), bin)
}

// createNodes registers n simulated nodes for kwok to keep Ready.
func createNodes(ctx context.Context, env *testenv.ATCEnv, n int) (func(context.Context) error, error) {
	var names []string
	remove := func(ctx context.Context) error {
		var errs []error
		for _, name := range names {
			if err := env.Admin.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	alloc := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	for i := range n {
		name := fmt.Sprintf("kwok-node-%03d", i)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name,
				Annotations: map[string]string{kwokAnnotation: "fake", "node.alpha.kubernetes.io/ttl": "0"},
				Labels:      map[string]string{kwokLabel: "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: kwokAnnotation, Value: "fake", Effect: corev1.TaintEffectNoSchedule}}},
		}
		// kwok's node stages keep the allocatable a node is created with.
		node.Status.Capacity, node.Status.Allocatable = alloc, alloc
		if _, err := env.Admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return remove, fmt.Errorf("create node %s: %w", name, err)
		}
		names = append(names, name)
	}
	return remove, nil
}

//go:embed stages.yaml
var stagesYAML []byte

// startKwok runs kwok for the annotated nodes with its fast stages.
func startKwok(ctx context.Context, bin string, env *testenv.ATCEnv, dir string) (func(context.Context) error, error) {
	log, err := os.Create(filepath.Join(os.TempDir(), "porter-bench-scale-kwok.log"))
	if err != nil {
		return nil, err
	}
	stages := filepath.Join(dir, "stages.yaml")
	if err := os.WriteFile(stages, stagesYAML, 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--kubeconfig", testenv.KubeconfigPath(), "--config", stages,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector="+kwokAnnotation+"=fake",
		"--cidr=10.250.0.0/16", "--node-ip=10.249.0.1", "--node-lease-duration-seconds=40")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start kwok: %w", err)
	}
	// Ready nodes are kwok's first sign of life.
	deadline := time.Now().Add(60 * time.Second)
	for {
		nodes, err := env.Admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: kwokLabel + "=kwok"})
		ready := 0
		if err == nil {
			for _, n := range nodes.Items {
				for _, c := range n.Status.Conditions {
					if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
		}
		if err == nil && ready == len(nodes.Items) && ready > 0 {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			log.Close()
			return nil, fmt.Errorf("kwok: %d nodes Ready after 60s (log: %s)", ready, log.Name())
		}
		time.Sleep(500 * time.Millisecond)
	}
	return func(context.Context) error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		return log.Close()
	}, nil
}

// busyboxDigest is the image the tasks declare, pinned (no image check):
// kwok pulls nothing, but the pod must name an image.
func busyboxDigest(env *testenv.ATCEnv) (string, error) {
	reg := env.Cluster["PORTER_CLUSTER_REGISTRY"]
	if reg == "" {
		return "", errors.New("no PORTER_CLUSTER_REGISTRY: run make cluster-up")
	}
	return reg + "/busybox@sha256:" + strings.Repeat("0", 64), nil
}

// submit posts c.steps one-off builds of one task each, tagged for the
// simulated nodes.
func submit(ctx context.Context, url, token, image string, c config) error {
	repo, digest, _ := strings.Cut(image, "@")
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(c.submitters)
	for i := range c.steps {
		g.Go(func() error {
			plan := fmt.Sprintf(`{"id":"scale-%d","task":{"name":"sim","tags":["kwok"],"config":{"platform":"linux",`+
				`"image_resource":{"type":"registry-image","source":{"repository":%q},"version":{"digest":%q}},"run":{"path":"true"}}}}`,
				i, repo, digest)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/api/v1/teams/main/builds", strings.NewReader(plan))
			if err != nil {
				return err
			}
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("submit build %d: %w", i, err)
			}
			defer resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				var b bytes.Buffer
				_, _ = b.ReadFrom(resp.Body)
				return fmt.Errorf("submit build %d: %s: %s", i, resp.Status, strings.TrimSpace(b.String()))
			}
			return nil
		})
	}
	return g.Wait()
}

func heapInuse(ctx context.Context, opsURL string) int64 {
	v, _ := testenv.Metric(ctx, opsURL+"/metrics", "go_memstats_heap_inuse_bytes")
	return int64(v)
}

// transactions are the database's committed and rolled-back transactions.
func transactions(ctx context.Context, dsn string) (int64, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int64
	err = conn.QueryRow(ctx, "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()").Scan(&n)
	return n, err
}

// waitFinished waits until n builds have finished (or timeout) and returns
// how many succeeded.
func waitFinished(ctx context.Context, dsn string, n int, timeout time.Duration) (int, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	deadline := time.Now().Add(timeout)
	for {
		var done, ok int
		if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE end_time IS NOT NULL), count(*) FILTER (WHERE status = 'succeeded')
			FROM builds WHERE job_id IS NULL AND resource_id IS NULL`).Scan(&done, &ok); err != nil {
			return 0, err
		}
		if done >= n || time.Now().After(deadline) {
			return ok, nil
		}
		select {
		case <-ctx.Done():
			return ok, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}
