package pipelines_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/test/testenv"
)

// newRepo creates a repository of its own in the suite's git server with one
// commit on main (README = readme) and returns its name and that commit.
func newRepo(ctx context.Context, base, readme string) (name, sha string) {
	GinkgoHelper()
	name = pipelineName(base)
	Expect(s.git.CreateRepo(ctx, name, "main")).To(Succeed())
	return name, commit(ctx, name, "main", readme)
}

// commit commits README = readme on branch of repo.
func commit(ctx context.Context, repo, branch, readme string) string {
	GinkgoHelper()
	sha, err := s.git.Commit(ctx, repo, branch, map[string]string{"README": readme + "\n"}, "README: "+readme)
	Expect(err).NotTo(HaveOccurred())
	return sha
}

// gitResource is a `git` resource on repo's branch, checked every second.
func gitResource(name, repo, branch string) string {
	return fmt.Sprintf(`- name: %s
  type: git
  check_every: 1s
  source: {uri: %q, branch: %s}
`, name, s.git.URL(repo), branch)
}

// waitForVersion waits until resource has a version whose ref is sha.
func waitForVersion(ctx context.Context, f *testenv.Fly, pipeline, resource, sha string) {
	GinkgoHelper()
	Eventually(ctx, func() string {
		return run(ctx, f, "resource-versions", "-r", pipeline+"/"+resource).Stdout
	}).WithTimeout(120*time.Second).WithPolling(500*time.Millisecond).Should(ContainSubstring(sha), "resource %s/%s never had version %s", pipeline, resource, sha)
}

// waitForBuildNamed waits until build name of job has status and returns
// its numeric ID (the pods' build label).
func waitForBuildNamed(ctx context.Context, f *testenv.Fly, pipeline, job, name, status string, timeout time.Duration) string {
	GinkgoHelper()
	var id string
	Eventually(ctx, func() string {
		for _, b := range jobBuilds(ctx, f, pipeline, job) {
			if fmt.Sprint(b["name"]) == name {
				id = fmt.Sprint(b["id"])
				return fmt.Sprint(b["status"])
			}
		}
		return "no build " + name
	}).WithTimeout(timeout).WithPolling(300*time.Millisecond).Should(Equal(status), "build %s/%s #%s", pipeline, job, name)
	return id
}

// podsOfBuild are the step pods of build (by its ID), through the admin client.
func podsOfBuild(ctx context.Context, buildID string) []corev1.Pod {
	GinkgoHelper()
	pods, err := s.env.Admin.CoreV1().Pods(s.ns.Name).List(ctx, metav1.ListOptions{LabelSelector: "porter.dev/build=" + buildID})
	Expect(err).NotTo(HaveOccurred())
	return pods.Items
}

// waitForRunningPod waits until a pod of build whose name has part runs.
func waitForRunningPod(ctx context.Context, buildID, part string) {
	GinkgoHelper()
	Eventually(ctx, func() []string {
		var running []string
		for _, p := range podsOfBuild(ctx, buildID) {
			if strings.Contains(p.Name, part) && p.Status.Phase == corev1.PodRunning {
				running = append(running, p.Name)
			}
		}
		return running
	}).WithTimeout(120*time.Second).WithPolling(300*time.Millisecond).ShouldNot(BeEmpty(), "no running %s pod of build %s", part, buildID)
}

// hangingServer accepts TCP connections on every interface and never
// answers: a git remote whose push hangs.
type hangingServer struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	done  chan struct{}
}

func newHangingServer() *hangingServer {
	GinkgoHelper()
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	Expect(err).NotTo(HaveOccurred())
	h := &hangingServer{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.conns = append(h.conns, c)
			h.mu.Unlock()
		}
	}()
	DeferCleanup(h.close)
	return h
}

func (h *hangingServer) url() string {
	return fmt.Sprintf("http://%s/hang.git", net.JoinHostPort(s.env.Cluster["PORTER_CLUSTER_NODE_IP"], fmt.Sprint(h.ln.Addr().(*net.TCPAddr).Port)))
}

func (h *hangingServer) close() error {
	err := h.ln.Close()
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		err = errors.Join(err, c.Close())
	}
	return err
}

// abortBuild aborts build name of job (running) and expects it aborted
// and none of its pods left running.
func abortBuild(ctx context.Context, f *testenv.Fly, pipeline, job, name, buildID string) {
	GinkgoHelper()
	res := succeed(ctx, f, "abort-build", "-j", pipeline+"/"+job, "-b", name)
	Expect(res.Stdout).To(ContainSubstring("build successfully aborted"))
	waitForBuildNamed(ctx, f, pipeline, job, name, "aborted", 90*time.Second)
	Eventually(ctx, func() []string {
		var running []string
		for _, p := range podsOfBuild(ctx, buildID) {
			if p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodPending {
				running = append(running, p.Name)
			}
		}
		return running
	}).WithTimeout(90*time.Second).WithPolling(500*time.Millisecond).Should(BeEmpty(), "pods of the aborted build %s still run", buildID)
}

// expectPodsGone waits until the builds have no pod at all (the server
// removes a finished step's pod after its pod retention, a minute here).
func expectPodsGone(ctx context.Context, buildIDs ...string) {
	GinkgoHelper()
	Eventually(ctx, func() []string {
		var left []string
		for _, id := range buildIDs {
			for _, p := range podsOfBuild(ctx, id) {
				left = append(left, fmt.Sprintf("%s (%s)", p.Name, p.Status.Phase))
			}
		}
		return left
	}).WithTimeout(2*time.Minute).WithPolling(time.Second).Should(BeEmpty(), "pods of the aborted builds %v are left", buildIDs)
}

var _ = Describe("a booklit-style pipeline on a git repository", func() {
	It("triggers the job on a new commit, and shows the check's and the get's logs", func(ctx SpecContext) {
		f := newFly(ctx)
		repo, first := newRepo(ctx, "booklit", "first draft")
		p := pipelineName("booklit")
		setPipeline(ctx, f, p, "resources:\n"+gitResource("booklit", repo, "main")+`
jobs:
- name: unit
  plan:
  - get: booklit
    trigger: true
  - task: test
    config:
`+busyboxTask("      ", `inputs: [{name: booklit}]
run: {path: sh, args: [-c, 'echo "testing $(cat booklit/README) at $(cat booklit/.git/short_ref)"']}`))
		waitForBuildNamed(ctx, f, p, "unit", "1", "succeeded", 180*time.Second)
		watch := succeed(ctx, f, "watch", "-j", p+"/unit", "-b", "1")
		Expect(watch.Stdout).To(ContainSubstring("testing first draft at " + first[:7]))
		// The get's log: the git resource's own stderr.
		Expect(watch.Stdout).To(ContainSubstring(fmt.Sprintf("cloning %s (branch main) at %s", s.git.URL(repo), first)))

		check := succeed(ctx, f, "check-resource", "-r", p+"/booklit")
		Expect(check.Stdout).To(MatchRegexp(`checking %s/booklit in build \d+`, p))
		Expect(plain(check.Stdout)).To(ContainSubstring("initializing check: booklit"))
		Expect(check.Stdout).To(ContainSubstring("succeeded"))

		second := commit(ctx, repo, "main", "second draft")
		waitForBuildNamed(ctx, f, p, "unit", "2", "succeeded", 180*time.Second)
		watch = succeed(ctx, f, "watch", "-j", p+"/unit", "-b", "2")
		Expect(watch.Stdout).To(ContainSubstring("testing second draft at " + second[:7]))
		versions := succeed(ctx, f, "resource-versions", "-r", p+"/booklit")
		Expect(versions.Stdout).To(ContainSubstring(second))
		Expect(jobBuilds(ctx, f, p, "unit")).To(HaveLen(2), "one build per commit")
	})

	// One spec for both, so that the wait for the pods to go is paid once.
	It("aborts a build during its get and another during its put: builds aborted, pods gone", func(ctx SpecContext) {
		f := newFly(ctx)
		get := pipelineName("abort-get")
		setPipeline(ctx, f, get, `
resources:
- name: slow
  type: mock
  check_every: 1s
  source: {initial_version: v1, in_delay: 1h}
jobs:
- name: fetch
  plan:
  - get: slow
    trigger: true
`)
		repo, _ := newRepo(ctx, "abort-put", "to push")
		hang := newHangingServer()
		put := pipelineName("abort-put")
		setPipeline(ctx, f, put, "resources:\n"+gitResource("src", repo, "main")+fmt.Sprintf(`- name: stuck
  type: git
  check_every: never
  source: {uri: %q, branch: main}
jobs:
- name: publish
  plan:
  - get: src
    trigger: true
  - put: stuck
    params: {repository: src}
`, hang.url()))

		getID := waitForBuildNamed(ctx, f, get, "fetch", "1", "started", 120*time.Second)
		waitForRunningPod(ctx, getID, "-slow-")
		abortBuild(ctx, f, get, "fetch", "1", getID)

		putID := waitForBuildNamed(ctx, f, put, "publish", "1", "started", 120*time.Second)
		waitForRunningPod(ctx, putID, "-stuck-")
		abortBuild(ctx, f, put, "publish", "1", putID)

		expectPodsGone(ctx, getID, putID)
	})

	It("puts to a second branch and the implicit get fetches the pushed commit", func(ctx SpecContext) {
		f := newFly(ctx)
		repo, sha := newRepo(ctx, "release", "release me")
		p := pipelineName("release")
		setPipeline(ctx, f, p, "resources:\n"+gitResource("repo", repo, "main")+fmt.Sprintf(`- name: release
  type: git
  check_every: never
  source: {uri: %q, branch: release}
jobs:
- name: ship
  plan:
  - get: repo
  - put: release
    params: {repository: repo}
  - task: show
    config:
`, s.git.URL(repo))+busyboxTask("      ", `inputs: [{name: release}]
run: {path: sh, args: [-c, 'echo "release has $(cat release/README) at $(cat release/.git/ref)"']}`))
		waitForVersion(ctx, f, p, "repo", sha)
		res := succeed(ctx, f, "trigger-job", "-j", p+"/ship", "-w")
		Expect(res.Stdout).To(ContainSubstring("pushing " + sha + " to branch release"))
		Expect(res.Stdout).To(ContainSubstring("release has release me at " + sha))
		head, err := s.git.Head(ctx, repo, "release")
		Expect(err).NotTo(HaveOccurred())
		Expect(head).To(Equal(sha))
		versions := succeed(ctx, f, "resource-versions", "-r", p+"/release")
		Expect(versions.Stdout).To(ContainSubstring(sha))
	})

	It("chains two jobs by passed on a git repository, version by version", func(ctx SpecContext) {
		f := newFly(ctx)
		repo, _ := newRepo(ctx, "chain", "v1")
		p := pipelineName("chain")
		setPipeline(ctx, f, p, "resources:\n"+gitResource("repo", repo, "main")+`
jobs:
- name: unit
  plan:
  - get: repo
    trigger: true
  - task: test
    config:
`+busyboxTask("      ", `inputs: [{name: repo}]
run: {path: cat, args: [repo/README]}`)+`
- name: ship
  plan:
  - get: repo
    passed: [unit]
    trigger: true
  - task: ship
    config:
`+busyboxTask("      ", `inputs: [{name: repo}]
run: {path: sh, args: [-c, 'echo "shipping $(cat repo/README)"']}`))
		waitForBuildNamed(ctx, f, p, "ship", "1", "succeeded", 180*time.Second)
		Expect(succeed(ctx, f, "watch", "-j", p+"/ship", "-b", "1").Stdout).To(ContainSubstring("shipping v1"))

		commit(ctx, repo, "main", "v2")
		waitForBuildNamed(ctx, f, p, "ship", "2", "succeeded", 180*time.Second)
		Expect(succeed(ctx, f, "watch", "-j", p+"/ship", "-b", "2").Stdout).To(ContainSubstring("shipping v2"))
		Expect(jobBuilds(ctx, f, p, "unit")).To(HaveLen(2))
		Expect(jobBuilds(ctx, f, p, "ship")).To(HaveLen(2))
	})

	It("runs fly execute with --inputs-from a job and an image from the job's get", func(ctx SpecContext) {
		f := newFly(ctx)
		repo, sha := newRepo(ctx, "execute", "local work")
		p := pipelineName("execute")
		setPipeline(ctx, f, p, "resources:\n"+gitResource("repo", repo, "main")+`- name: tools
  type: registry-image
  check_every: 1s
  source: `+busyboxSource()+`
jobs:
- name: unit
  plan:
  - get: repo
  - get: tools
  - task: test
    image: tools
    config:
      platform: linux
      inputs: [{name: repo}]
      run: {path: cat, args: [repo/README]}
`)
		waitForVersion(ctx, f, p, "repo", sha)
		Eventually(ctx, func() string {
			return run(ctx, f, "resource-versions", "-r", p+"/tools").Stdout
		}).WithTimeout(60 * time.Second).WithPolling(500 * time.Millisecond).Should(ContainSubstring("digest:sha256:"))

		dir := GinkgoT().TempDir()
		task := filepath.Join(dir, "task.yml")
		Expect(os.WriteFile(task, []byte(`platform: linux
inputs: [{name: repo}]
run: {path: sh, args: [-c, 'echo "executed on $(cat repo/README) at $(cat repo/.git/ref)"']}
`), 0o644)).To(Succeed())
		res, err := f.Exec(ctx, testenv.FlyCmd{Args: []string{"execute", "-c", task, "--inputs-from", p + "/unit", "--image", "tools"}, Dir: dir})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), res.String())
		Expect(res.Stdout).To(ContainSubstring("executed on local work at " + sha))
		Expect(res.Stdout).To(ContainSubstring("succeeded"))
	})
})

var _ = Describe("fly execute --inputs-from a job that cannot run yet", func() {
	It("says the job's inputs are not found, and runs nothing", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("noinputs")
		setPipeline(ctx, f, p, `
resources:
- name: empty
  type: mock
  check_every: 1s
  source: {no_initial_version: true}
jobs:
- name: j
  plan:
  - get: empty
`)
		dir := GinkgoT().TempDir()
		task := filepath.Join(dir, "task.yml")
		Expect(os.WriteFile(task, []byte(busyboxTask("", `inputs: [{name: empty}]
run: {path: "true"}`)), 0o644)).To(Succeed())
		res, err := f.Exec(ctx, testenv.FlyCmd{Args: []string{"execute", "-c", task, "--inputs-from", p + "/j"}, Dir: dir})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		Expect(res.Output()).To(ContainSubstring(fmt.Sprintf("build inputs for %s/j not found", p)))
		Expect(res.Output()).NotTo(ContainSubstring("executing build"))
	})
})

var _ = Describe("faults of resources and versions", func() {
	It("says so on the resource when a resource type's image has no /opt/resource/check, without a crash loop", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("nocheck")
		setPipeline(ctx, f, p, `
resource_types:
- name: not-a-resource
  type: registry-image
  source: `+busyboxSource()+`
resources:
- name: r
  type: not-a-resource
  check_every: 1s
  source: {}
jobs:
- name: j
  plan:
  - get: r
`)
		res := run(ctx, f, "check-resource", "-r", p+"/r")
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		Expect(res.Output()).To(ContainSubstring("/opt/resource/check"))
		build := buildNumber(res.Stdout)
		Expect(build).NotTo(BeEmpty(), res.String())
		for _, pod := range podsOfBuild(ctx, build) {
			Expect(pod.Spec.RestartPolicy).To(Equal(corev1.RestartPolicyNever), pod.Name)
			for _, c := range pod.Status.ContainerStatuses {
				Expect(c.RestartCount).To(BeZero(), "container %s of %s restarted", c.Name, pod.Name)
			}
		}
		// The periodic checks go on, each one ending the same way (no pod
		// restarted in a loop).
		expectNextCheck(ctx, f, p, "r", checkBuildID(res.Stdout))
	})

	It("fails a get whose version was force-pushed away, saying which commit is gone", func(ctx SpecContext) {
		f := newFly(ctx)
		repo, old := newRepo(ctx, "gone", "soon gone")
		p := pipelineName("gone")
		setPipeline(ctx, f, p, "resources:\n"+gitResource("repo", repo, "main")+fmt.Sprintf(`
jobs:
- name: j
  plan:
  - get: repo
    version: {ref: %s}
`, old))
		waitForVersion(ctx, f, p, "repo", old)
		forcePush(ctx, repo, "main", "rewritten")

		res := run(ctx, f, "trigger-job", "-j", p+"/j", "-w")
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		Expect(res.Stdout).To(ContainSubstring(fmt.Sprintf("commit %s is not on branch main", old)))
		Expect(res.Stdout).To(MatchRegexp(`errored|failed`))
	})
})

var _ = Describe("a git resource on a dumb HTTP server", func() {
	It("checks, gets and triggers from a dumb HTTP server (static files), and a put to it says it cannot push", func(ctx SpecContext) {
		f := newFly(ctx)
		repo, first := newRepo(ctx, "dumb", "first")
		// The bare repository with its history packed, as a served one often
		// is: the next commit is a loose object beside the pack.
		out, err := exec.CommandContext(ctx, "git", "--git-dir", s.git.Dir(repo), "repack", "-a", "-d", "-q").CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
		out, err = exec.CommandContext(ctx, "git", "--git-dir", s.git.Dir(repo), "update-server-info").CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
		uri := s.git.DumbURL(repo)
		p := pipelineName("dumb")
		setPipeline(ctx, f, p, fmt.Sprintf(`
resources:
- name: src
  type: git
  check_every: 1s
  source: {uri: %q, branch: main}
jobs:
- name: unit
  plan:
  - get: src
    trigger: true
  - task: test
    config:
%s- name: publish
  plan:
  - get: src
    passed: [unit]
  - put: src
    params: {repository: src}
`, uri, busyboxTask("      ", `inputs: [{name: src}]
run: {path: sh, args: [-c, 'echo "testing $(cat src/README) at $(cat src/.git/short_ref)"']}`)))
		waitForBuildNamed(ctx, f, p, "unit", "1", "succeeded", 180*time.Second)
		watch := succeed(ctx, f, "watch", "-j", p+"/unit", "-b", "1")
		Expect(watch.Stdout).To(ContainSubstring("speaks git's dumb HTTP protocol"))
		Expect(watch.Stdout).To(ContainSubstring("testing first at " + first[:7]))

		second := commit(ctx, repo, "main", "second")
		waitForBuildNamed(ctx, f, p, "unit", "2", "succeeded", 180*time.Second)
		watch = succeed(ctx, f, "watch", "-j", p+"/unit", "-b", "2")
		Expect(watch.Stdout).To(ContainSubstring("testing second at " + second[:7]))

		res := run(ctx, f, "trigger-job", "-j", p+"/publish", "-w")
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		Expect(res.Stdout).To(ContainSubstring("cannot receive a push"), res.String())
		head, err := s.git.Head(ctx, repo, "main")
		Expect(err).NotTo(HaveOccurred())
		Expect(head).To(Equal(second))
	})
})

var ansi = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// plain is fly's output without its colours and bold.
func plain(out string) string { return ansi.ReplaceAllString(out, "") }

// busyboxSource is a registry-image source of Docker Hub's busybox, from
// the local registry that mirrors it (pushed there as library/busybox).
func busyboxSource() string {
	return fmt.Sprintf("{repository: busybox, insecure: true, registry_mirror: {host: %q}}", testenv.Registry(GinkgoT()))
}

// buildNumber is N of fly check-resource's "checking P/R in build N".
func buildNumber(out string) string {
	_, after, ok := strings.Cut(out, " in build ")
	if !ok {
		return ""
	}
	return strings.Fields(after)[0]
}

// forcePush replaces branch of repo with a new root commit (README =
// readme), so the branch's earlier commits are no longer on it.
func forcePush(ctx context.Context, repo, branch, readme string) {
	GinkgoHelper()
	orphan := "orphan-" + strings.ToLower(pipelineName("x"))
	sha := commit(ctx, repo, orphan, readme)
	cmd := exec.CommandContext(ctx, "git", "--git-dir", s.git.Dir(repo), "update-ref", "refs/heads/"+branch, sha)
	out, err := cmd.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), string(out))
	cmd = exec.CommandContext(ctx, "git", "--git-dir", s.git.Dir(repo), "update-ref", "-d", "refs/heads/"+orphan)
	out, err = cmd.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), string(out))
}
