package pipelines_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// A task step's own params win over the same keys of its config's params:
// in Concourse they are merged, step last, into the process's environment.
var _ = Describe("task step params", func() {
	It("override the task config's params of the same name", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("params")
		setPipeline(ctx, f, p, `
jobs:
- name: override
  plan:
  - task: exit-with-param
    params:
      EXIT_CODE: 1
      FROM_STEP: step
    config:
`+busyboxTask("      ", `params:
  EXIT_CODE: "0"
  FROM_CONFIG: config
  FROM_STEP: config
run: {path: sh, args: [-c, 'echo "params: $FROM_CONFIG $FROM_STEP $EXIT_CODE"; exit $EXIT_CODE']}`))
		res := run(ctx, f, "trigger-job", "-j", p+"/override", "-w")
		Expect(res.Stdout).To(ContainSubstring("params: config step 1"))
		Expect(res.Stdout).To(ContainSubstring("failed"))
		Expect(res.ExitCode).To(Equal(1), res.String())
	})
})
