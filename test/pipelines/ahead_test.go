package pipelines_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/test/testenv"
)

// stepPods are the step pods of build id in the suite's namespace, by
// step name, with the action each declares.
func stepPods(ctx context.Context, id string) map[string]action.Action {
	GinkgoHelper()
	pods, err := s.env.Admin.CoreV1().Pods(s.ns.Name).List(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	out := map[string]action.Action{}
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp != nil {
			continue
		}
		a, ok := podAction(pod)
		if ok && a.Build.ID == id {
			out[a.StepName] = a
		}
	}
	return out
}

// declaredSteps are the actions of a build's step pods as they were
// declared, by step name, from its audit trail: the pods of a finished
// build may be gone already (gc frees kept pods for a step that finds no
// room), their records stay.
func declaredSteps(ctx context.Context, id string) map[string]action.Action {
	GinkgoHelper()
	n, err := strconv.ParseInt(id, 10, 64)
	Expect(err).NotTo(HaveOccurred())
	out := map[string]action.Action{}
	for _, pod := range auditPods(ctx, n) {
		if a, ok := podAction(pod); ok {
			out[a.StepName] = a
		}
	}
	return out
}

// podAction is the action a step pod's sidecar was given.
func podAction(pod corev1.Pod) (action.Action, bool) {
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		for _, e := range c.Env {
			if e.Name == action.EnvVar {
				var a action.Action
				if json.Unmarshal([]byte(e.Value), &a) == nil {
					return a, true
				}
			}
		}
	}
	return action.Action{}, false
}

var _ = Describe("pods declared ahead of their steps", func() {
	It("declares the next tasks' pods gated, and gives them on the go-ahead the inputs made in between", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("ahead")
		marker := "made-" + strings.ToLower(p[len(p)-6:])
		setPipeline(ctx, f, p, fmt.Sprintf(`
jobs:
- name: j
  plan:
  - task: make
    config:
%s  - task: between
    config:
%s  - task: use
    config:
%s  - task: last
    config:
%s`,
			busyboxTask("      ", fmt.Sprintf(`outputs: [{name: out}]
run: {path: sh, args: [-c, 'printf %s > out/v']}`, marker)),
			busyboxTask("      ", `run: {path: "true"}`),
			busyboxTask("      ", `inputs: [{name: out}]
run: {path: sh, args: [-c, 'echo "read $(cat out/v)"']}`),
			busyboxTask("      ", `run: {path: "true"}`)))
		res := succeed(ctx, f, "trigger-job", "-j", p+"/j", "-w")
		Expect(res.Stdout).To(ContainSubstring("read " + marker))
		id := buildID(ctx, f, p, "j")

		// The tasks after the first were declared while it ran: gated,
		// and the input made by `make` named by its artifact, its key
		// given at the go-ahead. The pod of the first was not.
		pods := declaredSteps(ctx, id)
		Expect(pods).To(HaveKey("use"))
		Expect(pods["make"].Gated).To(BeFalse(), "the first task runs at once")
		Expect(pods["use"].Gated).To(BeTrue(), "use's pod was declared ahead")
		Expect(pods["use"].Inputs).To(ConsistOf(And(
			HaveField("Name", "out"), HaveField("From", "out"), HaveField("Key", ""))))
		Expect(pods["last"].Gated).To(BeTrue())

		// The audit trail has what the go-ahead gave: the input's key,
		// under the prefix of the step that made it.
		audit := succeed(ctx, f, "curl", "/api/v1/builds/"+id+"/audit")
		Expect(audit.Stdout).To(MatchRegexp(`"step_name":"use"[^}]*"inputs":\[\{"name":"out","key":"blobs/main/b` + id + `-make-`))
	})

	It("withdraws the pods declared ahead when a step fails: their processes never start, and their audit records say why", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("withdraw")
		setPipeline(ctx, f, p, fmt.Sprintf(`
jobs:
- name: j
  plan:
  - task: fail
    config:
%s  - task: next
    config:
%s  - task: after
    config:
%s`,
			// Long enough that the next pods are up and waiting.
			busyboxTask("      ", `run: {path: sh, args: [-c, 'sleep 4; exit 1']}`),
			busyboxTask("      ", `run: {path: sh, args: [-c, 'echo SHOULD-NOT-RUN']}`),
			busyboxTask("      ", `run: {path: sh, args: [-c, 'echo SHOULD-NOT-RUN']}`)))
		res := run(ctx, f, "trigger-job", "-j", p+"/j", "-w")
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		Expect(res.Stdout).To(ContainSubstring("failed"))
		Expect(res.Stdout).NotTo(ContainSubstring("SHOULD-NOT-RUN"))
		id := buildID(ctx, f, p, "j")

		Eventually(func(g Gomega) {
			pods := stepPods(ctx, id)
			g.Expect(pods).To(HaveKey("fail"))
			g.Expect(pods).NotTo(HaveKey("next"), "the withdrawn pods are deleted")
			g.Expect(pods).NotTo(HaveKey("after"))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		Expect(run(ctx, f, "containers").Stdout).NotTo(ContainSubstring("next"), "nor do they stay in fly containers")

		audit := succeed(ctx, f, "curl", "/api/v1/builds/"+id+"/audit")
		Expect(audit.Stdout).To(ContainSubstring("not run: an earlier step failed"))
	})

	It("declares the first tasks of a later in_parallel, try, attempts and hook, and runs each once", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("shapes")
		echo := func(indent, name, extra string) string {
			return busyboxTask(indent, fmt.Sprintf(`run: {path: sh, args: [-c, 'echo %s-ran%s']}`, name, extra))
		}
		setPipeline(ctx, f, p, fmt.Sprintf(`
jobs:
- name: j
  plan:
  - task: first
    config:
%s  - in_parallel:
    - task: p1
      config:
%s    - task: p2
      config:
%s  - try:
      task: tried
      config:
%s  - task: attempt
    attempts: 2
    config:
%s  - task: hooked
    config:
%s    ensure:
      task: ensured
      config:
%s`,
			busyboxTask("      ", `run: {path: sh, args: [-c, 'sleep 4']}`),
			echo("        ", "p1", ""), echo("        ", "p2", ""), echo("        ", "tried", "; exit 1"),
			echo("      ", "attempt", ""), echo("      ", "hooked", ""), echo("        ", "ensured", "")))
		res := succeed(ctx, f, "trigger-job", "-j", p+"/j", "-w")
		for _, name := range []string{"p1", "p2", "tried", "attempt", "hooked", "ensured"} {
			Expect(regexp.MustCompile(`(?m)^`+name+`-ran$`).FindAllString(res.Stdout, -1)).To(HaveLen(1), "%s ran once\n%s", name, res.Stdout)
		}
		pods := declaredSteps(ctx, buildID(ctx, f, p, "j"))
		for _, name := range []string{"p1", "p2", "tried", "attempt", "hooked"} {
			Expect(pods).To(HaveKey(name))
			Expect(pods[name].Gated).To(BeTrue(), "%s's pod was declared ahead", name)
		}
		Expect(pods["ensured"].Gated).To(BeFalse(), "a hook's own step is not declared ahead: it may not run")
	})

	It("declares a task whose config is a file of an artifact the build already has", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("ahead-file")
		cfg := func(script string) string {
			return `"{platform: linux, image_resource: {type: registry-image, source: {repository: busybox}}, run: {path: sh, args: [-c, '` + script + `']}}"`
		}
		setPipeline(ctx, f, p, `
resources:
- name: r
  type: mock
  source:
    initial_version: v1
    create_files:
      a.yml: `+cfg("sleep 4")+`
      b.yml: `+cfg("echo b-ran")+`
jobs:
- name: j
  plan:
  - get: r
  - task: a
    file: r/a.yml
  - task: b
    file: r/b.yml
`)
		res := succeed(ctx, f, "trigger-job", "-j", p+"/j", "-w")
		Expect(regexp.MustCompile(`(?m)^b-ran$`).FindAllString(res.Stdout, -1)).To(HaveLen(1), res.Stdout)
		pods := declaredSteps(ctx, buildID(ctx, f, p, "j"))
		Expect(pods["a"].Gated).To(BeFalse(), "a's file was read at its turn: the get before it had just made r")
		Expect(pods["b"].Gated).To(BeTrue(), "b's file was read, and its pod declared, while a ran")
	})

	It("withdraws the pods declared within a later in_parallel and try when a step fails", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("withdraw-nested")
		never := busyboxTask("        ", `run: {path: sh, args: [-c, 'echo SHOULD-NOT-RUN']}`)
		setPipeline(ctx, f, p, fmt.Sprintf(`
jobs:
- name: j
  plan:
  - task: fail
    config:
%s  - in_parallel:
    - task: p1
      config:
%s    - task: p2
      config:
%s  - try:
      task: tried
      config:
%s`,
			busyboxTask("      ", `run: {path: sh, args: [-c, 'sleep 4; exit 1']}`), never, never, never))
		res := run(ctx, f, "trigger-job", "-j", p+"/j", "-w")
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		Expect(res.Stdout).NotTo(ContainSubstring("SHOULD-NOT-RUN"))
		id := buildID(ctx, f, p, "j")
		Expect(declaredSteps(ctx, id)).To(HaveKey("fail"))
		Eventually(func(g Gomega) {
			pods := stepPods(ctx, id)
			for _, name := range []string{"p1", "p2", "tried"} {
				g.Expect(pods).NotTo(HaveKey(name), "the withdrawn pods are deleted")
			}
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		audit := succeed(ctx, f, "curl", "/api/v1/builds/"+id+"/audit")
		Expect(strings.Count(audit.Stdout, "not run: an earlier step failed")).To(BeNumerically(">=", 3), audit.Stdout)
	})

	It("withdraws the pods waiting ahead when the build is aborted", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("abort-ahead")
		setPipeline(ctx, f, p, fmt.Sprintf(`
jobs:
- name: j
  plan:
  - task: long
    config:
%s  - task: next
    config:
%s`,
			busyboxTask("      ", `run: {path: sh, args: [-c, 'echo long-started; sleep 120']}`),
			busyboxTask("      ", `run: {path: sh, args: [-c, 'echo SHOULD-NOT-RUN']}`)))
		succeed(ctx, f, "trigger-job", "-j", p+"/j")
		var id string
		Eventually(func(g Gomega) {
			builds := jobBuilds(ctx, f, p, "j")
			g.Expect(builds).NotTo(BeEmpty())
			id = fmt.Sprint(int64(builds[0]["id"].(float64)))
			// next's pod is declared while long runs, and waits.
			pods := stepPods(ctx, id)
			g.Expect(pods).To(HaveKey("long"))
			g.Expect(pods).To(HaveKey("next"))
			g.Expect(pods["next"].Gated).To(BeTrue())
			// Its sidecar is up (and connects at once): told why, it records
			// it. A pod aborted before its sidecar runs is just deleted.
			pod, err := s.env.Admin.CoreV1().Pods(s.ns.Name).Get(ctx, podspec.Name(pods["next"].StepID), metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		time.Sleep(time.Second)
		succeed(ctx, f, "abort-build", "-b", id)
		watch := run(ctx, f, "watch", "-b", id)
		Expect(watch.Stdout).To(ContainSubstring("aborted"))
		Expect(watch.Stdout).NotTo(ContainSubstring("SHOULD-NOT-RUN"))
		Eventually(func(g Gomega) {
			g.Expect(stepPods(ctx, id)).NotTo(HaveKey("next"))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		Expect(succeed(ctx, f, "curl", "/api/v1/builds/"+id+"/audit").Stdout).To(ContainSubstring("not run: the build was aborted"))
	})
})

// declaredActions are the actions of build id's step pods as they were
// created, from its audit trail (a kept pod may be freed already), by
// "<type> <step name>" (a put and its implicit get share the name).
func declaredActions(ctx context.Context, id int64) map[string][]action.Action {
	GinkgoHelper()
	out := map[string][]action.Action{}
	for _, pod := range auditPods(ctx, id) {
		if a, ok := podAction(pod); ok {
			key := string(a.Type) + " " + a.StepName
			out[key] = append(out[key], a)
		}
	}
	return out
}

// stepResult is the result.json of a step's audit record: how its sidecar
// said it ended.
func stepResult(ctx context.Context, buildID int64, stepID string) string {
	GinkgoHelper()
	store := auditStore(ctx)
	prefix, err := testenv.AuditPrefix(ctx, store, buildID)
	Expect(err).NotTo(HaveOccurred())
	rc, _, err := store.Get(ctx, prefix+"steps/"+stepID+"/"+blobstore.ResultObject)
	Expect(err).NotTo(HaveOccurred(), "step %s has no result.json", stepID)
	defer rc.Close()
	body, err := io.ReadAll(rc)
	Expect(err).NotTo(HaveOccurred())
	return string(body)
}

// outputOf is the builds that put version {version: v} of resource r of
// pipeline p (its output_of).
func outputOf(ctx context.Context, f *testenv.Fly, p, r, v string) []int64 {
	GinkgoHelper()
	var versions []struct {
		ID      int64             `json:"id"`
		Version map[string]string `json:"version"`
	}
	Expect(json.Unmarshal([]byte(succeed(ctx, f, "resource-versions", "-r", p+"/"+r, "--json").Stdout), &versions)).To(Succeed())
	for _, rv := range versions {
		if rv.Version["version"] != v {
			continue
		}
		var builds []struct {
			ID int64 `json:"id"`
		}
		body := apiGet(ctx, fmt.Sprintf("/api/v1/teams/main/pipelines/%s/resources/%s/versions/%d/output_of", p, r, rv.ID))
		Expect(json.Unmarshal([]byte(body), &builds)).To(Succeed(), body)
		var ids []int64
		for _, b := range builds {
			ids = append(ids, b.ID)
		}
		return ids
	}
	Fail(fmt.Sprintf("resource %s of %s has no version %s", r, p, v))
	return nil
}

var _ = Describe("puts declared ahead of their turn", func() {
	It("declares a put's pod while the task before it runs, gives it the task's output at the go-ahead, and the put runs once, its version recorded", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("put-ahead")
		marker := "put-" + strings.ToLower(p[len(p)-6:])
		setPipeline(ctx, f, p, fmt.Sprintf(`
resources:
- name: out
  type: mock
jobs:
- name: j
  plan:
  - task: make
    config:
%s  - put: out
    params: {file: built/version}
  - task: after
    config:
%s`,
			// Long enough that the put's pod is up and waiting.
			busyboxTask("      ", fmt.Sprintf(`outputs: [{name: built}]
run: {path: sh, args: [-c, 'sleep 4; printf %s > built/version']}`, marker)),
			busyboxTask("      ", `inputs: [{name: out}]
run: {path: sh, args: [-c, 'echo "after got $(cat out/version)"']}`)))
		res := succeed(ctx, f, "trigger-job", "-j", p+"/j", "-w")
		Expect(regexp.MustCompile(`put version `+marker).FindAllString(res.Stdout, -1)).To(HaveLen(1), "the put ran once\n%s", res.Stdout)
		Expect(res.Stdout).To(ContainSubstring("after got " + marker))
		id := lastBuildID(ctx, f, p, "j")
		Expect(outputOf(ctx, f, p, "out", marker)).To(ConsistOf(id), "the put's version is recorded as the build's output")

		pods := declaredActions(ctx, id)
		Expect(pods["task make"]).To(HaveLen(1))
		Expect(pods["task make"][0].Gated).To(BeFalse(), "the first task runs at once")
		Expect(pods["put out"]).To(HaveLen(1), "one pod for the put")
		put := pods["put out"][0]
		Expect(put.Gated).To(BeTrue(), "the put's pod was declared ahead")
		Expect(put.StdinSecret).To(BeTrue(), "its request (source, params) is in its Secret")
		Expect(put.Inputs).To(ConsistOf(And(HaveField("Name", "built"), HaveField("From", "built"), HaveField("Key", ""))),
			"its input made by the task is named by its artifact, its key given at the go-ahead")
		Expect(pods["get out"]).To(HaveLen(1))
		Expect(pods["get out"][0].Gated).To(BeFalse(), "the put's implicit get fetches the version the put makes: not declared ahead")
		Expect(pods["task after"]).To(HaveLen(1))
		Expect(pods["task after"][0].Gated).To(BeTrue(), "the window goes on past the put")
		// Its audit record: it ran in that pod, with the key the go-ahead
		// gave, of what make stored.
		result := stepResult(ctx, id, put.StepID)
		Expect(result).To(MatchRegexp(`"result":\s*"SUCCEEDED"`))
		Expect(result).To(MatchRegexp(fmt.Sprintf(`"name":\s*"built",\s*"key":\s*"blobs/main/b%d-make-`, id)))
	})

	It("withdraws a put declared ahead when the task before it fails: out never runs, and its audit record says so", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("put-withdraw")
		setPipeline(ctx, f, p, fmt.Sprintf(`
resources:
- name: out
  type: mock
jobs:
- name: j
  plan:
  - task: fail
    config:
%s  - put: out
    params: {version: should-not-put}
`, busyboxTask("      ", `run: {path: sh, args: [-c, 'sleep 4; exit 1']}`)))
		res := run(ctx, f, "trigger-job", "-j", p+"/j", "-w")
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		Expect(res.Stdout).To(ContainSubstring("failed"))
		Expect(res.Stdout).NotTo(ContainSubstring("put version"))
		id := lastBuildID(ctx, f, p, "j")

		pods := declaredActions(ctx, id)
		Expect(pods["put out"]).To(HaveLen(1), "the put's pod was declared while the task ran")
		put := pods["put out"][0]
		Expect(put.Gated).To(BeTrue())
		Eventually(func(g Gomega) {
			g.Expect(stepPods(ctx, fmt.Sprint(id))).NotTo(HaveKey("out"), "the withdrawn pod is deleted")
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		Expect(stepResult(ctx, id, put.StepID)).To(ContainSubstring("not run: an earlier step failed"))
		Expect(succeed(ctx, f, "resource-versions", "-r", p+"/out").Stdout).NotTo(ContainSubstring("should-not-put"), "no version was put")
	})
})

var _ = Describe("gets declared ahead of their turn", func() {
	It("declares a later get's pod while the task before it runs, and the get runs once in it; the next build's get of that version takes the resource cache and declares no pod", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("get-ahead")
		version := "g-" + strings.ToLower(p[len(p)-6:])
		setPipeline(ctx, f, p, fmt.Sprintf(`
resources:
- name: src
  type: mock
  source: {initial_version: %s}
jobs:
- name: j
  plan:
  - task: first
    config:
%s  - get: src
  - task: after
    config:
%s`, version,
			// Long enough that the get's pod is up and waiting.
			busyboxTask("      ", `run: {path: sh, args: [-c, 'sleep 4']}`),
			busyboxTask("      ", `inputs: [{name: src}]
run: {path: sh, args: [-c, 'echo "after got $(cat src/version)"']}`)))
		succeed(ctx, f, "check-resource", "-r", p+"/src")
		res := succeed(ctx, f, "trigger-job", "-j", p+"/j", "-w")
		Expect(res.Stdout).To(ContainSubstring("after got " + version))
		id := lastBuildID(ctx, f, p, "j")
		pods := declaredActions(ctx, id)
		Expect(pods["get src"]).To(HaveLen(1), "one pod for the get")
		get := pods["get src"][0]
		Expect(get.Gated).To(BeTrue(), "the get's pod was declared ahead")
		Expect(get.StdinSecret).To(BeTrue(), "its request (source, version, params) is in its Secret")
		Expect(stepResult(ctx, id, get.StepID)).To(MatchRegexp(`"result":\s*"SUCCEEDED"`))

		// The version is in the resource cache now: the next build's get
		// takes it from there, and no pod is declared for it.
		res = succeed(ctx, f, "trigger-job", "-j", p+"/j", "-w")
		Expect(res.Stdout).To(ContainSubstring("after got " + version))
		next := lastBuildID(ctx, f, p, "j")
		Expect(next).NotTo(Equal(id))
		Expect(declaredActions(ctx, next)).NotTo(HaveKey("get src"), "a cached version needs no pod")
	})

	It("withdraws a get's pod declared ahead when its version reached the resource cache before its turn, and the get takes the cache", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("get-cached")
		version := "c-" + strings.ToLower(p[len(p)-6:])
		// Two branches get the same version of src, each after a task:
		// the quick one's get fills the resource cache while the slow
		// one's waits for its turn in a pod declared ahead.
		setPipeline(ctx, f, p, fmt.Sprintf(`
resources:
- name: src
  type: mock
  source: {initial_version: %s}
jobs:
- name: j
  plan:
  - in_parallel:
    - do:
      - task: quick
        config:
%s      - get: a
        resource: src
    - do:
      - task: slow
        config:
%s      - get: b
        resource: src
      - task: after
        config:
%s`, version,
			busyboxTask("          ", `run: {path: sh, args: [-c, 'sleep 3']}`),
			busyboxTask("          ", `run: {path: sh, args: [-c, 'sleep 12']}`),
			busyboxTask("          ", `inputs: [{name: b}]
run: {path: sh, args: [-c, 'echo "after got $(cat b/version)"']}`)))
		succeed(ctx, f, "check-resource", "-r", p+"/src")
		res := succeed(ctx, f, "trigger-job", "-j", p+"/j", "-w")
		Expect(res.Stdout).To(ContainSubstring("after got " + version))
		id := lastBuildID(ctx, f, p, "j")
		pods := declaredActions(ctx, id)
		Expect(pods["get a"]).To(HaveLen(1))
		Expect(pods["get b"]).To(HaveLen(1), "b's pod was declared while slow ran, before a filled the cache")
		b := pods["get b"][0]
		Expect(b.Gated).To(BeTrue())
		Expect(stepResult(ctx, id, b.StepID)).To(ContainSubstring("not run: its version was in the resource cache at its turn"))
	})
})
