package pipelines_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/test/testenv"
)

// The server's registry-image defaults (testenv's) resolve Docker Hub's
// repositories in the cluster's registry, which is also containerd's
// docker.io mirror: "busybox" is library/busybox there.

// registryOptions talk to the cluster's registry, never through a proxy.
func registryOptions(ctx context.Context) []remote.Option {
	return []remote.Option{remote.WithContext(ctx), remote.WithTransport(&http.Transport{Proxy: nil}),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"})}
}

func registryAddr(ctx context.Context) string {
	GinkgoHelper()
	addr, err := testenv.RegistryAddr(ctx)
	skipIfUnavailable(err)
	return addr
}

// registryPushAddr is where this host pushes to the cluster's registry (pods
// pull from registryAddr, read-only).
func registryPushAddr(ctx context.Context) string {
	GinkgoHelper()
	addr, err := testenv.RegistryPushAddr(ctx)
	skipIfUnavailable(err)
	return addr
}

// tagBusybox points a fresh tag of library/busybox at its image and returns
// the tag and the digest it names: a source no other spec checks.
func tagBusybox(ctx context.Context) (string, string) {
	GinkgoHelper()
	addr := registryAddr(ctx)
	src, err := name.ParseReference(addr+"/library/busybox:latest", name.Insecure)
	Expect(err).NotTo(HaveOccurred())
	desc, err := remote.Get(src, registryOptions(ctx)...)
	Expect(err).NotTo(HaveOccurred(), "busybox in the cluster's registry (hack/images.sh pushes it)")
	tag := "images-" + strings.ToLower(rand.Text()[:8])
	dst, err := name.NewTag(registryPushAddr(ctx)+"/library/busybox:"+tag, name.Insecure)
	Expect(err).NotTo(HaveOccurred())
	Expect(remote.Tag(dst, desc, registryOptions(ctx)...)).To(Succeed())
	return tag, desc.Digest.String()
}

// pushMarkedImage pushes busybox plus a file /porter-marker holding marker
// as a new repository of the cluster's registry; it returns the repository
// and the image's digest.
func pushMarkedImage(ctx context.Context, marker string) (string, string) {
	GinkgoHelper()
	addr := registryAddr(ctx)
	src, err := name.ParseReference(addr+"/library/busybox:latest", name.Insecure)
	Expect(err).NotTo(HaveOccurred())
	base, err := remote.Image(src, registryOptions(ctx)...)
	Expect(err).NotTo(HaveOccurred())
	layer, err := crane.Layer(map[string][]byte{"porter-marker": []byte(marker + "\n")})
	Expect(err).NotTo(HaveOccurred())
	img, err := mutate.AppendLayers(base, layer)
	Expect(err).NotTo(HaveOccurred())
	path := "/porter-test/images-" + strings.ToLower(rand.Text()[:8])
	repository := addr + path
	dst, err := name.NewTag(registryPushAddr(ctx)+path+":latest", name.Insecure)
	Expect(err).NotTo(HaveOccurred())
	Expect(remote.Write(dst, img, registryOptions(ctx)...)).To(Succeed())
	digest, err := img.Digest()
	Expect(err).NotTo(HaveOccurred())
	return repository, digest.String()
}

// buildPods are the step pods of a build as created (from its audit
// trail: a kept pod may be freed already), by step name.
func buildPods(ctx context.Context, buildID int) map[string]corev1.Pod {
	GinkgoHelper()
	byStep := map[string]corev1.Pod{}
	for _, p := range auditPods(ctx, int64(buildID)) {
		byStep[p.Annotations[podspec.AnnotationStepName]] = p
	}
	return byStep
}

func stepImage(p corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		if c.Name == podspec.StepContainerName {
			return c.Image
		}
	}
	return ""
}

// executedBuild is the build id `fly execute` printed.
func executedBuild(res testenv.FlyResult) int {
	GinkgoHelper()
	var id int
	_, err := fmt.Sscanf(res.Stdout, "executing build %d", &id)
	Expect(err).NotTo(HaveOccurred(), res.String())
	return id
}

// buildEvents is a finished build's event stream, as the API sends it.
func buildEvents(ctx context.Context, buildID int) string {
	GinkgoHelper()
	token, err := s.server.Login(ctx, adminUser, s.password)
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/api/v1/builds/%d/events", s.server.URL(), buildID), nil)
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	Expect(resp.StatusCode).To(Equal(http.StatusOK))
	body, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	return string(body)
}

// jobBuildID is the id of a job's build by its name.
func jobBuildID(ctx context.Context, f *testenv.Fly, pipeline, job, buildName string) int {
	GinkgoHelper()
	for _, b := range jobBuilds(ctx, f, pipeline, job) {
		if fmt.Sprint(b["name"]) == buildName {
			id, ok := b["id"].(float64)
			Expect(ok).To(BeTrue(), "build %v has no id", b)
			return int(id)
		}
	}
	Fail(fmt.Sprintf("job %s/%s has no build %s", pipeline, job, buildName))
	return 0
}

var _ = Describe("task images, pinned by digest and pulled by the kubelet", func() {
	It("runs fly execute's image_resource as repository@sha256 from its check, and the second execute from the cache", func(ctx SpecContext) {
		f := newFly(ctx)
		tag, digest := tagBusybox(ctx)
		task := filepath.Join(GinkgoT().TempDir(), "task.yml")
		Expect(os.WriteFile(task, []byte(fmt.Sprintf(`platform: linux
image_resource:
  type: registry-image
  source: {repository: busybox, tag: %s}
  params: {format: rootfs}
run: {path: echo, args: [in busybox]}
`, tag)), 0o644)).To(Succeed())

		first := succeed(ctx, f, "execute", "-c", task)
		Expect(first.Stdout).To(ContainSubstring("in busybox"))
		Expect(first.Stdout).To(ContainSubstring("[WARNING] image_resource params are ignored"))
		firstID := executedBuild(first)
		Expect(stepImage(buildPods(ctx, firstID)["one-off"])).To(Equal("busybox@" + digest))
		// The check ran as a step of the build, announced as Concourse
		// does, in a pod of its own or a check pod.
		events := buildEvents(ctx, firstID)
		Expect(events).To(ContainSubstring(fmt.Sprintf(`"plan":{"check":{"name":"image","type":"registry-image"},"id":"%s/image-check"}`, taskPlanID(events))))
		Expect(s.server.Log()).To(MatchRegexp(`msg="step pod created" worker=\S+ step=b%[1]d-image-|msg="check run in a check pod" build=%[1]d step=image `, firstID))

		second := succeed(ctx, f, "execute", "-c", task)
		Expect(second.Stdout).To(ContainSubstring("in busybox"))
		secondID := executedBuild(second)
		Expect(stepImage(buildPods(ctx, secondID)["one-off"])).To(Equal("busybox@" + digest))
		Expect(buildEvents(ctx, secondID)).NotTo(ContainSubstring(`"event":"image-check"`))
		Expect(s.server.Log()).NotTo(MatchRegexp(`msg="step pod created" worker=\S+ step=b%[1]d-image-|msg="check run in a check pod" build=%[1]d `, secondID), "the second execute ran a check")
		Expect(s.server.Log()).To(MatchRegexp(`msg="task image from the image cache" build=%d `, secondID))
	})

	It("gives the kubelet a registry login as the pod's own pull Secret", func(ctx SpecContext) {
		// The cluster's registry takes any login (it has no auth): this
		// proves the Secret, its owner and the pod's reference, and that the
		// kubelet accepts them; podspec's tests pin the Secret's content.
		f := newFly(ctx)
		tag, digest := tagBusybox(ctx)
		password := rand.Text()
		task := filepath.Join(GinkgoT().TempDir(), "task.yml")
		Expect(os.WriteFile(task, []byte(fmt.Sprintf(`platform: linux
image_resource:
  type: registry-image
  source: {repository: busybox, tag: %s, username: robot, password: %s}
run: {path: echo, args: [pulled with a login]}
`, tag, password)), 0o644)).To(Succeed())
		res := succeed(ctx, f, "execute", "-c", task)
		Expect(res.Stdout).To(ContainSubstring("pulled with a login"))
		pod := buildPods(ctx, executedBuild(res))["one-off"]
		Expect(stepImage(pod)).To(Equal("busybox@" + digest))
		Expect(pod.Spec.ImagePullSecrets).To(HaveLen(1))
		Expect(pod.Spec.ImagePullSecrets[0].Name).To(Equal(pod.Name + "-pull"))
		spec, err := json.Marshal(pod.Spec)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(spec)).NotTo(ContainSubstring(password))

		secret, err := s.env.Admin.CoreV1().Secrets(s.ns.Name).Get(ctx, pod.Name+"-pull", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(secret.Type).To(Equal(corev1.SecretTypeDockerConfigJson))
		Expect(secret.OwnerReferences).To(ConsistOf(HaveField("UID", pod.UID)))
		var config struct {
			Auths map[string]struct{ Username, Password string } `json:"auths"`
		}
		Expect(json.Unmarshal(secret.Data[corev1.DockerConfigJsonKey], &config)).To(Succeed())
		Expect(config.Auths).To(HaveKeyWithValue("https://index.docker.io/v1/", struct{ Username, Password string }{"robot", password}))
	})

	It("runs a task in the image a registry-image get fetched (task.image)", func(ctx SpecContext) {
		f := newFly(ctx)
		marker := rand.Text()
		repository, digest := pushMarkedImage(ctx, marker)
		p := pipelineName("task-image")
		setPipeline(ctx, f, p, fmt.Sprintf(`
resources:
- name: marked
  type: registry-image
  check_every: never
  source: {repository: %s}
jobs:
- name: use-image
  plan:
  - get: marked
  - task: in-the-image
    image: marked
    config:
      platform: linux
      run: {path: cat, args: [/porter-marker]}
`, repository))
		succeed(ctx, f, "check-resource", "-r", p+"/marked")
		res := succeed(ctx, f, "trigger-job", "-j", p+"/use-image", "-w")
		Expect(res.Stdout).To(ContainSubstring(marker))
		id := jobBuildID(ctx, f, p, "use-image", "1")
		Expect(stepImage(buildPods(ctx, id)["in-the-image"])).To(Equal(repository + "@" + digest))
	})

	It("errors a task whose image does not exist, or whose image: is no registry-image get, with a clear message", func(ctx SpecContext) {
		f := newFly(ctx)
		addr := registryAddr(ctx)
		missing := addr + "/porter-test/missing-" + strings.ToLower(rand.Text()[:8])
		p := pipelineName("missing-image")
		setPipeline(ctx, f, p, fmt.Sprintf(`
resources:
- name: src
  type: mock
  check_every: never
  source: {initial_version: v1}
jobs:
- name: missing-repository
  plan:
  - task: t
    config:
      platform: linux
      image_resource: {type: registry-image, source: {repository: %s}}
      run: {path: "true"}
- name: unreachable-registry
  plan:
  - task: t
    config:
      platform: linux
      image_resource: {type: registry-image, source: {repository: 127.0.0.1:1/nothing, tag: v1}}
      run: {path: "true"}
- name: not-an-image
  plan:
  - get: src
  - task: t
    image: src
    config:
      platform: linux
      run: {path: "true"}
`, missing))
		start := time.Now()
		res := run(ctx, f, "trigger-job", "-j", p+"/missing-repository", "-w")
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		Expect(res.Stdout).To(ContainSubstring(fmt.Sprintf(`task "t": image_resource: check %s:latest found no version: the repository or the tag does not exist`, missing)))
		Expect(res.Stdout).To(ContainSubstring("errored"))

		res = run(ctx, f, "trigger-job", "-j", p+"/unreachable-registry", "-w")
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		// The check's own log says why, then the step's error names the image.
		Expect(res.Stdout).To(ContainSubstring("127.0.0.1:1"))
		Expect(res.Stdout).To(ContainSubstring(`task "t": image_resource: check 127.0.0.1:1/nothing:v1: the check failed (exit status 1); its log is above`))
		Expect(res.Stdout).To(ContainSubstring("errored"))
		Expect(time.Since(start)).To(BeNumerically("<", 2*time.Minute), "no step hung")

		succeed(ctx, f, "check-resource", "-r", p+"/src")
		res = run(ctx, f, "trigger-job", "-j", p+"/not-an-image", "-w")
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		Expect(res.Stdout).To(ContainSubstring(`task "t": image artifact "src" comes from a get of type "mock", which gives no image`))
	})
})

// taskPlanID is the origin id of the first initialize-task event.
func taskPlanID(events string) string {
	GinkgoHelper()
	for _, line := range strings.Split(events, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Event string `json:"event"`
			Data  struct {
				Origin struct{ ID string } `json:"origin"`
			} `json:"data"`
		}
		if json.Unmarshal([]byte(data), &ev) == nil && ev.Event == "initialize-task" {
			return ev.Data.Origin.ID
		}
	}
	Fail("no initialize-task event in " + events)
	return ""
}
