// Command overhead measures what Porter adds to a step on the local cluster,
// as a person sees it: the wall time, median of N runs, of Concourse's own
// `fly execute` of a `true` task against Porter, next to Porter's own CLI
// doing the same, a bare busybox pod running `true` (create → Succeeded)
// and the kubelet's floor for a step (a pod of Porter's shape, create →
// its step container running; test/bench/internal/floorpod), with real
// Concourse 8.2.5's figure on this machine kind for reference; then `fly execute -i` of 100 MiB beside
// the upload alone and the floor (upload.go).
// It prints figures and never fails on timing.
//
//	go run ./test/bench/overhead [-n 20]
package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/test/bench/internal/benchstat"
	"github.com/porter-ci/porter/test/bench/internal/floorpod"
	"github.com/porter-ci/porter/test/testenv"
)

// concourseFlyExecute is `fly execute` of a `true` task against a real
// Concourse 8.2.5 with its containerd worker on this machine kind (median
// of 20; ../shared/reference/concourse-8.2.5/README.md).
const concourseFlyExecute = 500 * time.Millisecond

func main() {
	n := flag.Int("n", 20, "runs of each")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *n); err != nil {
		fmt.Fprintln(os.Stderr, "bench-overhead:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, n int) (err error) {
	dir, err := os.MkdirTemp("", "porter-bench-overhead-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b, err := testenv.StartBenchServer(ctx, dir, "porter-bench-")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.Close(context.WithoutCancel(ctx))) }()
	env, ns, fly, home := b.Env, b.NS, b.Fly, b.Home
	task := filepath.Join(dir, "true.yml")
	if err := os.WriteFile(task, []byte("platform: linux\nimage_resource: {type: registry-image, source: {repository: busybox}}\nrun: {path: \"true\"}\n"), 0o644); err != nil {
		return err
	}
	// Porter's own CLI shares fly's ~/.flyrc, so it uses fly's login.
	porterCLI := func(ctx context.Context) error {
		cmd := exec.CommandContext(ctx, env.Bin, "-t", "bench", "execute", "-c", task)
		cmd.Env = append(os.Environ(), "HOME="+home)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	// Each fly run also yields its step's milestones, read from the
	// sidecar's log (kubelet timestamps), relative to fly's start.
	var breakdowns []map[string]time.Duration
	var stepImage, porterImage string
	flyExecute := func(ctx context.Context) error {
		start := time.Now()
		res, err := fly.Run(ctx, "execute", "-c", task)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("fly execute: %s", res)
		}
		if err != nil {
			return err
		}
		steps, pod, err := stepMilestones(ctx, env.Admin, ns.Name, "bench", res.Stdout, start)
		if err != nil {
			return err
		}
		stepImage, porterImage = floorpod.Images(pod)
		steps["fly exited"] = time.Since(start)
		breakdowns = append(breakdowns, steps)
		return nil
	}
	timed := func(f func(context.Context) error) (time.Duration, error) {
		start := time.Now()
		err := f(ctx)
		return time.Since(start), err
	}

	kube := env.Admin
	var viaFly, viaCLI, bare, floor []time.Duration
	for i := range n {
		d, err := timed(flyExecute)
		if err != nil {
			return fmt.Errorf("run %d: %w", i+1, err)
		}
		viaFly = append(viaFly, d)
		if d, err = timed(porterCLI); err != nil {
			return fmt.Errorf("run %d: porter execute: %w", i+1, err)
		}
		viaCLI = append(viaCLI, d)
		if d, err = timeBarePod(ctx, kube, ns.Name, i); err != nil {
			return fmt.Errorf("bare pod %d: %w", i+1, err)
		}
		bare = append(bare, d)
		if d, err = floorpod.Run(ctx, kube, ns.Name, i, stepImage, porterImage); err != nil {
			return fmt.Errorf("floor pod %d: %w", i+1, err)
		}
		floor = append(floor, d)
	}
	line := printLine
	fmt.Printf("a `true` task, wall time, %d runs each (alternating), local single-node cluster\n", n)
	fmt.Printf("  %-58s median %6s  (reference, ../shared/reference)\n", "Concourse 8.2.5 + containerd worker: fly execute", concourseFlyExecute)
	line("Porter: fly execute (Concourse's own fly)", viaFly)
	// The first run checks the task's image; the others find its digest in
	// the server's image cache.
	if len(viaFly) > 1 {
		fmt.Printf("  %-58s %6s, later runs median %s\n", "  of which the first (image checked)", viaFly[0].Round(time.Millisecond), benchstat.Median(viaFly[1:]).Round(time.Millisecond))
	}
	line("Porter: atc-porter-runtime execute", viaCLI)
	line("bare pod `true`: create pod → Succeeded", bare)
	line("kubelet's floor: Porter-shaped pod, create → step running", floor)
	fmt.Printf("  Porter through fly vs Concourse: %.2f×; vs a bare pod: %+s; vs the floor: %+s\n",
		float64(benchstat.Median(viaFly))/float64(concourseFlyExecute), (benchstat.Median(viaFly) - benchstat.Median(bare)).Round(time.Millisecond),
		(benchstat.Median(viaFly) - benchstat.Median(floor)).Round(time.Millisecond))
	printBreakdown(breakdowns)
	return bigInput(ctx, b, dir, min(n, 5), floor)
}

func printLine(what string, ds []time.Duration) {
	fmt.Printf("  %-58s median %6s  (min %s, max %s)\n", what, benchstat.Median(ds).Round(time.Millisecond),
		slices.Min(ds).Round(time.Millisecond), slices.Max(ds).Round(time.Millisecond))
}

// stepMilestones reads the milestones the sidecar logs (starting, connected,
// inputs ready, entrypoint attached, process exited, step finished, ATC
// acknowledged) from the step pod of the build fly printed, relative to start.
func stepMilestones(ctx context.Context, kube kubernetes.Interface, ns, worker, flyOut string, start time.Time) (map[string]time.Duration, *corev1.Pod, error) {
	var build int
	if _, err := fmt.Sscanf(flyOut, "executing build %d", &build); err != nil {
		return nil, nil, fmt.Errorf("no build number in fly's output %q: %w", flyOut, err)
	}
	pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: podspec.BuildSelector(worker, strconv.Itoa(build))})
	// The first build also has its image's check pod.
	if err == nil {
		pods.Items = slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.Annotations[podspec.AnnotationStepName] != "one-off" })
	}
	if err != nil || len(pods.Items) != 1 {
		return nil, nil, fmt.Errorf("the task pod of build %d: %v (%d pods)", build, err, len(pods.Items))
	}
	body, err := kube.CoreV1().Pods(ns).GetLogs(pods.Items[0].Name,
		&corev1.PodLogOptions{Container: podspec.SidecarContainerName, Timestamps: true}).Stream(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("sidecar log of build %d: %w", build, err)
	}
	defer body.Close()
	out := map[string]time.Duration{}
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		ts, line, _ := strings.Cut(sc.Text(), " ")
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue
		}
		if msg, ok := slogMessage(line); ok {
			if _, dup := out["sidecar: "+msg]; !dup {
				out["sidecar: "+msg] = at.Sub(start)
			}
		}
	}
	return out, &pods.Items[0], sc.Err()
}

// slogMessage is the msg of a slog text line (quoted or not).
func slogMessage(line string) (string, bool) {
	_, rest, ok := strings.Cut(line, " msg=")
	if !ok {
		return "", false
	}
	if strings.HasPrefix(rest, `"`) {
		msg, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return "", false
		}
		msg, err = strconv.Unquote(msg)
		return msg, err == nil
	}
	msg, _, _ := strings.Cut(rest, " ")
	return msg, true
}

// printBreakdown prints each milestone's median over the runs, in order,
// with the step from the one before.
func printBreakdown(runs []map[string]time.Duration) {
	all := map[string][]time.Duration{}
	for _, r := range runs {
		for k, v := range r {
			all[k] = append(all[k], v)
		}
	}
	names := make([]string, 0, len(all))
	for k := range all {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(benchstat.Median(all[a]), benchstat.Median(all[b])) })
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	fmt.Printf("where the time of `fly execute` goes, ms since fly started (median of %d; the pod's own steps are in docs/local-cluster.md)\n", len(runs))
	fmt.Printf("  %8s %8s  %s\n", "median", "+prev", "milestone")
	var prev time.Duration
	for _, k := range names {
		m := benchstat.Median(all[k])
		fmt.Printf("  %8.0f %8.0f  %s\n", ms(m), ms(m-prev), k)
		prev = m
	}
}

// timeBarePod times benchstat.RunBarePod.
func timeBarePod(ctx context.Context, kube kubernetes.Interface, ns string, i int) (time.Duration, error) {
	start := time.Now()
	err := benchstat.RunBarePod(ctx, kube, ns, fmt.Sprintf("bare-true-%d", i))
	return time.Since(start), err
}
