package redteam_test

import (
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/pkg/names"
)

// The attacks of the hardening issue (10) on names: a name becomes an
// object key, a path and a Kubernetes name, and a task named
// ../../../../artifacts once overwrote any artifact. The API refuses the
// names that could leave their place, naming the field and the rule,
// before anything is saved or any pod exists.
var _ = Describe("names that would become keys or paths", func() {
	It("refuses a team name that cannot be a key or a namespace, naming the rule (set-team)", func(ctx SpecContext) {
		// fly itself refuses '/' in a team name; the server refuses the rest.
		res, err := flyAs[admin].Run(ctx, "set-team", "-n", "../x", "--local-user", member, "--non-interactive")
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		for _, bad := range []string{"Bad Team", "team\tx", "_x"} {
			res, err := flyAs[admin].Run(ctx, "set-team", "-n", bad, "--local-user", member, "--non-interactive")
			Expect(err).NotTo(HaveOccurred())
			Expect(res.ExitCode).NotTo(Equal(0), res.String())
			Expect(res.Output()).To(ContainSubstring("team name"), res.String())
			Expect(res.Output()).To(ContainSubstring("use lowercase letters, digits, '-', '_' and '.'"), res.String())
			Expect(run(ctx, admin, "teams").Stdout).NotTo(ContainSubstring(bad))
		}
	})

	It("refuses a pipeline with a job or task named to climb out, naming it and the rule, and saves nothing (set-pipeline)", func(ctx SpecContext) {
		for _, c := range []struct{ config, says string }{
			{"jobs:\n- name: ../x\n  plan:\n  - task: t\n    file: x/t.yml\n", `jobs.../x: name "../x" contains '/'`},
			{"jobs:\n- name: j\n  plan:\n  - task: ../../../../artifacts\n    file: x/t.yml\n", `"../../../../artifacts" contains '/'`},
		} {
			name := "badname-" + strings.ToLower(rand8())
			res, err := flyAs[member].Run(ctx, "set-pipeline", "-n", "-p", name, "-c", writeFile(c.config))
			Expect(err).NotTo(HaveOccurred())
			Expect(res.ExitCode).To(Equal(1), res.String())
			Expect(res.Stderr).To(ContainSubstring("invalid pipeline config"), res.String())
			Expect(res.Stderr).To(ContainSubstring(c.says), res.String())
			Expect(res.Stderr).To(ContainSubstring(names.Rule), res.String())
			res, err = flyAs[member].Run(ctx, "get-pipeline", "-p", name)
			Expect(err).NotTo(HaveOccurred())
			Expect(res.Stderr).To(ContainSubstring("pipeline not found"), res.String())
		}
	})

	It("refuses a one-off task whose cache path leaves its directory before any build or pod exists (execute)", func(ctx SpecContext) {
		task := writeFile("platform: linux\nimage_resource: {type: registry-image, source: {repository: busybox}}\ncaches: [{path: ../../x}]\nrun: {path: \"true\"}\n")
		res, err := flyAs[member].Run(ctx, "execute", "-c", task)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		Expect(res.Output()).To(ContainSubstring("400 Bad Request"), res.String())
		// fly prints the server's JSON body as it is.
		Expect(res.Output()).To(ContainSubstring(`cache \"../../x\": path \"../../x\" leaves the working directory`), res.String())
		// fly says "executing build N" once the server has recorded the
		// build: no build, so no pod.
		Expect(res.Stdout).NotTo(MatchRegexp(`executing build \d+`), res.String())
	})
})

// A request that once ended the process (a stack overflow) is answered,
// and the server goes on serving.
var _ = Describe("requests that must not crash the server", func() {
	It("answers a pin of a malformed or unknown version with 400 or 404 and keeps serving", func(ctx SpecContext) {
		name := "pincrash-" + strings.ToLower(rand8())
		run(ctx, member, "set-pipeline", "-n", "-p", name, "-c", writeFile("resources:\n- name: r\n  type: mock\n  check_every: never\njobs:\n- name: j\n  plan:\n  - get: r\n"))
		DeferCleanup(func(ctx SpecContext) { run(ctx, admin, "destroy-pipeline", "-n", "-p", name) })
		pin := "/api/v1/teams/main/pipelines/" + name + "/resources/r/versions/%s/pin"
		code, body := call(ctx, "PUT", fmt.Sprintf(pin, "abc"), token(ctx, member), "")
		Expect(code).To(Equal(400), body)
		Expect(body).To(ContainSubstring("version id must be a positive number"))
		code, body = call(ctx, "PUT", fmt.Sprintf(pin, "999999"), token(ctx, member), "")
		Expect(code).To(Equal(404), body)
		code, body = call(ctx, "GET", "/api/v1/info", "", "")
		Expect(code).To(Equal(200), body)
		Expect(body).To(ContainSubstring(`"version"`))
	})
})
