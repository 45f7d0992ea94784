package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// getTaskPut: the shape of most real jobs, a get of a repository, a task
// whose config is a file of it, and a put of what the task made, with pods
// declared ahead and without.
func (b *bench) getTaskPut(ctx context.Context, n int) error {
	conn, err := pgx.Connect(ctx, b.dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	repo := "getput-" + strings.ToLower(rand.Text()[:6])
	if err := b.git.CreateRepo(ctx, repo, "main"); err != nil {
		return err
	}
	task := `platform: linux
image_resource: {type: registry-image, source: {repository: busybox}}
inputs: [{name: repo}]
outputs: [{name: built}]
run: {path: sh, args: [-c, 'date +%s%N > built/version']}
`
	if _, err := b.git.Commit(ctx, repo, "main", map[string]string{"task.yml": task}, "task"); err != nil {
		return err
	}
	p := "getput"
	if err := b.setPipeline(ctx, p, fmt.Sprintf(`
resources:
- name: repo
  type: git
  source: {uri: %q, branch: main}
- name: out
  type: mock
jobs:
- name: j
  plan:
  - get: repo
  - task: build
    file: repo/task.yml
  - put: out
    params: {file: built/version}
`, b.git.URL(repo))); err != nil {
		return err
	}
	// The first build checks and fetches the repository; the figures are
	// of the next ones.
	if _, err := b.timeTrigger(ctx, p, "j", 1); err != nil {
		return err
	}
	builds := map[bool][]time.Duration{}
	if err := b.aheadAndNot(ctx, func(declaredAhead bool) error {
		for range n {
			if _, err := b.timeTrigger(ctx, p, "j", 1); err != nil {
				return err
			}
			_, d, err := latestBuildDuration(ctx, conn, p, "j")
			if err != nil {
				return err
			}
			builds[declaredAhead] = append(builds[declaredAhead], d)
		}
		return nil
	}); err != nil {
		return err
	}
	fmt.Println("5. get → task (file: from the get) → put (and its get)")
	line("pods declared ahead: build start → end", builds[true])
	line("no pod declared ahead (--lookahead 0): build", builds[false])
	return nil
}

// waitingPeak samples, until ctx ends, the pods declared ahead that wait
// for their turn (containers in state waiting) and what they request.
type waitingPeak struct {
	pods     int
	cpu, mem resource.Quantity
}

func (b *bench) sampleWaiting(ctx context.Context, conn *pgx.Conn) (waitingPeak, error) {
	var peak waitingPeak
	for {
		rows, err := conn.Query(ctx, `SELECT pod_name FROM containers WHERE state = 'waiting'`)
		if err != nil {
			if ctx.Err() != nil {
				return peak, nil
			}
			return peak, fmt.Errorf("waiting containers: %w", err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			if ctx.Err() != nil {
				return peak, nil
			}
			return peak, err
		}
		var now waitingPeak
		for _, name := range names {
			pod, err := b.kube.CoreV1().Pods(b.ns.Name).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				continue // gone meanwhile
			}
			now.pods++
			for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
				now.cpu.Add(*c.Resources.Requests.Cpu())
				now.mem.Add(*c.Resources.Requests.Memory())
			}
		}
		if now.cpu.Cmp(peak.cpu) > 0 {
			peak = now
		}
		select {
		case <-ctx.Done():
			return peak, nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}
