package fly_test

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/pkg/names"
)

// Names become object keys, paths and Kubernetes names: the API refuses
// the ones that could leave their place ("../x"), naming the field and the
// rule, before anything is saved or any pod exists.
var _ = Describe("names that would become keys or paths", func() {
	It("refuses a team name that cannot be a key or a namespace, naming the rule (set-team)", func(ctx SpecContext) {
		// fly itself refuses '/' in a team name; the server refuses the rest.
		res := run(ctx, s.adminFly, "set-team", "-n", "../x", "--local-user", aliceUser, "--non-interactive")
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		for _, bad := range []string{"Bad Team", "team\tx", "_x"} {
			res := run(ctx, s.adminFly, "set-team", "-n", bad, "--local-user", aliceUser, "--non-interactive")
			Expect(res.ExitCode).NotTo(Equal(0), res.String())
			Expect(res.Output()).To(ContainSubstring("team name"), res.String())
			Expect(res.Output()).To(ContainSubstring("use lowercase letters, digits, '-', '_' and '.'"), res.String())
			Expect(run(ctx, s.adminFly, "teams").Stdout).NotTo(ContainSubstring(bad))
		}
	})

	It("refuses a pipeline with a job named ../x, naming the job and the rule, and saves nothing (set-pipeline)", func(ctx SpecContext) {
		name := pipelineName("badjob")
		cfg := writeFile("p.yml", "jobs:\n- name: ../x\n  plan:\n  - task: t\n    file: x/t.yml\n")
		res := run(ctx, s.adminFly, "set-pipeline", "-n", "-p", name, "-c", cfg)
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("invalid pipeline config"), res.String())
		Expect(res.Stderr).To(ContainSubstring(`jobs.../x: name "../x" contains '/'`), res.String())
		Expect(res.Stderr).To(ContainSubstring(names.Rule), res.String())
		res = run(ctx, s.adminFly, "get-pipeline", "-p", name)
		Expect(res.Stderr).To(ContainSubstring("pipeline not found"), res.String())
	})

	It("refuses a one-off task whose cache path leaves its directory before any build or pod exists (execute)", func(ctx SpecContext) {
		task := taskFile("caches: [{path: ../../x}]\nrun: {path: \"true\"}\n")
		res := run(ctx, s.adminFly, "execute", "-c", task)
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		Expect(res.Output()).To(ContainSubstring("400 Bad Request"), res.String())
		// fly prints the server's JSON body as it is.
		Expect(res.Output()).To(ContainSubstring(`cache \"../../x\": path \"../../x\" leaves the working directory`), res.String())
		// fly says "executing build N" once the server has recorded the
		// build: no build, so no pod.
		Expect(res.Stdout).NotTo(MatchRegexp(`executing build \d+`), res.String())
	})
})

// Requests that once crashed or exhausted the server are answered, and the
// server goes on serving.
var _ = Describe("requests that must not crash the server", func() {
	It("answers a pin of a malformed or unknown version with 400 or 404 and keeps serving (fly curl)", func(ctx SpecContext) {
		name := pipelineName("pincrash")
		cfg := writeFile("p.yml", "resources:\n- name: r\n  type: mock\n  check_every: never\njobs:\n- name: j\n  plan:\n  - get: r\n")
		succeed(ctx, s.adminFly, "set-pipeline", "-n", "-p", name, "-c", cfg)
		pin := "/api/v1/teams/main/pipelines/" + name + "/resources/r/versions/%s/pin"
		// Before the fix, the first of these ended the process with a stack overflow.
		res := run(ctx, s.adminFly, "curl", fmt.Sprintf(pin, "abc"), "--", "-X", "PUT", "-s", "-w", "\\n%{http_code}")
		Expect(res.Stdout).To(ContainSubstring("version id must be a positive number"), res.String())
		Expect(res.Stdout).To(HaveSuffix("400"), res.String())
		res = run(ctx, s.adminFly, "curl", fmt.Sprintf(pin, "999999"), "--", "-X", "PUT", "-s", "-w", "\\n%{http_code}")
		Expect(res.Stdout).To(HaveSuffix("404"), res.String())
		// Still serving.
		res = succeed(ctx, s.adminFly, "curl", "/api/v1/info")
		Expect(res.Stdout).To(ContainSubstring(`"version"`), res.String())
	})
})
