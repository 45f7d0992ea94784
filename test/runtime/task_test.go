package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atcclient"
	"github.com/porter-ci/porter/pkg/cli"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/test/testenv"
)

// lockedBuffer is written by a command while the spec reads it.
type lockedBuffer = testenv.Buffer

// run runs a client command against the server, as a person would type it.
func run(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	out, errOut := lockedBuffer{Tee: GinkgoWriter}, lockedBuffer{Tee: GinkgoWriter}
	code = cli.Main(ctx, append([]string{"--atc", server.url()}, args...), strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

// executeInBackground runs `execute -c task` while the spec goes on; done
// delivers its exit code.
func executeInBackground(ctx context.Context, task string) (stdout, stderr *lockedBuffer, done <-chan int) {
	stdout, stderr = &lockedBuffer{Tee: GinkgoWriter}, &lockedBuffer{Tee: GinkgoWriter}
	codes := make(chan int, 1)
	go func() {
		defer GinkgoRecover()
		codes <- cli.Main(ctx, []string{"--atc", server.url(), "execute", "-c", task}, strings.NewReader(""), stdout, stderr)
	}()
	return stdout, stderr, codes
}

// taskFile writes a task config into a fresh directory and returns its path.
func taskFile(yaml string) string {
	path := filepath.Join(GinkgoT().TempDir(), "task.yml")
	Expect(os.WriteFile(path, []byte(yaml), 0o644)).To(Succeed())
	return path
}

const busyboxTask = `platform: linux
image_resource:
  type: registry-image
  source: {repository: busybox}
`

func client() *atcclient.Client {
	c, err := atcclient.New(server.url())
	Expect(err).NotTo(HaveOccurred())
	return c
}

// latestBuild is the newest build on the server.
func latestBuild(ctx context.Context) api.Build {
	builds, err := client().Builds(ctx)
	Expect(err).NotTo(HaveOccurred())
	Expect(builds).NotTo(BeEmpty())
	return builds[0]
}

// stepPod reads the pod of a build's step.
func stepPod(ctx context.Context, b api.Build) *corev1.Pod {
	Expect(b.Steps).To(HaveLen(1))
	pod, err := admin.CoreV1().Pods(namespace).Get(ctx, b.Steps[0].Pod, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	return pod
}

func container(pod *corev1.Pod, name string) corev1.Container {
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		if c.Name == name {
			return c
		}
	}
	Fail("no container " + name)
	return corev1.Container{}
}

var _ = Describe("task steps on the real cluster", func() {
	It("runs the Kubernetes runtime RFC's hello world", func(ctx SpecContext) {
		code, stdout, stderr := run(ctx, "execute", "-c", taskFile(busyboxTask+`run:
  path: echo
  args: ["Hello, world!"]
`))
		Expect(code).To(Equal(0), stderr)
		Expect(stdout).To(Equal("Hello, world!\n"))

		b := latestBuild(ctx)
		Expect(b.Status).To(Equal(api.StatusSucceeded))
		pod := stepPod(ctx, b)
		Expect(pod.Spec.AutomountServiceAccountToken).To(HaveValue(BeFalse()))
		Expect(pod.Spec.Containers[0].Command[:3]).To(Equal([]string{"/porter/bin/porter", "entrypoint", "--"}))
		// Released, the wrapper exits with the task's code and the native
		// sidecar is stopped by the kubelet: Kubernetes agrees on the result.
		Eventually(func() corev1.PodPhase { return stepPod(ctx, b).Status.Phase }).WithTimeout(time.Minute).Should(Equal(corev1.PodSucceeded))
	})

	It("passes a file from make-a-file to consume-the-file", func(ctx SpecContext) {
		files := GinkgoT().TempDir()
		code, _, stderr := run(ctx, "execute", "-o", "files="+files, "-c", taskFile(busyboxTask+`outputs:
- name: files
run:
  path: sh
  args: ["-exc", "echo 'Hello from make-a-file' > files/created_file"]
`))
		Expect(code).To(Equal(0), stderr)
		Expect(filepath.Join(files, "created_file")).To(BeAnExistingFile())

		code, stdout, stderr := run(ctx, "execute", "-i", "files="+files, "-c", taskFile(busyboxTask+`inputs:
- name: files
run:
  path: cat
  args: ["files/created_file"]
`))
		Expect(code).To(Equal(0), stderr)
		Expect(stdout).To(Equal("Hello from make-a-file\n"))
	})

	It("writes an audit trail a person can read back", func(ctx SpecContext) {
		files := GinkgoT().TempDir()
		code, _, stderr := run(ctx, "execute", "-o", "files="+files, "-c", taskFile(busyboxTask+`outputs:
- name: files
run:
  path: sh
  args: ["-c", "echo audited > files/f"]
`))
		Expect(code).To(Equal(0), stderr)
		b := latestBuild(ctx)
		step := b.Steps[0]
		code, stdout, stderr := run(ctx, "audit", fmt.Sprint(b.ID))
		Expect(code).To(Equal(0), stderr)
		prefix := fmt.Sprintf("builds/%d/", b.ID)
		for _, obj := range []string{"build.json", "steps/" + step.ID + "/action.json", "steps/" + step.ID + "/pod.yaml", "steps/" + step.ID + "/events.jsonl.zst", "steps/" + step.ID + "/result.json"} {
			Expect(stdout).To(ContainSubstring(prefix+obj), "audit lists %s", obj)
		}
		Expect(stdout).To(ContainSubstring(fmt.Sprintf("step %s (one-off): SUCCEEDED, exit status 0", step.ID)))
		Expect(stdout).To(ContainSubstring("pod:      " + step.Pod))
		Expect(stdout).To(ContainSubstring(step.Outputs["files"].Digest))
	})

	It("runs as run.user, from the image's /etc/passwd, in run.dir", func(ctx SpecContext) {
		code, stdout, stderr := run(ctx, "execute", "-c", taskFile(busyboxTask+`run:
  path: sh
  args: ["-c", "echo $(id -u):$(id -g) $HOME $(pwd)"]
  user: nobody
  dir: some/dir
`))
		Expect(code).To(Equal(0), stderr)
		Expect(stdout).To(MatchRegexp(`^65534:65534 /nonexistent /tmp/build/[0-9a-f]+/some/dir\n$`))
	})

	It("applies input_mapping and output_mapping", func(ctx SpecContext) {
		repo := GinkgoT().TempDir()
		Expect(os.WriteFile(filepath.Join(repo, "README"), []byte("mapped\n"), 0o644)).To(Succeed())
		task := busyboxTask + `inputs:
- name: source
outputs:
- name: result
run:
  path: sh
  args: ["-c", "cat source/README; cp source/README result/"]
`
		// The person's artifact "repo" is the task's input "source".
		code, stdout, stderr := run(ctx, "execute", "-i", "repo="+repo, "-m", "source=repo", "-c", taskFile(task))
		Expect(code).To(Equal(0), stderr)
		Expect(stdout).To(Equal("mapped\n"))

		// Through the API: the task's output "result" becomes the build's "built".
		in := latestBuild(ctx).Steps[0]
		Expect(in.Outputs).To(HaveKey("result"))
		b, err := client().CreateBuild(ctx, api.CreateBuildRequest{Task: api.TaskStep{Config: task,
			Inputs:        map[string]api.ArtifactRef{"repo": in.Outputs["result"]},
			InputMapping:  map[string]string{"source": "repo"},
			OutputMapping: map[string]string{"result": "built"},
		}})
		Expect(err).NotTo(HaveOccurred())
		code, stdout, _ = run(ctx, "watch", fmt.Sprint(b.ID))
		Expect(code).To(Equal(0))
		Expect(stdout).To(Equal("mapped\n"))
		done, err := client().Build(ctx, b.ID)
		Expect(err).NotTo(HaveOccurred())
		Expect(done.Steps[0].Outputs).To(HaveKey("built"))
		Expect(done.Steps[0].Outputs).NotTo(HaveKey("result"))
	})

	It("passes params as environment, step params over the config's", func(ctx SpecContext) {
		code, stdout, stderr := run(ctx, "execute", "-p", "GREETING=hey", "-c", taskFile(busyboxTask+`params:
  GREETING: hello
  COUNT: 3
run:
  path: sh
  args: ["-c", "echo $GREETING $COUNT"]
`))
		Expect(code).To(Equal(0), stderr)
		Expect(stdout).To(Equal("hey 3\n"))
	})

	It("puts container_limits on the pod and runs privileged when asked", func(ctx SpecContext) {
		task := taskFile(busyboxTask + `container_limits:
  cpu: 512
  memory: 128MB
run:
  path: sh
  args: ["-c", "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m && echo mounted"]
`)
		code, _, _ := run(ctx, "execute", "-c", task)
		Expect(code).NotTo(Equal(0), "an unprivileged container may not mount")
		code, stdout, stderr := run(ctx, "execute", "--privileged", "-c", task)
		Expect(code).To(Equal(0), stderr)
		Expect(stdout).To(Equal("mounted\n"), "only a privileged container may mount")
		step := container(stepPod(ctx, latestBuild(ctx)), podspec.StepContainerName)
		Expect(step.Resources.Limits.Memory().Value()).To(Equal(int64(128 << 20)))
		Expect(step.Resources.Limits.Cpu().Cmp(resource.MustParse("500m"))).To(Equal(0))
		Expect(step.SecurityContext.Privileged).To(HaveValue(BeTrue()))
	})

	It("surfaces a failing task's exit status through execute", func(ctx SpecContext) {
		code, stdout, _ := run(ctx, "execute", "-c", taskFile(busyboxTask+`run:
  path: sh
  args: ["-c", "echo failing; exit 7"]
`))
		Expect(code).To(Equal(7))
		Expect(stdout).To(Equal("failing\n"))
		b := latestBuild(ctx)
		Expect(b.Status).To(Equal(api.StatusFailed))
		Eventually(func() corev1.PodPhase { return stepPod(ctx, b).Status.Phase }).WithTimeout(time.Minute).Should(Equal(corev1.PodFailed))
		for _, s := range stepPod(ctx, b).Status.ContainerStatuses {
			if s.Name == podspec.StepContainerName {
				Expect(s.State.Terminated.ExitCode).To(Equal(int32(7)))
			}
		}
	})

	It("aborts a running build within seconds, killing the process", func(ctx SpecContext) {
		out, _, done := executeInBackground(ctx, taskFile(busyboxTask+`run:
  path: sh
  args: ["-c", "echo started; sleep 600"]
`))
		Eventually(out.String).WithTimeout(2 * time.Minute).Should(ContainSubstring("started"))
		b := latestBuild(ctx)
		abortedAt := time.Now()
		code, _, stderr := run(ctx, "abort", fmt.Sprint(b.ID))
		Expect(code).To(Equal(0), stderr)
		Eventually(done).WithTimeout(time.Minute).Should(Receive(Equal(3)))
		GinkgoWriter.Printf("abort took %s\n", time.Since(abortedAt))

		// The step's process was killed: its container terminated.
		Eventually(func() *corev1.ContainerStateTerminated {
			pod := stepPod(ctx, b)
			for _, s := range pod.Status.ContainerStatuses {
				if s.Name == podspec.StepContainerName {
					return s.State.Terminated
				}
			}
			return nil
		}).WithTimeout(time.Minute).ShouldNot(BeNil())
		Expect(latestBuild(ctx).Status).To(Equal(api.StatusAborted))
	})

	It("fails a task that exceeds its timeout", func(ctx SpecContext) {
		code, _, stderr := run(ctx, "execute", "--timeout", "3s", "-c", taskFile(busyboxTask+`run:
  path: sleep
  args: ["600"]
`))
		Expect(code).NotTo(Equal(0))
		Expect(stderr).To(ContainSubstring("timeout 3s exceeded"))
		Expect(latestBuild(ctx).Status).To(Equal(api.StatusFailed))
	})

	It("reports an image that does not exist as a clear error", func(ctx SpecContext) {
		code, _, stderr := run(ctx, "execute", "-c", taskFile(`platform: linux
image_resource:
  type: registry-image
  source: {repository: porter.local/does-not-exist}
run: {path: "true"}
`))
		Expect(code).To(Equal(2))
		Expect(stderr).To(ContainSubstring("porter.local/does-not-exist"))
		Expect(stderr).To(MatchRegexp("ErrImagePull|ImagePullBackOff|ErrImageNeverPull"))
		Expect(latestBuild(ctx).Status).To(Equal(api.StatusErrored))
	})

	It("keeps a task cache across two builds", func(ctx SpecContext) {
		task := taskFile(busyboxTask + `caches:
- path: cache
run:
  path: sh
  args: ["-c", "echo run >> cache/runs; wc -l < cache/runs"]
`)
		code, stdout, stderr := run(ctx, "execute", "-c", task)
		Expect(code).To(Equal(0), stderr)
		Expect(strings.TrimSpace(stdout)).To(Equal("1"))
		code, stdout, stderr = run(ctx, "execute", "-c", task)
		Expect(code).To(Equal(0), stderr)
		Expect(strings.TrimSpace(stdout)).To(Equal("2"))
	})

	It("gives step pods no service account token", func(ctx SpecContext) {
		code, stdout, stderr := run(ctx, "execute", "-c", taskFile(busyboxTask+`run:
  path: sh
  args: ["-c", "ls /var/run/secrets/kubernetes.io/serviceaccount 2>&1 || echo no-token"]
`))
		Expect(code).To(Equal(0), stderr)
		Expect(stdout).To(ContainSubstring("no-token"))
		pod := stepPod(ctx, latestBuild(ctx))
		for _, v := range pod.Spec.Volumes {
			Expect(v.Projected).To(BeNil(), "volume %s", v.Name)
		}
	})

	It("refuses a task whose input nobody provides before creating any pod", func(ctx SpecContext) {
		before, err := admin.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		_, err = client().CreateBuild(ctx, api.CreateBuildRequest{Task: api.TaskStep{Config: busyboxTask + `inputs:
- name: repo
run: {path: ls}
`}})
		Expect(err).To(MatchError(ContainSubstring("missing inputs: repo")))
		after, err := admin.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(after.Items).To(HaveLen(len(before.Items)))
	})

	It("serves a finished build's events after a restart of the server", func(ctx SpecContext) {
		code, _, stderr := run(ctx, "execute", "-c", taskFile(busyboxTask+`run:
  path: sh
  args: ["-c", "for i in 1 2 3; do echo line $i; done"]
`))
		Expect(code).To(Equal(0), stderr)
		b := latestBuild(ctx)
		server.stopWith(9) // a crash, not a clean stop
		server.start()
		code, stdout, stderr := run(ctx, "watch", fmt.Sprint(b.ID))
		Expect(code).To(Equal(0), stderr)
		Expect(stdout).To(Equal("line 1\nline 2\nline 3\n"))
		code, stdout, _ = run(ctx, "builds")
		Expect(code).To(Equal(0))
		Expect(stdout).To(ContainSubstring(fmt.Sprint(b.ID)))
	})

	It("removes the pods of builds that ended before a restart once their retention is over", func(ctx SpecContext) {
		code, _, stderr := run(ctx, "execute", "-c", taskFile(busyboxTask+"run: {path: \"true\"}\n"))
		Expect(code).To(Equal(0), stderr)
		b := latestBuild(ctx)
		Expect(stepPod(ctx, b)).NotTo(BeNil())
		// The pod's retention timer dies with the crashed server; the next
		// server finds the pod and removes it.
		server.stopWith(9)
		server.podRetention = time.Second
		server.start()
		DeferCleanup(func() {
			server.stopWith(syscall.SIGTERM)
			server.podRetention = 0
			server.start()
		})
		Eventually(func() error {
			_, err := admin.CoreV1().Pods(namespace).Get(ctx, b.Steps[0].Pod, metav1.GetOptions{})
			return err
		}).WithTimeout(time.Minute).Should(MatchError(ContainSubstring("not found")))
	})

	It("errors a running build whose pod went away while the server was down", func(ctx SpecContext) {
		out, _, done := executeInBackground(ctx, taskFile(busyboxTask+`run:
  path: sh
  args: ["-c", "echo started; sleep 600"]
`))
		Eventually(out.String).WithTimeout(2 * time.Minute).Should(ContainSubstring("started"))
		b := latestBuild(ctx)
		server.stopWith(9)
		grace := int64(0)
		Expect(admin.CoreV1().Pods(namespace).Delete(ctx, b.Steps[0].Pod, metav1.DeleteOptions{GracePeriodSeconds: &grace})).To(Succeed())
		Eventually(func() error {
			_, err := admin.CoreV1().Pods(namespace).Get(ctx, b.Steps[0].Pod, metav1.GetOptions{})
			return err
		}).WithTimeout(time.Minute).Should(MatchError(ContainSubstring("not found")))
		server.start()
		Eventually(done).WithTimeout(time.Minute).Should(Receive(Equal(2)), "execute follows the resumed build to its error")
		code, _, stderr := run(ctx, "watch", fmt.Sprint(b.ID))
		Expect(code).To(Equal(2))
		Expect(stderr).To(ContainSubstring("is gone: it was deleted, or never created, while the ATC was down"))
	})

	It("finishes a running build across a crash of the server, losing no line", func(ctx SpecContext) {
		out, errOut, done := executeInBackground(ctx, taskFile(busyboxTask+`run:
  path: sh
  args: ["-c", "i=1; while [ $i -le 60 ]; do echo line $i; i=$((i+1)); sleep 0.1; done"]
`))
		Eventually(out.String).WithTimeout(2 * time.Minute).Should(ContainSubstring("line 10\n"))
		b := latestBuild(ctx)
		server.stopWith(9)
		time.Sleep(time.Second)
		server.start()
		// execute reconnects to the restarted server and follows the build to its end.
		Eventually(done).WithTimeout(2*time.Minute).Should(Receive(Equal(0)), errOut.String())
		var want strings.Builder
		for i := 1; i <= 60; i++ {
			fmt.Fprintf(&want, "line %d\n", i)
		}
		code, stdout, _ := run(ctx, "watch", fmt.Sprint(b.ID))
		Expect(code).To(Equal(0))
		Expect(stdout).To(Equal(want.String()), "every line once, in order, after the restart")
	})

	It("accepts every pod shape podspec declares (server-side dry run)", func(ctx SpecContext) {
		for _, c := range podspec.GoldenCases() {
			c.Worker.Namespace = namespace
			pod, secret, err := podspec.Build(c.Action, c.Worker, c.Secrets)
			Expect(err).NotTo(HaveOccurred(), c.Name)
			dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
			_, err = admin.CoreV1().Secrets(namespace).Create(ctx, secret, dry)
			Expect(err).NotTo(HaveOccurred(), c.Name)
			_, err = admin.CoreV1().Pods(namespace).Create(ctx, pod, dry)
			Expect(err).NotTo(HaveOccurred(), "%s: %s", c.Name, mustJSON(pod))
		}
	})
})

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
