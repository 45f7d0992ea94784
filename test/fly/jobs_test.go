package fly_test

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/test/testenv"
)

var _ = Describe("jobs", func() {
	// The pipeline is written into the database directly: these specs
	// prove scheduling and the job build routes, not set-pipeline.
	It("triggers a one-task job and watches it, lists and replays its builds, and reruns one (trigger-job -w, builds -j, watch -j, rerun-build)", func(ctx SpecContext) {
		dsn, drop, err := s.env.NewDatabase(ctx)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(drop)
		srv := newServer(ctx, testenv.ATCConfig{Database: dsn})
		fly := newFly("jobs")
		login(ctx, fly, srv, adminUser, s.adminPassword)

		task := map[string]any{
			"platform":       "linux",
			"image_resource": map[string]any{"type": "registry-image", "source": map[string]any{"repository": "busybox"}},
			"run":            map[string]any{"path": "sh", "args": []string{"-c", "echo hello from $((40+2))"}},
		}
		hello := map[string]any{"name": "hello", "plan": []any{map[string]any{"task": "say", "config": task}}}
		locked := map[string]any{"name": "locked", "disable_manual_trigger": true, "plan": []any{map[string]any{"task": "say", "config": task}}}
		cfg, err := json.Marshal(map[string]any{"jobs": []any{hello, locked}})
		Expect(err).NotTo(HaveOccurred())
		conn, err := pgx.Connect(ctx, dsn)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = conn.Close(ctx) })
		var pipeline int64
		Expect(conn.QueryRow(ctx, `INSERT INTO pipelines (team_id, name, config)
			SELECT id, 'p', $1 FROM teams WHERE name = 'main' RETURNING id`, cfg).Scan(&pipeline)).To(Succeed())
		for _, j := range []map[string]any{hello, locked} {
			body, err := json.Marshal(j)
			Expect(err).NotTo(HaveOccurred())
			_, err = conn.Exec(ctx, `INSERT INTO jobs (pipeline_id, name, config) VALUES ($1, $2, $3)`, pipeline, j["name"], body)
			Expect(err).NotTo(HaveOccurred())
		}

		start := time.Now()
		res := succeed(ctx, fly, "trigger-job", "-j", "p/hello", "-w")
		GinkgoWriter.Printf("trigger-job -w of a one-task job took %s\n", time.Since(start))
		expectInOrder(res, "started p/hello #1\n", "hello from 42\n", "succeeded\n")

		res = succeed(ctx, fly, "trigger-job", "-j", "p/hello")
		Expect(res.Stdout).To(Equal("started p/hello #2\n"))
		Eventually(func() string {
			return plain(succeed(ctx, fly, "builds", "-j", "p/hello").Stdout)
		}).WithTimeout(2 * time.Minute).Should(MatchRegexp(`(?m)^\d+\s+p/hello/2\s+succeeded\s`))
		out := plain(succeed(ctx, fly, "builds", "-j", "p/hello").Stdout)
		rows := strings.Split(strings.TrimSpace(out), "\n")
		Expect(rows).To(HaveLen(2), out)
		Expect(rows[0]).To(MatchRegexp(`^\d+\s+p/hello/2\s+succeeded\s.*\smain\s+admin\s*$`))
		Expect(rows[1]).To(MatchRegexp(`^\d+\s+p/hello/1\s+succeeded\s`))

		watched := succeed(ctx, fly, "watch", "-j", "p/hello", "-b", "1")
		expectInOrder(watched, "hello from 42\n", "succeeded\n")

		res = succeed(ctx, fly, "rerun-build", "-j", "p/hello", "-b", "1", "-w")
		expectInOrder(res, "started p/hello #1.1\n", "hello from 42\n", "succeeded\n")

		res = run(ctx, fly, "trigger-job", "-j", "p/locked")
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		res = run(ctx, fly, "trigger-job", "-j", "p/missing")
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		Expect(res.Output()).To(ContainSubstring("not found"))
		res = run(ctx, fly, "watch", "-j", "p/hello", "-b", "7")
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		Expect(res.Output()).To(ContainSubstring("build not found"))
		Expect(strings.Count(plain(succeed(ctx, fly, "builds", "-j", "p/hello", "--count", "1").Stdout), "\n")).To(Equal(1))
	})
})
