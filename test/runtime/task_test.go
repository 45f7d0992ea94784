package runtime_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/atcclient"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/pkg/podspec"
)

// taskFile writes a task config into a fresh directory and returns its path.
func taskFile(yaml string) string {
	GinkgoHelper()
	path := filepath.Join(GinkgoT().TempDir(), "task.yml")
	Expect(os.WriteFile(path, []byte(yaml), 0o644)).To(Succeed())
	return path
}

const busyboxTask = `platform: linux
image_resource:
  type: registry-image
  source: {repository: busybox}
`

var _ = Describe("task steps on the real cluster", func() {
	It("runs the Kubernetes runtime RFC's hello world", func(ctx SpecContext) {
		res := porter(ctx, "execute", "-c", taskFile(busyboxTask+`run:
  path: echo
  args: ["Hello, world!"]
`))
		Expect(res.Code).To(Equal(0), res.String())
		id := buildID(res.Stdout)
		// Rendered as fly renders a build.
		Expect(res.Stdout).To(Equal(fmt.Sprintf("executing build %d at %s/builds/%d\ninitializing\nselected worker: %s\nrunning echo Hello, world!\nHello, world!\nsucceeded\n",
			id, server.URL(), id, worker())))
		Expect(endedStatus(ctx, id)).To(Equal(concourse.StatusSucceeded))

		By("the task's events carry its plan ID as their origin")
		var public struct {
			Schema string         `json:"schema"`
			Plan   concourse.Plan `json:"plan"`
		}
		getJSON(ctx, concourse.BuildAPIURL(id)+"/plan", &public)
		var taskID concourse.PlanID
		public.Plan.Each(func(p *concourse.Plan) {
			if p.Task != nil {
				Expect(taskID).To(BeEmpty(), "one task in the plan")
				Expect(p.Task.Name).To(Equal("one-off"))
				taskID = p.ID
			}
		})
		Expect(taskID).NotTo(BeEmpty(), mustJSON(public))
		evs := buildEvents(ctx, id)
		var origins []string
		var exit *int
		for _, ev := range evs {
			switch e := ev.(type) {
			case events.InitializeTask:
				origins = append(origins, e.Origin.ID)
			case events.SelectedWorker:
				origins = append(origins, e.Origin.ID)
			case events.StartTask:
				origins = append(origins, e.Origin.ID)
				Expect(e.Config.Run.Path).To(Equal("echo"))
			case events.Log:
				origins = append(origins, e.Origin.ID)
			case events.FinishTask:
				origins = append(origins, e.Origin.ID)
				exit = &e.ExitStatus
			}
		}
		Expect(origins).To(HaveLen(5), mustJSON(evs))
		Expect(origins).To(HaveEach(string(taskID)))
		Expect(exit).To(HaveValue(Equal(0)))
		Expect(logs(evs, events.OriginSourceStdout)).To(Equal("Hello, world!\n"))

		By("the pod: no token, the wrapper, and Kubernetes agreeing on the result")
		pod := stepPod(ctx, id)
		Expect(pod.Spec.AutomountServiceAccountToken).To(HaveValue(BeFalse()))
		Expect(pod.Spec.Containers[0].Command[:3]).To(Equal([]string{"/porter/bin/porter", "entrypoint", "--"}))
		// Released, the wrapper exits with the task's code and the native
		// sidecar is stopped by the kubelet: Kubernetes agrees on the result.
		Eventually(func() corev1.PodPhase { return stepPod(ctx, id).Status.Phase }).WithTimeout(time.Minute).Should(Equal(corev1.PodSucceeded))
	})

	It("passes a file from make-a-file to consume-the-file", func(ctx SpecContext) {
		files := GinkgoT().TempDir()
		res := porter(ctx, "execute", "-o", "files="+files, "-c", taskFile(busyboxTask+`outputs:
- name: files
run:
  path: sh
  args: ["-exc", "echo 'Hello from make-a-file' > files/created_file"]
`))
		Expect(res.Code).To(Equal(0), res.String())
		Expect(filepath.Join(files, "created_file")).To(BeAnExistingFile())

		res = porter(ctx, "execute", "-i", "files="+files, "-c", taskFile(busyboxTask+`inputs:
- name: files
run:
  path: cat
  args: ["files/created_file"]
`))
		Expect(res.Code).To(Equal(0), res.String())
		Expect(taskOutput(res.Stdout)).To(Equal("Hello from make-a-file\n"))
	})

	It("passes run.args and params verbatim: $$, $(NAME) and backticks reach the process as written", func(ctx SpecContext) {
		// Kubernetes expands $(VAR) and $$ in a container's args and env;
		// Concourse passes args and params as they are.
		res := porter(ctx, "execute", "-c", taskFile(busyboxTask+`params:
  NAME: expanded
  QUOTED: "$(NAME) costs $$5"
run:
  path: sh
  args: ["-c", "printf '<%s>\\n' \"$@\" \"$QUOTED\"", "sh", "$$", "$(NAME)", "$NAME", "`+"`id -u`"+`"]
`))
		Expect(res.Code).To(Equal(0), res.String())
		Expect(taskOutput(res.Stdout)).To(Equal("<$$>\n<$(NAME)>\n<$NAME>\n<`id -u`>\n<$(NAME) costs $$5>\n"))
	})

	It("writes an audit trail a person can read back", func(ctx SpecContext) {
		files := GinkgoT().TempDir()
		res := porter(ctx, "execute", "-o", "files="+files, "-c", taskFile(busyboxTask+`outputs:
- name: files
run:
  path: sh
  args: ["-c", "echo audited > files/f"]
`))
		Expect(res.Code).To(Equal(0), res.String())
		Expect(os.ReadFile(filepath.Join(files, "f"))).To(Equal([]byte("audited\n")))
		id := buildID(res.Stdout)
		sid := stepID(ctx, id)

		// The output as the server recorded it: the build's artifact, which
		// is a volume whose path is the blob's key.
		arts, err := api().BuildArtifacts(ctx, id)
		Expect(err).NotTo(HaveOccurred())
		var artID int64
		for _, a := range arts {
			if a.Name == "files" {
				artID = a.ID
			}
		}
		Expect(artID).NotTo(BeZero(), mustJSON(arts))
		var vols []concourse.Volume
		getJSON(ctx, "/api/v1/teams/main/volumes", &vols)
		var key string
		for _, v := range vols {
			if v.ID == strconv.FormatInt(artID, 10) {
				key = v.Path
			}
		}
		// Written by the step under its own prefix, never copied.
		Expect(key).To(MatchRegexp(`^blobs/main/[^/]+/[0-9a-f-]{36}\.tar\.zst$`), mustJSON(vols))

		res = porter(ctx, "audit", "-b", fmt.Sprint(id))
		Expect(res.Code).To(Equal(0), res.String())
		// builds/<id>-<creation time>/: a build given an earlier one's ID
		// (its database reset) keeps records of its own.
		prefix := regexp.MustCompile(fmt.Sprintf(`builds/%d-[0-9]{8}T[0-9]{6}\.[0-9]{6}Z/`, id)).FindString(res.Stdout)
		Expect(prefix).NotTo(BeEmpty(), res.String())
		for _, obj := range []string{"build.json", "steps/" + sid + "/action.json", "steps/" + sid + "/pod.yaml", "steps/" + sid + "/events.jsonl.zst", "steps/" + sid + "/result.json"} {
			Expect(res.Stdout).To(ContainSubstring(prefix+obj), "audit lists %s", obj)
		}
		Expect(res.Stdout).To(ContainSubstring(fmt.Sprintf("step %s (one-off): SUCCEEDED, exit status 0", sid)))
		Expect(res.Stdout).To(ContainSubstring("pod:      " + podspec.Name(sid)))
		Expect(res.Stdout).To(MatchRegexp(`files: ` + key + ` blake3:[0-9a-f]{64}`))
	})

	It("runs as run.user, from the image's /etc/passwd, in run.dir", func(ctx SpecContext) {
		res := porter(ctx, "execute", "-c", taskFile(busyboxTask+`run:
  path: sh
  args: ["-c", "echo $(id -u):$(id -g) $HOME $(pwd)"]
  user: nobody
  dir: some/dir
`))
		Expect(res.Code).To(Equal(0), res.String())
		Expect(taskOutput(res.Stdout)).To(MatchRegexp(`^65534:65534 /nonexistent /tmp/build/[0-9a-f]+/some/dir\n$`))
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
		res := porter(ctx, "execute", "-i", "repo="+repo, "-m", "source=repo", "-c", taskFile(task))
		Expect(res.Code).To(Equal(0), res.String())
		Expect(taskOutput(res.Stdout)).To(Equal("mapped\n"))

		// Through the API (the CLI has no flag for it): the task's output
		// "result" becomes the build's "built", which the build keeps (an
		// artifact_output of a name no step produced errors the build).
		c := api()
		art, err := c.UploadArtifact(ctx, "", repo, atcclient.UploadOptions{})
		Expect(err).NotTo(HaveOccurred())
		plan, _ := oneOff(concourse.TaskPlan{Config: taskConfigJSON(task),
			InputMapping:  map[string]string{"source": "repo"},
			OutputMapping: map[string]string{"result": "built"},
		}, map[string]int64{"repo": art.ID}, "built")
		b, err := c.CreateBuild(ctx, "", plan)
		Expect(err).NotTo(HaveOccurred())
		res = porter(ctx, "watch", "-b", fmt.Sprint(b.ID))
		Expect(res.Code).To(Equal(0), res.String())
		Expect(taskOutput(res.Stdout)).To(Equal("mapped\n"))
		arts, err := c.BuildArtifacts(ctx, b.ID)
		Expect(err).NotTo(HaveOccurred())
		Expect(endedStatus(ctx, b.ID)).To(Equal(concourse.StatusSucceeded))
		names := map[string]int64{}
		for _, a := range arts {
			names[a.Name] = a.ID
		}
		Expect(names).To(HaveKey("built"), mustJSON(arts))
		Expect(names).NotTo(HaveKey("result"))
		built := GinkgoT().TempDir()
		Expect(c.DownloadArtifact(ctx, "", names["built"], built, nil)).To(Succeed())
		Expect(os.ReadFile(filepath.Join(built, "README"))).To(Equal([]byte("mapped\n")))
	})

	It("passes params as environment: the person's environment over the config's, the step's over both", func(ctx SpecContext) {
		task := busyboxTask + `params:
  GREETING: hello
  COUNT: 3
run:
  path: sh
  args: ["-c", "echo $GREETING $COUNT"]
`
		// As with fly, a param set in the environment takes its value.
		res := porterWith(ctx, cliEnv{Env: map[string]string{"GREETING": "hey"}}, "execute", "-c", taskFile(task))
		Expect(res.Code).To(Equal(0), res.String())
		Expect(taskOutput(res.Stdout)).To(Equal("hey 3\n"))

		// A pipeline's task step sets params over its config's.
		plan, _ := oneOff(concourse.TaskPlan{Config: taskConfigJSON(task), Params: map[string]any{"GREETING": "hi"}}, nil)
		b, err := api().CreateBuild(ctx, "", plan)
		Expect(err).NotTo(HaveOccurred())
		Expect(logs(buildEvents(ctx, b.ID), events.OriginSourceStdout)).To(Equal("hi 3\n"))
		Expect(endedStatus(ctx, b.ID)).To(Equal(concourse.StatusSucceeded))
	})

	It("puts container_limits on the pod and runs privileged when asked", func(ctx SpecContext) {
		task := taskFile(busyboxTask + `container_limits:
  cpu: 512
  memory: 128MB
run:
  path: sh
  args: ["-c", "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m && echo mounted"]
`)
		res := porter(ctx, "execute", "-c", task)
		Expect(res.Code).NotTo(Equal(0), "an unprivileged container may not mount: %s", res)
		Expect(taskOutput(res.Stdout)).NotTo(ContainSubstring("mounted"))
		res = porter(ctx, "execute", "-p", "-c", task)
		Expect(res.Code).To(Equal(0), res.String())
		Expect(taskOutput(res.Stdout)).To(Equal("mounted\n"), "only a privileged container may mount")
		step := podContainer(stepPod(ctx, buildID(res.Stdout)), podspec.StepContainerName)
		Expect(step.Resources.Limits.Memory().Value()).To(Equal(int64(128 << 20)))
		Expect(step.Resources.Requests.Cpu().Cmp(resource.MustParse("500m"))).To(Equal(0))
		Expect(step.Resources.Limits).NotTo(HaveKey(corev1.ResourceCPU), "cpu shares are a request (see podhard_test.go)")
		Expect(step.SecurityContext.Privileged).To(HaveValue(BeTrue()))
	})

	It("surfaces a failing task's exit status through execute", func(ctx SpecContext) {
		res := porter(ctx, "execute", "-c", taskFile(busyboxTask+`run:
  path: sh
  args: ["-c", "echo failing; exit 7"]
`))
		Expect(res.Code).To(Equal(7), res.String())
		Expect(taskOutput(res.Stdout)).To(Equal("failing\n"))
		Expect(res.Stdout).To(HaveSuffix("\nfailed\n"))
		id := buildID(res.Stdout)
		Expect(endedStatus(ctx, id)).To(Equal(concourse.StatusFailed))
		Eventually(func() corev1.PodPhase { return stepPod(ctx, id).Status.Phase }).WithTimeout(time.Minute).Should(Equal(corev1.PodFailed))
		Expect(stepTerminated(stepPod(ctx, id))).To(HaveField("ExitCode", int32(7)))
	})

	It("aborts a running build within seconds, killing the process", func(ctx SpecContext) {
		out, errOut, done := porterInBackground(ctx, "execute", "-c", taskFile(busyboxTask+`run:
  path: sh
  args: ["-c", "echo started; sleep 600"]
`))
		Eventually(out.String).WithTimeout(2 * time.Minute).Should(ContainSubstring("started\n"))
		id := buildID(out.String())
		abortedAt := time.Now()
		res := porter(ctx, "abort", "-b", fmt.Sprint(id))
		Expect(res.Code).To(Equal(0), res.String())
		Expect(res.Stdout).To(Equal("build successfully aborted\n"))
		// Measured on the local cluster: well under a second from the abort
		// to execute's end (TERM reaches the process group at once); the
		// bound leaves room for a loaded machine.
		const abortBound = 10 * time.Second
		Eventually(done).WithTimeout(abortBound).Should(Receive(Equal(3)), errOut.String)
		took := time.Since(abortedAt)
		GinkgoWriter.Printf("abort took %s\n", took)
		Expect(took).To(BeNumerically("<", abortBound))
		Expect(out.String()).To(HaveSuffix("\naborted\n"))

		// The step's process was killed: its container terminated (TERM,
		// then KILL after the wrapper's grace period).
		Eventually(func() *corev1.ContainerStateTerminated { return stepTerminated(stepPod(ctx, id)) }).
			WithTimeout(30 * time.Second).ShouldNot(BeNil())
		Expect(endedStatus(ctx, id)).To(Equal(concourse.StatusAborted))
	})

	It("fails a task that exceeds its timeout", func(ctx SpecContext) {
		res := porter(ctx, "execute", "--timeout", "3s", "-c", taskFile(busyboxTask+`run:
  path: sleep
  args: ["600"]
`))
		Expect(res.Code).NotTo(Equal(0), res.String())
		Expect(res.Stdout).To(ContainSubstring("timeout 3s exceeded"))
		Expect(endedStatus(ctx, buildID(res.Stdout))).To(Equal(concourse.StatusFailed))
	})

	It("reports an image that does not exist as a clear error", func(ctx SpecContext) {
		// Pinned by its version: no check, the kubelet finds out.
		res := porter(ctx, "execute", "-c", taskFile(`platform: linux
image_resource:
  type: registry-image
  source: {repository: porter.local/does-not-exist}
  version: {digest: "sha256:0000000000000000000000000000000000000000000000000000000000000000"}
run: {path: "true"}
`))
		Expect(res.Code).To(Equal(2), res.String())
		// The build's error event, which execute prints as fly does.
		Expect(res.Stdout).To(ContainSubstring("porter.local/does-not-exist"))
		Expect(res.Stdout).To(MatchRegexp("ErrImagePull|ImagePullBackOff|ErrImageNeverPull"))
		Expect(res.Stdout).To(HaveSuffix("\nerrored\n"))
		Expect(endedStatus(ctx, buildID(res.Stdout))).To(Equal(concourse.StatusErrored))
	})

	It("keeps a task cache across two builds", func(ctx SpecContext) {
		task := taskFile(busyboxTask + `caches:
- path: cache
run:
  path: sh
  args: ["-c", "echo run >> cache/runs; wc -l < cache/runs"]
`)
		res := porter(ctx, "execute", "-c", task)
		Expect(res.Code).To(Equal(0), res.String())
		Expect(strings.TrimSpace(taskOutput(res.Stdout))).To(Equal("1"))
		res = porter(ctx, "execute", "-c", task)
		Expect(res.Code).To(Equal(0), res.String())
		Expect(strings.TrimSpace(taskOutput(res.Stdout))).To(Equal("2"))
	})

	It("gives step pods no service account token", func(ctx SpecContext) {
		res := porter(ctx, "execute", "-c", taskFile(busyboxTask+`run:
  path: sh
  args: ["-c", "ls /var/run/secrets/kubernetes.io/serviceaccount 2>&1 || echo no-token"]
`))
		Expect(res.Code).To(Equal(0), res.String())
		Expect(taskOutput(res.Stdout)).To(ContainSubstring("no-token"))
		pod := stepPod(ctx, buildID(res.Stdout))
		for _, v := range pod.Spec.Volumes {
			Expect(v.Projected).To(BeNil(), "volume %s", v.Name)
		}
	})

	It("refuses a task whose input nobody provides before creating any pod", func(ctx SpecContext) {
		task := busyboxTask + `inputs:
- name: repo
run: {path: ls}
`
		before := latestBuildID(ctx)

		By("execute, as fly, before uploading anything or creating a build")
		res := porter(ctx, "execute", "-c", taskFile(task))
		Expect(res.Code).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("missing required input `repo`"))
		Expect(latestBuildID(ctx)).To(Equal(before))

		By("the API, for an uploaded input that does not exist: no build")
		plan, _ := oneOff(concourse.TaskPlan{Config: taskConfigJSON(task)}, map[string]int64{"repo": 999999999})
		_, err := api().CreateBuild(ctx, "", plan)
		Expect(err).To(MatchError(ContainSubstring(`400 Bad Request: input "repo": artifact 999999999 does not exist in team "main"`)))
		Expect(latestBuildID(ctx)).To(Equal(before))

		By("the API, for an input no step provides: the build errors before any pod, as Concourse's does")
		plan, taskID := oneOff(concourse.TaskPlan{Config: taskConfigJSON(task)}, nil)
		b, err := api().CreateBuild(ctx, "", plan)
		Expect(err).NotTo(HaveOccurred())
		evs := buildEvents(ctx, b.ID)
		var origins []string
		for _, ev := range evs {
			if e, ok := ev.(events.Error); ok && e.Message == "missing inputs: repo" {
				origins = append(origins, e.Origin.ID)
			}
		}
		Expect(origins).To(Equal([]string{string(taskID)}), "one error, from the task: %s", mustJSON(evs))
		Expect(endedStatus(ctx, b.ID)).To(Equal(concourse.StatusErrored))
		Expect(buildPods(ctx, b.ID)).To(BeEmpty())
		cs, err := api().Containers(ctx, "", atcclient.ContainerFilter{BuildID: b.ID})
		Expect(err).NotTo(HaveOccurred())
		Expect(cs).To(BeEmpty())
	})

	It("serves a finished build's events after a crash of the server", func(ctx SpecContext) {
		res := porter(ctx, "execute", "-c", taskFile(busyboxTask+`run:
  path: sh
  args: ["-c", "for i in 1 2 3; do echo line $i; done"]
`))
		Expect(res.Code).To(Equal(0), res.String())
		id := buildID(res.Stdout)
		awaitEnded(ctx, id)
		Expect(server.Kill()).To(Succeed()) // a crash, not a clean stop
		Expect(server.Start(ctx)).To(Succeed())
		// The login outlives the server.
		res = porter(ctx, "watch", "-b", fmt.Sprint(id))
		Expect(res.Code).To(Equal(0), res.String())
		Expect(taskOutput(res.Stdout)).To(Equal("line 1\nline 2\nline 3\n"))
		res = porter(ctx, "builds")
		Expect(res.Code).To(Equal(0), res.String())
		Expect(res.Stdout).To(MatchRegexp(`(?m)^%d +%d +succeeded +`, id, id))
	})

	It("removes the pods of builds that ended before a crash once their retention is over", func(ctx SpecContext) {
		res := porter(ctx, "execute", "-c", taskFile(busyboxTask+"run: {path: \"true\"}\n"))
		Expect(res.Code).To(Equal(0), res.String())
		id := buildID(res.Stdout)
		Expect(buildPods(ctx, id)).To(HaveLen(1))
		awaitEnded(ctx, id)
		// The pod's retention timer dies with the crashed server; the next
		// server finds the pod and removes it.
		Expect(server.Kill()).To(Succeed())
		server.Config.PodRetention = time.Second
		Expect(server.Start(ctx)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			Expect(server.Stop()).To(Succeed())
			server.Config.PodRetention = 0
			Expect(server.Start(ctx)).To(Succeed())
		})
		Eventually(func() []corev1.Pod { return buildPods(ctx, id) }).WithTimeout(time.Minute).Should(BeEmpty())
	})

	It("starts a running step again in a new pod when its pod went away while the server was down", func(ctx SpecContext) {
		out, errOut, done := porterInBackground(ctx, "execute", "-c", taskFile(busyboxTask+`run:
  path: sh
  args: ["-c", "echo started; sleep 3; echo fin''ished"]
`))
		Eventually(out.String).WithTimeout(2 * time.Minute).Should(ContainSubstring("started\n"))
		id := buildID(out.String())
		Expect(server.Kill()).To(Succeed())
		deletePod(ctx, id)
		Expect(server.Start(ctx)).To(Succeed())
		Eventually(done).WithTimeout(time.Minute).Should(Receive(Equal(0)), "execute follows the resumed build to its end: %s", errOut)
		const gone = "is gone: it was deleted, or never created, while the ATC was down; starting the step again in a new pod (attempt 2 of 3)"
		Expect(out.String()).To(ContainSubstring(gone))
		Expect(strings.Count(out.String(), "finished\n")).To(Equal(1), out.String())
		res := porter(ctx, "watch", "-b", fmt.Sprint(id))
		Expect(res.Code).To(Equal(0), res.String())
		Expect(res.Stdout).To(ContainSubstring(gone))
		Expect(endedStatus(ctx, id)).To(Equal(concourse.StatusSucceeded))
	})

	It("drops the pods a crashed server declared ahead, declares them again, and runs each step once", func(ctx SpecContext) {
		var ids planIDs
		long := concourse.Plan{ID: ids.next(), Task: &concourse.TaskPlan{Name: "long",
			Config: taskConfigJSON(busyboxTask + "run: {path: sh, args: [-c, 'echo started; sleep 8']}\n")}}
		next := concourse.Plan{ID: ids.next(), Task: &concourse.TaskPlan{Name: "next",
			Config: taskConfigJSON(busyboxTask + "run: {path: echo, args: [next-ran]}\n")}}
		b, err := api().CreateBuild(ctx, "", concourse.Plan{ID: ids.next(), Do: &concourse.DoPlan{long, next}})
		Expect(err).NotTo(HaveOccurred())
		// next's pod is declared, gated, while long runs.
		gated := func() []string {
			var names []string
			for _, pod := range buildPods(ctx, b.ID) {
				for _, e := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
					for _, v := range e.Env {
						if v.Name == action.EnvVar && strings.Contains(v.Value, `"step_name":"next"`) && strings.Contains(v.Value, `"gated":true`) {
							names = append(names, pod.Name)
						}
					}
				}
			}
			return names
		}
		Eventually(gated).WithTimeout(time.Minute).ShouldNot(BeEmpty())
		inherited := gated()[0]
		Expect(server.Kill()).To(Succeed()) // a crash: the pod declared ahead is left behind
		Expect(server.Start(ctx)).To(Succeed())
		awaitEnded(ctx, b.ID)
		Expect(endedStatus(ctx, b.ID)).To(Equal(concourse.StatusSucceeded))
		Expect(logCount(ctx, b.ID, "next-ran")).To(Equal(1), "next ran once")
		// The next server deleted the pod it inherited, and declared its own.
		Eventually(func() []string { return buildPodNames(ctx, b.ID) }).WithTimeout(30 * time.Second).ShouldNot(ContainElement(inherited))
	})

	// goAheadAgain: a server stops after saving that step next runs in its
	// pod declared ahead, before the go-ahead reached the sidecar; the next
	// server gives it again, and next prints ran once.
	goAheadAgain := func(ctx context.Context, ids *planIDs, next concourse.Plan, ran string) {
		GinkgoHelper()
		// long outlasts next's pod start by far, even on a loaded machine:
		// the server must stop while next still waits for its turn.
		long := concourse.Plan{ID: ids.next(), Task: &concourse.TaskPlan{Name: "long",
			Config: taskConfigJSON(busyboxTask + "run: {path: sh, args: [-c, 'sleep 15']}\n")}}
		b, err := api().CreateBuild(ctx, "", concourse.Plan{ID: ids.next(), Do: &concourse.DoPlan{long, next}})
		Expect(err).NotTo(HaveOccurred())
		var declared buildstate.AheadPod
		Eventually(func() bool {
			st := buildState(ctx, b.ID)
			var ok bool
			if declared, ok = st.Ahead[next.ID]; !ok {
				return false
			}
			for _, pod := range buildPods(ctx, b.ID) {
				if pod.Name == podspec.Name(declared.StepID) && pod.Status.Phase == corev1.PodRunning {
					return true
				}
			}
			return false
		}).WithTimeout(time.Minute).Should(BeTrue(), "next's pod is declared ahead and runs, gated")
		Expect(server.Kill()).To(Succeed())
		// What a server leaves when it stops between saving that the step
		// runs in its declared pod and the go-ahead reaching the sidecar.
		st := buildState(ctx, b.ID)
		Expect(st.Ahead).To(HaveKey(next.ID), "next still waited for its turn when the server stopped")
		Expect(st.Steps).NotTo(HaveKey(next.ID), "next still waited for its turn when the server stopped")
		st.Steps[next.ID] = &buildstate.StepRecord{Name: "next", Type: next.Kind(), StepID: declared.StepID,
			Worker: declared.Worker, Container: declared.Container, Status: concourse.StatusStarted, Gated: true}
		delete(st.Ahead, next.ID)
		saveBuildState(ctx, b.ID, st)
		Expect(server.Start(ctx)).To(Succeed())

		awaitEnded(ctx, b.ID)
		Expect(endedStatus(ctx, b.ID)).To(Equal(concourse.StatusSucceeded))
		Expect(logCount(ctx, b.ID, ran)).To(Equal(1), "next ran once")
		// Read from the audit trail, not the kept pods: gc may free those
		// under load once the build has ended.
		res := porter(ctx, "audit", "-b", fmt.Sprint(b.ID))
		Expect(res.Code).To(Equal(0), res.String())
		Expect(res.Stdout).To(ContainSubstring(fmt.Sprintf("step %s (next): SUCCEEDED", declared.StepID)), "next ran in the pod declared ahead")
	}

	It("gives a pod declared ahead its go-ahead again when the server stopped after saving its task's start", func(ctx SpecContext) {
		var ids planIDs
		goAheadAgain(ctx, &ids, concourse.Plan{ID: ids.next(), Task: &concourse.TaskPlan{Name: "next",
			Config: taskConfigJSON(busyboxTask + "run: {path: echo, args: [next-ran]}\n")}}, "next-ran")
	})

	It("gives a put's pod declared ahead its go-ahead again when the server stopped after saving the put's start", func(ctx SpecContext) {
		var ids planIDs
		goAheadAgain(ctx, &ids, concourse.Plan{ID: ids.next(), Put: &concourse.PutPlan{Name: "next", Type: "mock",
			TypeImage: concourse.TypeImage{BaseType: "mock"}, Params: map[string]any{"version": "put-again"}}}, "put version put-again")
	})

	It("finishes a running build across a crash of the server, losing no line", func(ctx SpecContext) {
		out, errOut, done := porterInBackground(ctx, "execute", "-c", taskFile(busyboxTask+`run:
  path: sh
  args: ["-c", "i=1; while [ $i -le 60 ]; do echo line $i; i=$((i+1)); sleep 0.1; done"]
`))
		Eventually(out.String).WithTimeout(2 * time.Minute).Should(ContainSubstring("line 10\n"))
		id := buildID(out.String())
		Expect(server.Kill()).To(Succeed())
		time.Sleep(time.Second)
		Expect(server.Start(ctx)).To(Succeed())
		// execute reconnects to the restarted server and follows the build to its end.
		Eventually(done).WithTimeout(2*time.Minute).Should(Receive(Equal(0)), errOut.String)
		var want strings.Builder
		for i := 1; i <= 60; i++ {
			fmt.Fprintf(&want, "line %d\n", i)
		}
		Expect(taskOutput(out.String())).To(Equal(want.String()), "execute saw every line once, in order, across the crash")
		res := porter(ctx, "watch", "-b", fmt.Sprint(id))
		Expect(res.Code).To(Equal(0), res.String())
		Expect(taskOutput(res.Stdout)).To(Equal(want.String()), "every line once, in order, after the restart")
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

	// The Windows shapes above pass only if they hold no Linux-only field:
	// this proves the API server checks that for os.name windows.
	It("refuses a Linux-only field in the Windows pod shape (server-side dry run)", func(ctx SpecContext) {
		var windows *podspec.Case
		for _, c := range podspec.GoldenCases() {
			if c.Name == "windows" {
				windows = &c
			}
		}
		Expect(windows).NotTo(BeNil())
		windows.Worker.Namespace = namespace
		pod, _, err := podspec.Build(windows.Action, windows.Worker, windows.Secrets)
		Expect(err).NotTo(HaveOccurred())
		pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptrTo(int64(1000))}
		_, err = admin.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
		Expect(err.Error()).To(ContainSubstring("runAsUser"))
	})
})

func ptrTo[T any](v T) *T { return &v }
