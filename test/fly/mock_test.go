package fly_test

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/test/testenv"
)

// The mock resource type as Concourse's: these specs need this tree's
// mock, so they build its image under a tag of their own and run a server
// whose base type mock is that image (the shared :dev one is others').
var _ = Describe("the mock resource type, as Concourse's", Ordered, func() {
	var f *testenv.Fly
	BeforeAll(func(ctx SpecContext) {
		ref, remove, err := testenv.BuildResourceImage(ctx, GinkgoT().TempDir(), "mock", "fly")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(remove)
		types := []string{"mock=" + ref}
		for _, t := range s.env.LocalBaseResourceTypes(ctx) {
			if !strings.HasPrefix(t, "mock=") {
				types = append(types, t)
			}
		}
		srv := newServer(ctx, testenv.ATCConfig{BaseResourceTypes: types})
		f = newFly("mock")
		login(ctx, f, srv, adminUser, s.adminPassword)
	})

	It("makes the version check-resource -f gives (its check returns the version it is given)", func(ctx SpecContext) {
		name := pipelineName("mock-from")
		succeed(ctx, f, "set-pipeline", "-n", "-p", name, "-c", writeFile("p.yml",
			"resources: [{name: r, type: mock, source: {}}]\njobs: [{name: j, plan: [{get: r}]}]\n"))
		// Left paused: no scheduled check races the ones here.
		res := succeed(ctx, f, "check-resource", "-r", name+"/r", "-f", "version:v2")
		Expect(res.Stdout).To(ContainSubstring("succeeded"), res.String())
		versions := succeed(ctx, f, "resource-versions", "-r", name+"/r", "--json")
		Expect(versions.Stdout).To(ContainSubstring(`"version": "v2"`), versions.String())
		// The next check from the latest version keeps it the latest (newest
		// first), as Concourse's.
		succeed(ctx, f, "check-resource", "-r", name+"/r")
		versions = succeed(ctx, f, "resource-versions", "-r", name+"/r")
		Expect(strings.Fields(strings.SplitN(versions.Stdout, "\n", 2)[0])).To(ContainElement("version:v2"), versions.String())
	})

	It("is its own image with mirror_self: as a task's image_resource and as a resource type's image", func(ctx SpecContext) {
		task := writeFile("task.yml", `platform: linux
image_resource: {type: mock, source: {mirror_self: true}}
run: {path: sh, args: [-c, "echo running in the mirrored mock; ls /opt/resource"]}
`)
		res := succeed(ctx, f, "execute", "-c", task)
		Expect(res.Stdout).To(ContainSubstring("running in the mirrored mock"), res.String())
		Expect(res.Stdout).To(ContainSubstring("check"), res.String())

		// Concourse's set-pipelines render job, in small: a custom type
		// whose image is the mock mirroring itself, and a task rendering
		// what its get fetched in the mirrored image.
		name := pipelineName("mock-self")
		succeed(ctx, f, "set-pipeline", "-n", "-p", name, "-c", writeFile("p.yml", `resource_types:
- name: my-mock
  type: mock
  source: {mirror_self: true}
resources:
- name: r
  type: my-mock
  source:
    initial_version: x1
    create_files: {pipeline.yml: "jobs: [{name: START_VARjobEND_VAR}]", data.json: {k: [1, 2]}}
jobs:
- name: render
  plan:
  - get: r
  - task: render
    config:
      platform: linux
      image_resource: {type: mock, source: {mirror_self: true}}
      inputs: [{name: r}]
      run: {path: sh, args: [-c, "cat r/version; echo; cat r/pipeline.yml; echo; cat r/data.json"]}
`))
		succeed(ctx, f, "unpause-pipeline", "-p", name)
		succeed(ctx, f, "check-resource", "-r", name+"/r")
		res = succeed(ctx, f, "trigger-job", "-j", name+"/render", "-w")
		Expect(res.Stdout).To(ContainSubstring("x1"), res.String())
		Expect(res.Stdout).To(ContainSubstring("jobs: [{name: ((job))}]"), res.String())
		Expect(res.Stdout).To(ContainSubstring(`{"k":[1,2]}`), res.String())
	})

	It("is its own image as Concourse's testflight uses it: a get's artifact as image:, a type mirroring itself by params", func(ctx SpecContext) {
		name := pipelineName("mock-image")
		succeed(ctx, f, "set-pipeline", "-n", "-p", name, "-c", writeFile("p.yml", `resource_types:
- name: mock-via-params
  type: mock
  source: {initial_version: t1}
  params: {mirror_self_via_params: true}
- name: custom
  type: mock
  source: {mirror_self: true}
resources:
- name: image
  type: mock
  source: {mirror_self: true}
- name: custom-image
  type: custom
  source: {mirror_self: true}
- name: r
  type: mock-via-params
  source: {initial_version: v7}
jobs:
- name: j
  plan:
  - in_parallel: [get: image, get: custom-image, get: r]
  - task: from-get
    image: image
    config: {platform: linux, run: {path: echo, args: [ran in the fetched image]}}
  - task: from-custom-get
    image: custom-image
    config: {platform: linux, inputs: [{name: r}], run: {path: cat, args: [r/version]}}
`))
		succeed(ctx, f, "unpause-pipeline", "-p", name)
		for _, r := range []string{"image", "custom-image", "r"} {
			succeed(ctx, f, "check-resource", "-r", name+"/"+r)
		}
		res := succeed(ctx, f, "trigger-job", "-j", name+"/j", "-w")
		Expect(res.Stdout).To(ContainSubstring("ran in the fetched image"), res.String())
		Expect(res.Stdout).To(ContainSubstring("v7"), res.String())
	})
})
