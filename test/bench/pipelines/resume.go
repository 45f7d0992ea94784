package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/porter-ci/porter/test/bench/internal/benchstat"
	"github.com/porter-ci/porter/test/testenv"
)

// resumeSteps is the job of figure 6: four tasks that each work for a
// second and hand an artifact on, and a fifth that always fails.
const resumeSteps = `
jobs:
- name: j
  plan:
  - task: s1
    config: {platform: linux, image_resource: {type: registry-image, source: {repository: busybox}}, outputs: [{name: a1}], run: {path: sh, args: [-c, "sleep 1; date > a1/f"]}}
  - task: s2
    config: {platform: linux, image_resource: {type: registry-image, source: {repository: busybox}}, inputs: [{name: a1}], outputs: [{name: a2}], run: {path: sh, args: [-c, "sleep 1; cat a1/f > a2/f"]}}
  - task: s3
    config: {platform: linux, image_resource: {type: registry-image, source: {repository: busybox}}, inputs: [{name: a2}], outputs: [{name: a3}], run: {path: sh, args: [-c, "sleep 1; cat a2/f > a3/f"]}}
  - task: s4
    config: {platform: linux, image_resource: {type: registry-image, source: {repository: busybox}}, inputs: [{name: a3}], outputs: [{name: a4}], run: {path: sh, args: [-c, "sleep 1; cat a3/f > a4/f"]}}
  - task: s5
    config: {platform: linux, image_resource: {type: registry-image, source: {repository: busybox}}, inputs: [{name: a4}], run: {path: sh, args: [-c, "cat a4/f; exit 1"]}}
`

// resume: the job above fails once; then, n times each, a full rerun of
// that build (fly rerun-build -w) and a resume of it (the client's
// resume -w), both timed by wall clock and by the build's start → end in
// PostgreSQL. Both end failed, as the fifth step always fails: the
// difference is the four steps a resume does not run again.
func (b *bench) resume(ctx context.Context, n int) error {
	p := "resume"
	if err := b.setPipeline(ctx, p, resumeSteps); err != nil {
		return err
	}
	res, err := b.fly.Run(ctx, "trigger-job", "-j", p+"/j", "-w")
	if err == nil && res.ExitCode != 1 {
		err = fmt.Errorf("the first build did not fail: %s", res)
	}
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, b.dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var failedID int64
	if err := conn.QueryRow(ctx, `SELECT b.id FROM builds b JOIN jobs j ON j.id = b.job_id JOIN pipelines p ON p.id = j.pipeline_id
		WHERE p.name = $1 AND j.name = 'j' AND b.name = '1'`, p).Scan(&failedID); err != nil {
		return fmt.Errorf("build %s/j #1: %w", p, err)
	}
	client := testenv.NewFly(b.env.Bin, b.fly.Home, b.fly.Target)
	// timed runs a command expected to end with the failed fifth step and
	// returns its wall time and the new build's time in PostgreSQL.
	timed := func(f *testenv.Fly, args ...string) (wall, build time.Duration, err error) {
		start := time.Now()
		res, err := f.Run(ctx, args...)
		wall = time.Since(start)
		if err == nil && (res.ExitCode != 1 || !strings.Contains(res.Stdout, "#1.")) {
			err = fmt.Errorf("%s: want the rerun to fail at step 5: %s", args[0], res)
		}
		if err != nil {
			return 0, 0, err
		}
		var s, e time.Time
		if err := conn.QueryRow(ctx, `SELECT start_time, end_time FROM builds WHERE rerun_of = $1 ORDER BY id DESC LIMIT 1`, failedID).Scan(&s, &e); err != nil {
			return 0, 0, fmt.Errorf("the newest rerun of build %d: %w", failedID, err)
		}
		return wall, e.Sub(s), nil
	}
	var rerunWall, rerunBuild, resumeWall, resumeBuild []time.Duration
	for range n {
		w, d, err := timed(b.fly, "rerun-build", "-j", p+"/j", "-b", "1", "-w")
		if err != nil {
			return err
		}
		rerunWall, rerunBuild = append(rerunWall, w), append(rerunBuild, d)
		w, d, err = timed(client, "resume", "-b", fmt.Sprint(failedID), "-w")
		if err != nil {
			return err
		}
		resumeWall, resumeBuild = append(resumeWall, w), append(resumeBuild, d)
	}
	fmt.Println("6. a 5-step job (4 tasks of sleep 1 handing an artifact on) failing at step 5")
	line("full rerun (fly rerun-build -w): build start → end", rerunBuild)
	line("resume from step 5 (resume -w): build start → end", resumeBuild)
	line("full rerun (fly rerun-build -w): wall time", rerunWall)
	line("resume from step 5 (resume -w): wall time", resumeWall)
	fmt.Printf("  %-58s %.2f× the full rerun's build time\n", "", float64(benchstat.Median(resumeBuild))/float64(benchstat.Median(rerunBuild)))
	return nil
}
