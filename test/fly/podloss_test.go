package fly_test

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/test/testenv"
)

var _ = Describe("a step's pod lost", func() {
	It("a task whose pod is deleted mid-build (kubectl delete pod) starts again in a new pod, its input fetched again; the build succeeds, the log says why, no line twice", func(ctx SpecContext) {
		in := GinkgoT().TempDir()
		Expect(os.WriteFile(filepath.Join(in, "greeting"), []byte("hello-from-input"), 0o644)).To(Succeed())
		task := taskFile(`inputs: [{name: in}]
run:
  path: sh
  args: [-c, "echo attempt-on-$(hostname) $(cat in/greeting); sleep 4; echo task-done"]
`)
		p, err := s.adminFly.Start(testenv.FlyCmd{Args: []string{"execute", "-c", task, "-i", "in=" + in}})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(p.Kill)
		// The process's line, not fly's "running sh -c echo attempt-on-…",
		// which comes first: deleting the pod before the process printed
		// puts its line after the restart notice.
		Eventually(func() string { return p.Stdout.String() }).WithTimeout(time.Minute).Should(ContainSubstring(" hello-from-input\n"))
		id := buildID(p.Stdout.String())
		pods := buildPods(ctx, sharedWorker, id)
		Expect(pods).To(HaveLen(1))
		first := pods[0].Name
		// What `kubectl delete pod` does: someone else deletes the pod.
		Expect(s.env.Admin.CoreV1().Pods(s.ns.Name).Delete(ctx, first, metav1.DeleteOptions{})).To(Succeed())

		res, err := p.Wait(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), res.String())
		expectInOrder(res, "attempt-on-"+first+" hello-from-input\n",
			"pod "+s.ns.Name+"/"+first+": deleted before the step finished; starting the step again in a new pod (attempt 2 of 3)\n",
			"\nattempt-on-", " hello-from-input\n", "task-done\n", "succeeded\n")
		// Lines of output, not the command line fly shows.
		attempts, done := 0, 0
		for _, l := range lines(res.Stdout) {
			switch {
			case strings.HasPrefix(l, "attempt-on-"):
				attempts++
				Expect(l).To(HaveSuffix(" hello-from-input"), "an attempt without its input")
			case l == "task-done":
				done++
			}
		}
		Expect(attempts).To(Equal(2), res.String())
		Expect(done).To(Equal(1), res.String())

		// The stored log has the same lines once each.
		watched := succeed(ctx, s.adminFly, "watch", "-b", strconv.Itoa(id))
		Expect(plain(res.Stdout)).To(HaveSuffix(plain(watched.Stdout)))
		Expect(buildStatus(ctx, id)).To(Equal("succeeded"))
	})

	It("a get whose pod is deleted mid-fetch starts again in a new pod and the job's build succeeds", func(ctx SpecContext) {
		name := pipelineName("podloss")
		marker := "fetching-" + strings.ToLower(rand.Text()[:8]) // no resource cache hit
		succeed(ctx, s.adminFly, "set-pipeline", "-n", "-p", name, "-c", writeFile("p.yml", fmt.Sprintf(`
resources:
- {name: r, type: mock, source: {log: %s, in_delay: 4s}}
jobs:
- name: j
  plan:
  - get: r
`, marker)))
		succeed(ctx, s.adminFly, "unpause-pipeline", "-p", name)
		p, err := s.adminFly.Start(testenv.FlyCmd{Args: []string{"trigger-job", "-j", name + "/j", "-w"}})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(p.Kill)
		Eventually(func() string { return p.Stdout.String() }).WithTimeout(time.Minute).Should(ContainSubstring("in: waiting"))
		code, body := call(ctx, http.MethodGet, s.server.URL()+"/api/v1/teams/main/pipelines/"+name+"/jobs/j/builds/1", s.adminToken, nil, nil)
		Expect(code).To(Equal(http.StatusOK), body)
		var b apiBuild
		Expect(json.Unmarshal([]byte(body), &b)).To(Succeed(), body)
		pods := buildPods(ctx, sharedWorker, b.ID)
		Expect(pods).To(HaveLen(1))
		Expect(s.env.Admin.CoreV1().Pods(s.ns.Name).Delete(ctx, pods[0].Name, metav1.DeleteOptions{})).To(Succeed())

		res, err := p.Wait(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), res.String())
		expectInOrder(res, marker, "pod "+s.ns.Name+"/"+pods[0].Name+": deleted before the step finished; starting the step again in a new pod (attempt 2 of 3)\n",
			marker, "succeeded\n")
		Expect(strings.Count(plain(res.Stdout), marker)).To(Equal(2), res.String())
	})
})
