package runtime_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/test/testenv"
)

// The resource types the specs use: the real mock type (hack/images.sh
// resources), a type whose scripts are shell (scriptImage, built here),
// and busybox, an image that is no resource type at all.
const (
	scriptImage  = "porter.local/resource-script-test:runtime"
	scriptScript = `#!/bin/sh
# out: says it started, then waits to be aborted.
echo "out started" >&2
exec sleep 600
`
)

// mockImage is the mock type's image built from this tree for the suite,
// so that the specs neither wait for nor race with the shared :dev images.
const mockImage = "porter.local/resource-mock:runtime-test"

// resourceTypeArgs are the server's flags for the specs' resource types,
// and the sidecar image to test (PORTER_TEST_PORTER_IMAGE: a branch's own
// porter image, before porter.local/porter:dev has its sidecar).
func resourceTypeArgs(ctx context.Context) []string {
	GinkgoHelper()
	Expect(buildScriptImage(ctx)).To(Succeed())
	Expect(buildMockImage(ctx)).To(Succeed())
	args := []string{"--base-resource-type", "mock=" + mockImage,
		"--base-resource-type", "script=" + scriptImage, "--base-resource-type", "not-a-resource=busybox:latest"}
	if img := os.Getenv("PORTER_TEST_PORTER_IMAGE"); img != "" {
		args = append(args, "--porter-image", img)
	}
	return args
}

// buildScriptImage builds a busybox image with /opt/resource/out a shell
// script, the way hack/images.sh builds images, and imports it into the
// cluster's containerd.
func buildScriptImage(ctx context.Context) error {
	cache := filepath.Join(os.Getenv("HOME"), ".cache", "porter")
	rootfs := filepath.Join(cache, "images", "rootfs", "busybox")
	if _, err := os.Stat(rootfs); err != nil {
		return fmt.Errorf("busybox rootfs (run hack/images.sh base): %w", err)
	}
	dir := GinkgoT().TempDir()
	res := filepath.Join(dir, "resource")
	if err := os.MkdirAll(res, 0o755); err != nil {
		return err
	}
	for _, name := range []string{"check", "in", "out"} {
		body := "#!/bin/sh\necho '[]'\n"
		if name == "out" {
			body = scriptScript
		}
		if err := os.WriteFile(filepath.Join(res, name), []byte(body), 0o755); err != nil {
			return err
		}
	}
	return importImage(ctx, scriptImage, dir, rootfs+":/", res+":/opt/resource")
}

// buildMockImage builds the mock resource type's image as hack/images.sh
// does (cmd/resource at /opt/resource with check, in and out linking to it)
// and imports it.
func buildMockImage(ctx context.Context) error {
	dir := GinkgoT().TempDir()
	root, err := repoRoot(ctx)
	if err != nil {
		return err
	}
	bin := filepath.Join(dir, "resource")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./cmd/resource")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build cmd/resource: %v: %s", err, out)
	}
	return importImage(ctx, mockImage, dir, "-env", "PORTER_RESOURCE_TYPE=mock", "-env", "PORTER_RESOURCE_IMAGE="+mockImage,
		bin+":/opt/resource/resource", filepath.Join(root, "cmd/resource/links")+":/opt/resource")
}

func repoRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("find the module root: %w", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

// importImage builds an image with mkimage from its arguments and imports
// it into the cluster's containerd.
func importImage(ctx context.Context, ref, dir string, args ...string) error {
	archive := filepath.Join(dir, "image.tar")
	mkimage := filepath.Join(os.Getenv("HOME"), ".cache", "porter", "bin", "mkimage")
	out, err := exec.CommandContext(ctx, mkimage, append([]string{"-ref", ref, "-o", archive}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mkimage %s: %v: %s", ref, err, out)
	}
	out, err = exec.CommandContext(ctx, "ctr", "-a", "/run/porter-cluster/containerd.sock", "-n", "k8s.io", "images", "import", archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("import %s: %v: %s", ref, err, out)
	}
	return nil
}

// runPlan starts a one-off build of plan through the API and reads its
// events to its end.
func runPlan(ctx context.Context, plan concourse.Plan) (int64, []events.Event) {
	GinkgoHelper()
	b, err := api().CreateBuild(ctx, "main", plan)
	Expect(err).NotTo(HaveOccurred())
	return b.ID, buildEvents(ctx, b.ID)
}

func mockType() concourse.TypeImage { return concourse.TypeImage{BaseType: "mock"} }

// eventsOf are the build's events of one type.
func eventsOf[T events.Event](evs []events.Event) []T {
	var out []T
	for _, ev := range evs {
		if e, ok := ev.(T); ok {
			out = append(out, e)
		}
	}
	return out
}

var _ = Describe("resource steps on the real cluster", func() {
	It("checks versions, gets the latest of them and a task reads its files", func(ctx SpecContext) {
		var ids planIDs
		checkID, getID := ids.next(), ids.next()
		source := map[string]any{"versions": []string{"v1", "v2"}, "create_files": map[string]string{"hello": "hi there"},
			"metadata": []map[string]string{{"name": "author", "value": "mock"}}, "log": "mock says hello"}
		plan := concourse.Plan{ID: ids.next(), Do: &concourse.DoPlan{
			{ID: checkID, Check: &concourse.CheckPlan{Name: "repo", Type: "mock", Source: source, TypeImage: mockType(),
				FromVersion: map[string]string{"version": "mock"}}},
			{ID: getID, Get: &concourse.GetPlan{Name: "repo", Type: "mock", Source: source, TypeImage: mockType(), VersionFrom: &checkID}},
			{ID: ids.next(), Task: &concourse.TaskPlan{Name: "read", Config: taskConfigJSON(busyboxTask + `inputs: [{name: repo}]
run: {path: sh, args: ["-c", "cat repo/version; echo; cat repo/hello"]}
`)}},
		}}
		id, evs := runPlan(ctx, plan)
		Expect(getBuild(ctx, id).Status).To(Equal(concourse.StatusSucceeded), mustJSON(evs))
		Expect(logs(evs, events.OriginSourceStdout)).To(Equal("v2\nhi there"))

		checks := eventsOf[events.InitializeCheck](evs)
		Expect(checks).To(HaveLen(1))
		Expect(checks[0].Name).To(Equal("repo"))
		Expect(checks[0].Origin.ID).To(Equal(string(checkID)))
		Expect(eventsOf[events.InitializeGet](evs)).To(HaveLen(1))
		Expect(eventsOf[events.StartGet](evs)).To(HaveLen(1))
		fin := eventsOf[events.FinishGet](evs)
		Expect(fin).To(HaveLen(1))
		Expect(fin[0].Origin.ID).To(Equal(string(getID)))
		Expect(fin[0].Version).To(Equal(map[string]string{"version": "v2"}))
		Expect(fin[0].Metadata).To(Equal([]events.MetadataField{{Name: "author", Value: "mock"}}))
		// The scripts' stderr is the steps' log; stdout was their response.
		var getLog strings.Builder
		for _, l := range eventsOf[events.Log](evs) {
			if l.Origin.ID == string(getID) {
				Expect(l.Origin.Source).To(Equal(events.OriginSourceStderr))
				getLog.WriteString(l.Payload)
			}
		}
		Expect(getLog.String()).To(ContainSubstring("fetched version v2"))
		Expect(getLog.String()).NotTo(ContainSubstring(`"version"`))

		By("the request, whose source may hold credentials, is in the steps' Secrets, not in their pods")
		pods := buildPods(ctx, id)
		Expect(pods).To(HaveLen(3))
		for _, p := range pods {
			Expect(mustJSON(p.Spec)).NotTo(ContainSubstring("mock says hello"))
		}
	})

	It("puts with the artifacts its params name, and the implicit get fetches what it made", func(ctx SpecContext) {
		var ids planIDs
		putID := ids.next()
		source := map[string]any{"log": "put " + rand.Text()}
		plan := concourse.Plan{ID: ids.next(), Do: &concourse.DoPlan{
			{ID: ids.next(), Task: &concourse.TaskPlan{Name: "build", Config: taskConfigJSON(busyboxTask + `outputs: [{name: built}, {name: unrelated}]
run: {path: sh, args: ["-c", "echo -n p1 > built/version"]}
`)}},
			{ID: putID, Put: &concourse.PutPlan{Name: "repo", Type: "mock", Source: source, TypeImage: mockType(),
				Params: map[string]any{"file": "built/version"}}},
			{ID: ids.next(), Get: &concourse.GetPlan{Name: "repo", Type: "mock", Source: source, TypeImage: mockType(), VersionFrom: &putID}},
			{ID: ids.next(), Task: &concourse.TaskPlan{Name: "read", Config: taskConfigJSON(busyboxTask + `inputs: [{name: repo}]
run: {path: cat, args: ["repo/version"]}
`)}},
		}}
		id, evs := runPlan(ctx, plan)
		Expect(getBuild(ctx, id).Status).To(Equal(concourse.StatusSucceeded), mustJSON(evs))
		Expect(eventsOf[events.InitializePut](evs)).To(HaveLen(1))
		Expect(eventsOf[events.StartPut](evs)).To(HaveLen(1))
		puts := eventsOf[events.FinishPut](evs)
		Expect(puts).To(HaveLen(1))
		Expect(puts[0].Version).To(Equal(map[string]string{"version": "p1"}))
		gets := eventsOf[events.FinishGet](evs)
		Expect(gets).To(HaveLen(1))
		Expect(gets[0].Version).To(Equal(map[string]string{"version": "p1"}))
		Expect(logs(evs, events.OriginSourceStdout)).To(Equal("p1"))

		By("the put's pod got the detected input only")
		var putPod *corev1.Pod
		for _, p := range buildPods(ctx, id) {
			if strings.Contains(p.Name, "-repo-") && strings.Contains(mustJSON(p.Spec), "/opt/resource/out") {
				putPod = &p
			}
		}
		Expect(putPod).NotTo(BeNil())
		spec := mustJSON(putPod.Spec)
		Expect(spec).To(ContainSubstring(`\"name\":\"built\"`))
		Expect(spec).NotTo(ContainSubstring(`\"name\":\"unrelated\"`))
	})

	It("takes a get it already fetched from the resource cache, with no pod", func(ctx SpecContext) {
		source := map[string]any{"create_files": map[string]string{"f": rand.Text()}}
		get := func() concourse.Plan {
			var ids planIDs
			return concourse.Plan{ID: ids.next(), Get: &concourse.GetPlan{Name: "repo", Type: "mock", Source: source, TypeImage: mockType(),
				Version: map[string]string{"version": "c1"}}}
		}
		first, evs := runPlan(ctx, get())
		Expect(getBuild(ctx, first).Status).To(Equal(concourse.StatusSucceeded), mustJSON(evs))
		Expect(buildPods(ctx, first)).To(HaveLen(1))

		second, evs := runPlan(ctx, get())
		Expect(getBuild(ctx, second).Status).To(Equal(concourse.StatusSucceeded), mustJSON(evs))
		Expect(buildPods(ctx, second)).To(BeEmpty())
		Expect(eventsOf[events.InitializeGet](evs)).To(HaveLen(1))
		fin := eventsOf[events.FinishGet](evs)
		Expect(fin).To(HaveLen(1))
		Expect(fin[0].Version).To(Equal(map[string]string{"version": "c1"}))
	})

	It("errors a check that prints invalid JSON, naming it", func(ctx SpecContext) {
		id, evs := runPlan(ctx, concourse.Plan{ID: "c", Check: &concourse.CheckPlan{Name: "repo", Type: "mock", TypeImage: mockType(),
			Source: map[string]any{"check_output": "not json at all"}}})
		Expect(getBuild(ctx, id).Status).To(Equal(concourse.StatusErrored))
		Expect(errorMessages(evs)).To(ContainElement(And(ContainSubstring("check printed invalid JSON"), ContainSubstring("not json at all"))))
	})

	It("says so when the resource type's image has no /opt/resource/check", func(ctx SpecContext) {
		start := time.Now()
		id, evs := runPlan(ctx, concourse.Plan{ID: "c", Check: &concourse.CheckPlan{Name: "repo", Type: "not-a-resource",
			TypeImage: concourse.TypeImage{BaseType: "not-a-resource"}, Source: map[string]any{}}})
		Expect(getBuild(ctx, id).Status).To(Equal(concourse.StatusErrored))
		Expect(errorMessages(evs)).To(ContainElement("the resource type's image has no /opt/resource/check"))
		Expect(time.Since(start)).To(BeNumerically("<", 2*time.Minute))
	})

	It("fails a get whose in fails, with its exit status", func(ctx SpecContext) {
		id, evs := runPlan(ctx, concourse.Plan{ID: "g", Get: &concourse.GetPlan{Name: "repo", Type: "mock", TypeImage: mockType(),
			Source: map[string]any{"create_files": map[string]string{"x": rand.Text()}}, Params: map[string]any{"fail": true},
			Version: map[string]string{"version": "f1"}}})
		Expect(getBuild(ctx, id).Status).To(Equal(concourse.StatusFailed), mustJSON(evs))
		fin := eventsOf[events.FinishGet](evs)
		Expect(fin).To(HaveLen(1))
		Expect(fin[0].ExitStatus).NotTo(BeZero())
		Expect(logs(evs, events.OriginSourceStderr)).To(ContainSubstring("failing as asked"))
	})

	It("runs a custom resource type whose image a registry-image check finds, pinned by digest", func(ctx SpecContext) {
		registry, err := testenv.RegistryAddr(ctx)
		if err != nil {
			Skip(fmt.Sprintf("no registry: %v", err))
		}
		imageSource := map[string]any{"repository": registry + "/resource-mock", "tag": "dev", "insecure": true}
		typeCheckID := concourse.PlanID("type-check")
		typeImage := concourse.TypeImage{
			CheckPlan: &concourse.Plan{ID: typeCheckID, Check: &concourse.CheckPlan{Name: "my-mock", Type: "registry-image",
				Source: imageSource, TypeImage: concourse.TypeImage{BaseType: "registry-image"}}},
			GetPlan: &concourse.Plan{ID: "type-get", Get: &concourse.GetPlan{Name: "my-mock", Type: "registry-image",
				Source: imageSource, TypeImage: concourse.TypeImage{BaseType: "registry-image"}, VersionFrom: &typeCheckID}},
		}
		id, evs := runPlan(ctx, concourse.Plan{ID: "g", Get: &concourse.GetPlan{Name: "repo", Type: "my-mock", TypeImage: typeImage,
			Source: map[string]any{"create_files": map[string]string{"x": rand.Text()}}, Version: map[string]string{"version": "custom"}}})
		Expect(getBuild(ctx, id).Status).To(Equal(concourse.StatusSucceeded), mustJSON(evs))
		fin := eventsOf[events.FinishGet](evs)
		Expect(fin).To(HaveLen(1))
		Expect(fin[0].Version).To(Equal(map[string]string{"version": "custom"}))
		var getImage string
		for _, p := range buildPods(ctx, id) {
			if strings.Contains(mustJSON(p.Spec), "/opt/resource/in") {
				getImage = podContainer(&p, "step").Image
			}
		}
		Expect(getImage).To(MatchRegexp(`^` + regexp.QuoteMeta(registry+"/resource-mock@sha256:") + `[0-9a-f]{64}$`))
	})

	It("refuses a custom type whose image does not come from a registry-image-like resource", func(ctx SpecContext) {
		typeCheck := concourse.Plan{ID: "tc", Check: &concourse.CheckPlan{Name: "my-type", Type: "mock", TypeImage: mockType(),
			Source: map[string]any{"force_version": "1"}}}
		id, evs := runPlan(ctx, concourse.Plan{ID: "c", Check: &concourse.CheckPlan{Name: "repo", Type: "my-type",
			TypeImage: concourse.TypeImage{CheckPlan: &typeCheck}, Source: map[string]any{}}})
		Expect(getBuild(ctx, id).Status).To(Equal(concourse.StatusErrored), mustJSON(evs))
		Expect(errorMessages(evs)).To(ContainElement(ContainSubstring(`resource type "my-type": its image comes from a "mock" resource, but only registry-image-like types`)))
		// The type's own check ran, as a step of the build.
		Expect(eventsOf[events.InitializeCheck](evs)).To(ContainElement(HaveField("Name", "my-type")))
	})

	It("resumes a build across a crash of the server: a finished check is not run again, a running get is followed", func(ctx SpecContext) {
		var ids planIDs
		checkID, getID := ids.next(), ids.next()
		source := map[string]any{"versions": []string{"r1"}, "in_delay": "8s", "create_files": map[string]string{"x": rand.Text()}}
		b, err := api().CreateBuild(ctx, "main", concourse.Plan{ID: ids.next(), Do: &concourse.DoPlan{
			{ID: checkID, Check: &concourse.CheckPlan{Name: "repo", Type: "mock", Source: source, TypeImage: mockType()}},
			{ID: getID, Get: &concourse.GetPlan{Name: "repo", Type: "mock", Source: source, TypeImage: mockType(), VersionFrom: &checkID}},
			{ID: ids.next(), Task: &concourse.TaskPlan{Name: "read", Config: taskConfigJSON(busyboxTask + `inputs: [{name: repo}]
run: {path: cat, args: ["repo/version"]}
`)}},
		}})
		Expect(err).NotTo(HaveOccurred())
		// The get's pod runs (the task's may be declared ahead beside it).
		Eventually(func() bool {
			for _, p := range buildPods(ctx, b.ID) {
				if strings.Contains(mustJSON(p.Spec), "/opt/resource/in") {
					return true
				}
			}
			return false
		}).WithTimeout(2 * time.Minute).Should(BeTrue())
		time.Sleep(2 * time.Second)
		Expect(server.Kill()).To(Succeed())
		time.Sleep(time.Second)
		Expect(server.Start(ctx)).To(Succeed())
		evs := buildEvents(ctx, b.ID)
		Expect(getBuild(ctx, b.ID).Status).To(Equal(concourse.StatusSucceeded), mustJSON(evs))
		Expect(logs(evs, events.OriginSourceStdout)).To(Equal("r1"))
		Expect(eventsOf[events.InitializeCheck](evs)).To(HaveLen(1))
		Expect(eventsOf[events.InitializeGet](evs)).To(HaveLen(1), "the get began twice; its log:\n%s\nserver log:\n%s", logs(evs, ""), lastLines(server.Log(), 80))
		Expect(eventsOf[events.FinishGet](evs)).To(HaveLen(1))
		// One pod each for the check, the get and the task: none ran twice.
		// A pod the crashed server declared ahead for the task is dropped
		// by the next one and may still be going.
		var steps []string
		for _, p := range buildPods(ctx, b.ID) {
			if p.DeletionTimestamp == nil {
				steps = append(steps, p.Name+" "+string(p.Status.Phase))
			}
		}
		Expect(steps).To(HaveLen(3), "one pod each for the check, the get and the task; pods: %v\nserver log:\n%s", steps, lastLines(server.Log(), 80))
	})

	It("aborts a build during a get, stopping its pod", func(ctx SpecContext) {
		b, err := api().CreateBuild(ctx, "main", concourse.Plan{ID: "g", Get: &concourse.GetPlan{Name: "repo", Type: "mock", TypeImage: mockType(),
			Source: map[string]any{"in_delay": "10m", "create_files": map[string]string{"x": rand.Text()}}, Version: map[string]string{"version": "slow"}}})
		Expect(err).NotTo(HaveOccurred())
		abortWhenRunning(ctx, b.ID)
	})

	It("aborts a build during a put, stopping its pod", func(ctx SpecContext) {
		b, err := api().CreateBuild(ctx, "main", concourse.Plan{ID: "p", Put: &concourse.PutPlan{Name: "repo", Type: "script",
			TypeImage: concourse.TypeImage{BaseType: "script"}, Source: map[string]any{}}})
		Expect(err).NotTo(HaveOccurred())
		abortWhenRunning(ctx, b.ID)
	})
})

// abortWhenRunning waits until the build's one step pod runs its script,
// aborts the build and sees the build aborted and the script stopped.
func abortWhenRunning(ctx context.Context, id int64) {
	GinkgoHelper()
	Eventually(func() bool {
		pods := buildPods(ctx, id)
		if len(pods) != 1 {
			return false
		}
		for _, c := range pods[0].Status.ContainerStatuses {
			if c.Name == "step" && c.State.Running != nil {
				return true
			}
		}
		return false
	}).WithTimeout(2 * time.Minute).Should(BeTrue())
	// Give the script a moment past its start.
	time.Sleep(2 * time.Second)
	Expect(api().AbortBuild(ctx, id)).To(Succeed())
	Eventually(func() concourse.BuildStatus { return getBuild(ctx, id).Status }).WithTimeout(time.Minute).Should(Equal(concourse.StatusAborted))
	Eventually(func() *corev1.ContainerStateTerminated { return stepTerminated(stepPod(ctx, id)) }).
		WithTimeout(30 * time.Second).ShouldNot(BeNil())
}
