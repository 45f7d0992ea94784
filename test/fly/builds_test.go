package fly_test

import (
	"encoding/json"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/test/testenv"
)

var _ = Describe("builds", func() {
	It("aborts the build on Ctrl-C (SIGINT to fly execute), and its pod stops", func(ctx SpecContext) {
		p, err := s.adminFly.Start(testenv.FlyCmd{Args: []string{"execute", "-c", shTask("echo started; sleep 600")}})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(p.Kill)
		Eventually(func() string { return p.Stdout.String() }).WithTimeout(time.Minute).Should(ContainSubstring("started\n"))
		id := buildID(p.Stdout.String())
		Expect(buildPods(ctx, sharedWorker, id)).NotTo(BeEmpty())

		Expect(p.Interrupt()).To(Succeed())
		res, err := p.Wait(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(3), res.String())
		Expect(res.Stderr).To(ContainSubstring("aborting..."))
		expectInOrder(res, "started\n", "aborted\n")
		Eventually(func() bool { return running(buildPods(ctx, sharedWorker, id)) }).
			WithTimeout(time.Minute).Should(BeFalse(), "the aborted build's pod still runs")
		// Recorded too (the "builds" spec checks that it is at once).
		Eventually(func() string { return buildStatus(ctx, id) }).WithTimeout(10 * time.Second).Should(Equal("aborted"))
	})

	It("replays a finished build (watch -b)", func(ctx SpecContext) {
		res := succeed(ctx, s.adminFly, "execute", "-c", shTask("for i in 1 2 3; do echo line-$i; done"))
		id := buildID(res.Stdout)

		watched := succeed(ctx, s.adminFly, "watch", "-b", strconv.Itoa(id))
		expectInOrder(watched, "initializing\n", "line-1\nline-2\nline-3\n", "succeeded\n")
		// The same events execute showed, from "initializing" on.
		Expect(plain(res.Stdout)).To(HaveSuffix(plain(watched.Stdout)))
	})

	It("follows a running build to its end (watch -b)", func(ctx SpecContext) {
		// Computed lines, so the command line fly shows does not contain them.
		id := startBuild(ctx, s.adminFly, "echo line-$((0+1)); sleep 3; echo line-$((1+1))")
		p, err := s.adminFly.Start(testenv.FlyCmd{Args: []string{"watch", "-b", strconv.Itoa(id)}})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(p.Kill)
		Eventually(func() string { return p.Stdout.String() }).WithTimeout(time.Minute).Should(ContainSubstring("\nline-1\n"))
		Expect(buildStatus(ctx, id)).To(Equal("started"), "the build ended before watch saw it run")
		Expect(p.Stdout.String()).NotTo(ContainSubstring("line-2"))

		res, err := p.Wait(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), res.String())
		expectInOrder(res, "\nline-1\n", "line-2\n", "succeeded\n")
	})

	It("lists builds with their status, team and creator (builds)", func(ctx SpecContext) {
		ok := buildID(succeed(ctx, s.adminFly, "execute", "-c", shTask("true")).Stdout)
		failed := buildID(run(ctx, s.adminFly, "execute", "-c", shTask("exit 1")).Stdout)

		// fly execute has printed the final status, so the list shows it:
		// scripts run `fly execute` and then look.
		res := succeed(ctx, s.adminFly, "builds")
		out := plain(res.Stdout)
		for id, status := range map[int]string{ok: "succeeded", failed: "failed"} {
			row := `(?m)^` + strconv.Itoa(id) + `\s+` + strconv.Itoa(id) + `\s+` + status + `\s+\S+\s+\S+\s+\S+\s+main\s+admin\s*$`
			Expect(out).To(MatchRegexp(row), res.String())
		}

		res = succeed(ctx, s.adminFly, "builds", "--json", "--count", "2")
		var builds []apiBuild
		Expect(json.Unmarshal([]byte(res.Stdout), &builds)).To(Succeed(), res.String())
		Expect(builds).To(HaveLen(2))
		Expect(builds[0].ID).To(BeNumerically(">", builds[1].ID), "newest first")
		Expect(builds[0].ID).To(BeNumerically(">=", failed))
	})

	It("aborts a running build (abort-build)", func(ctx SpecContext) {
		id := startBuild(ctx, s.adminFly, "echo started; sleep 600")
		Eventually(func() []flyContainer { return containersOf(ctx, id) }).WithTimeout(time.Minute).ShouldNot(BeEmpty())

		res := succeed(ctx, s.adminFly, "abort-build", "-b", strconv.Itoa(id))
		Expect(res.Stdout).To(Equal("build successfully aborted\n"))
		watched := run(ctx, s.adminFly, "watch", "-b", strconv.Itoa(id))
		Expect(watched.ExitCode).To(Equal(3), watched.String())
		Expect(watched.Stdout).To(MatchRegexp(`(?m)^aborted$`))
		Eventually(func() string { return buildStatus(ctx, id) }).WithTimeout(10 * time.Second).Should(Equal("aborted"))

		res = run(ctx, s.adminFly, "abort-build", "-b", "999999")
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("build does not exist"))
	})
})
