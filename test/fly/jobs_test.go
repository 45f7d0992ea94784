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
	It("triggers a one-task job and watches it, lists and replays its builds, and reruns one, and aborts one still pending (trigger-job -w, builds -j, watch -j, rerun-build, abort-build)", func(ctx SpecContext) {
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
		broken := map[string]any{"name": "broken", "plan": []any{map[string]any{"task": "say", "config": map[string]any{
			"platform": "linux", "image_resource": task["image_resource"]}}}}
		cfg, err := json.Marshal(map[string]any{"jobs": []any{hello, locked, broken}})
		Expect(err).NotTo(HaveOccurred())
		conn, err := pgx.Connect(ctx, dsn)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = conn.Close(ctx) })
		var pipeline int64
		Expect(conn.QueryRow(ctx, `INSERT INTO pipelines (team_id, name, config)
			SELECT id, 'p', $1 FROM teams WHERE name = 'main' RETURNING id`, cfg).Scan(&pipeline)).To(Succeed())
		for _, j := range []map[string]any{hello, locked, broken} {
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

		// A build whose plan cannot run errors at once, saying why.
		res = run(ctx, fly, "trigger-job", "-j", "p/broken", "-w")
		Expect(res.ExitCode).To(Equal(2), res.String())
		expectInOrder(res, "started p/broken #1\n", "run", "errored\n")

		// A pending build aborted before it starts (its job is paused) ends
		// aborted, and whoever follows it sees that and exits 3, as fly does
		// against Concourse: no silent success.
		succeed(ctx, fly, "pause-job", "-j", "p/hello")
		Expect(succeed(ctx, fly, "trigger-job", "-j", "p/hello").Stdout).To(Equal("started p/hello #3\n"))
		watching := make(chan testenv.FlyResult, 1)
		go func() {
			defer GinkgoRecover()
			watching <- run(ctx, fly, "watch", "-j", "p/hello", "-b", "3")
		}()
		succeed(ctx, fly, "abort-build", "-j", "p/hello", "-b", "3")
		var watchedAbort testenv.FlyResult
		Eventually(watching).WithTimeout(30 * time.Second).Should(Receive(&watchedAbort))
		Expect(watchedAbort.ExitCode).To(Equal(3), watchedAbort.String())
		Expect(watchedAbort.Stdout).To(ContainSubstring("aborted\n"), watchedAbort.String())
		Expect(plain(succeed(ctx, fly, "builds", "-j", "p/hello", "--count", "1").Stdout)).To(MatchRegexp(`^\d+\s+p/hello/3\s+aborted\s`))
		succeed(ctx, fly, "unpause-job", "-j", "p/hello")

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

	It("lists, pins, comments, unpins, disables and enables resource versions (resource-versions, pin-resource, unpin-resource, disable/enable-resource-version)", func(ctx SpecContext) {
		dsn, drop, err := s.env.NewDatabase(ctx)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(drop)
		srv := newServer(ctx, testenv.ATCConfig{Database: dsn})
		fly := newFly("versions")
		login(ctx, fly, srv, adminUser, s.adminPassword)

		conn, err := pgx.Connect(ctx, dsn)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = conn.Close(ctx) })
		var resource int64
		Expect(conn.QueryRow(ctx, `
			WITH p AS (INSERT INTO pipelines (team_id, name, config)
				SELECT id, 'p', '{"resources": [{"name": "repo", "type": "mock", "source": {}, "check_every": "never"}]}' FROM teams WHERE name = 'main' RETURNING id)
			INSERT INTO resources (pipeline_id, name, type, config, config_hash)
			SELECT id, 'repo', 'mock', '{"name": "repo", "type": "mock", "source": {}, "check_every": "never"}', 'h' FROM p RETURNING id`).Scan(&resource)).To(Succeed())
		for i, ref := range []string{"a", "b", "c"} {
			_, err := conn.Exec(ctx, `INSERT INTO resource_versions (resource_id, config_hash, version, version_hash, check_order)
				VALUES ($1, 'h', jsonb_build_object('ref', $2::text), $2, $3)`, resource, ref, i+1)
			Expect(err).NotTo(HaveOccurred())
		}

		out := plain(succeed(ctx, fly, "resource-versions", "-r", "p/repo").Stdout)
		rows := strings.Split(strings.TrimSpace(out), "\n")
		Expect(rows).To(HaveLen(3), out)
		for i, ref := range []string{"c", "b", "a"} {
			Expect(rows[i]).To(MatchRegexp(`^\d+\s+ref:%s\s+yes\s*$`, ref))
		}
		Expect(strings.Split(strings.TrimSpace(plain(succeed(ctx, fly, "resource-versions", "-r", "p/repo", "--count", "2").Stdout)), "\n")).To(HaveLen(2))

		res := succeed(ctx, fly, "pin-resource", "-r", "p/repo", "-v", "ref:b", "-c", "c is broken")
		Expect(res.Stdout).To(Equal("pinned 'p/repo' with version {\"ref\":\"b\"}\npin comment 'c is broken' is saved\n"))
		var pinned, comment string
		Expect(conn.QueryRow(ctx, "SELECT api_pinned_version::text, pin_comment FROM resources WHERE id = $1", resource).Scan(&pinned, &comment)).To(Succeed())
		Expect(pinned).To(Equal(`{"ref": "b"}`))
		Expect(comment).To(Equal("c is broken"))
		res = run(ctx, fly, "pin-resource", "-r", "p/repo", "-v", "ref:zzz")
		Expect(res.ExitCode).NotTo(Equal(0))
		Expect(res.Output()).To(ContainSubstring(`could not find version matching {"ref":"zzz"}`))

		Expect(succeed(ctx, fly, "unpin-resource", "-r", "p/repo").Stdout).To(Equal("unpinned 'p/repo'\n"))
		var unpinned *string
		Expect(conn.QueryRow(ctx, "SELECT api_pinned_version::text FROM resources WHERE id = $1", resource).Scan(&unpinned)).To(Succeed())
		Expect(unpinned).To(BeNil())
		res = run(ctx, fly, "pin-resource", "-r", "p/repo", "-c", "no pin")
		Expect(res.ExitCode).NotTo(Equal(0))
		Expect(res.Output()).To(ContainSubstring("could not save comment, make sure 'p/repo' is pinned"))

		Expect(succeed(ctx, fly, "disable-resource-version", "-r", "p/repo", "-v", "ref:a").Stdout).To(Equal("disabled 'p/repo' with version {\"ref\":\"a\"}\n"))
		Expect(plain(succeed(ctx, fly, "resource-versions", "-r", "p/repo").Stdout)).To(MatchRegexp(`(?m)^\d+\s+ref:a\s+no\s*$`))
		Expect(succeed(ctx, fly, "enable-resource-version", "-r", "p/repo", "-v", "ref:a").Stdout).To(Equal("enabled 'p/repo' with version {\"ref\":\"a\"}\n"))
		Expect(plain(succeed(ctx, fly, "resource-versions", "-r", "p/repo").Stdout)).To(MatchRegexp(`(?m)^\d+\s+ref:a\s+yes\s*$`))

		// fly shows an unknown resource as one without versions.
		Expect(strings.TrimSpace(succeed(ctx, fly, "resource-versions", "-r", "p/nope").Stdout)).To(BeEmpty())
	})
})
