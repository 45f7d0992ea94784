package fly_test

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/porter-ci/porter/test/testenv"
)

// A small config must not cost the server more than its size: a chain of
// custom resource types used to double the work per type (a 40-deep one
// never finished), so chains, nesting and plan size are capped and a
// config past a cap is refused, naming the cap.
var _ = Describe("pipelines that would cost the server far more than their size", func() {
	It("refuses a 40-deep chain of resource types quickly, naming the cap, and accepts a 20-deep one fast (set-pipeline)", func(ctx SpecContext) {
		name := pipelineName("typechain")
		start := time.Now()
		res := run(ctx, s.adminFly, "set-pipeline", "-n", "-p", name, "-c", writeFile("deep.yml", testenv.TypeChainPipeline(40)))
		took := time.Since(start)
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("invalid pipeline config"), res.String())
		Expect(res.Stderr).To(ContainSubstring("resource_types.t30: type chain deeper than 30 (the limit)"), res.String())
		Expect(took).To(BeNumerically("<", 5*time.Second), "fly set-pipeline of a 40-deep chain took %v", took)
		res = run(ctx, s.adminFly, "get-pipeline", "-p", name)
		Expect(res.Stderr).To(ContainSubstring("pipeline not found"), res.String())

		start = time.Now()
		res = succeed(ctx, s.adminFly, "set-pipeline", "-n", "-p", name, "-c", writeFile("ok.yml", testenv.TypeChainPipeline(20)))
		took = time.Since(start)
		Expect(plain(res.Stdout)).To(ContainSubstring("pipeline created!"), res.String())
		Expect(took).To(BeNumerically("<", 3*time.Second), "fly set-pipeline of a 20-deep chain took %v", took)
		Expect(succeed(ctx, s.adminFly, "get-pipeline", "-p", name).Stdout).To(ContainSubstring("name: t19"))
	}, SpecTimeout(2*time.Minute))

	It("refuses a job whose attempts multiply past the plan-size cap before it could ever be planned (set-pipeline)", func(ctx SpecContext) {
		name := pipelineName("attempts")
		cfg := "jobs:\n- name: j\n  plan:\n  - do:\n    - {task: a, file: x/t.yml, attempts: 1000}\n    attempts: 1000\n"
		res := run(ctx, s.adminFly, "set-pipeline", "-n", "-p", name, "-c", writeFile("p.yml", cfg))
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("jobs.j: plan has more than 2000 steps (the limit)"), res.String())
	})

	It("refuses a one-off plan nested past the cap with a 400 naming it, recording no build (fly execute's route)", func(ctx SpecContext) {
		plan := `{"id":"t","task":{"name":"t","config":{"platform":"linux","run":{"path":"true"}}}}`
		for i := range 60 {
			plan = fmt.Sprintf(`{"id":"try%d","try":{"step":%s}}`, i, plan)
		}
		before := latestBuildID(ctx)
		code, body := call(ctx, http.MethodPost, s.server.URL()+"/api/v1/teams/main/builds", s.adminToken,
			strings.NewReader(plan), http.Header{"Content-Type": {"application/json"}})
		Expect(code).To(Equal(http.StatusBadRequest), body)
		Expect(body).To(ContainSubstring("steps nested deeper than 50 (the limit)"))
		Expect(latestBuildID(ctx)).To(Equal(before))
	})
})
