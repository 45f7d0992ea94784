package pipelines_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/test/testenv"
	"github.com/porter-ci/porter/test/testenv/gitserver"
)

// postWebhook calls a resource's check webhook as a git server's hook
// would: no login, the token in the query. It returns the status and body.
func postWebhook(ctx context.Context, pipeline, resource, token string) (int, string) {
	GinkgoHelper()
	u := fmt.Sprintf("%s/api/v1/teams/main/pipelines/%s/resources/%s/check/webhook?webhook_token=%s",
		s.server.URL(), url.PathEscape(pipeline), url.PathEscape(resource), url.QueryEscape(token))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	Expect(err).NotTo(HaveOccurred())
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	return resp.StatusCode, string(body)
}

var _ = Describe("resource check webhooks", func() {
	It("checks a check_every: never resource when its webhook is called with the token from the credential manager, and the job triggers", func(ctx SpecContext) {
		f := newFly(ctx)
		repo, first := newRepo(ctx, "webhook", "first")
		tokenVar, token := varName("webhook-token"), secretValue("hook")
		createCredential(ctx, tokenVar, map[string]string{"value": token})
		p := pipelineName("webhook")
		setPipeline(ctx, f, p, fmt.Sprintf(`
resources:
- name: src
  type: git
  check_every: never
  webhook_token: ((%s))
  source: {uri: %q, branch: main}
jobs:
- name: unit
  plan:
  - get: src
    trigger: true
`, tokenVar, s.git.URL(repo)))

		By("never checked periodically")
		Consistently(ctx, func() string {
			return run(ctx, f, "resource-versions", "-r", p+"/src").Stdout
		}).WithTimeout(4 * time.Second).WithPolling(time.Second).ShouldNot(ContainSubstring(first))

		By("refusing bad calls, which start nothing")
		code, body := postWebhook(ctx, p, "src", "wrong-"+token)
		Expect(code).To(Equal(http.StatusUnauthorized), body)
		Expect(body).NotTo(ContainSubstring(token))
		code, body = postWebhook(ctx, p, "src", "(("+tokenVar+"))")
		Expect(code).To(Equal(http.StatusUnauthorized), body)
		code, body = postWebhook(ctx, p, "src", "")
		Expect(code).To(Equal(http.StatusBadRequest), body)
		Expect(body).To(ContainSubstring("missing webhook_token"))
		code, body = postWebhook(ctx, p, "nope", token)
		Expect(code).To(Equal(http.StatusNotFound), body)
		Expect(jobBuilds(ctx, f, p, "unit")).To(BeEmpty())

		By("a call with the token checks at once and the job triggers")
		start := time.Now()
		code, body = postWebhook(ctx, p, "src", token)
		Expect(code).To(Equal(http.StatusCreated), body)
		var check struct {
			ID           int64  `json:"id"`
			Name         string `json:"name"`
			Status       string `json:"status"`
			ResourceName string `json:"resource_name"`
			PipelineName string `json:"pipeline_name"`
		}
		Expect(json.Unmarshal([]byte(body), &check)).To(Succeed(), body)
		Expect(check.ID).To(BeNumerically(">", 0))
		Expect(check.ResourceName).To(Equal("src"))
		Expect(check.PipelineName).To(Equal(p))
		waitForBuildNamed(ctx, f, p, "unit", "1", "succeeded", 180*time.Second)
		Expect(run(ctx, f, "resource-versions", "-r", p+"/src").Stdout).To(ContainSubstring(first))
		GinkgoWriter.Printf("first webhook → build 1 succeeded in %s\n", time.Since(start))

		By("a new commit and a call: build 2, of that commit")
		second := commit(ctx, repo, "main", "second")
		start = time.Now()
		code, body = postWebhook(ctx, p, "src", token)
		Expect(code).To(Equal(http.StatusCreated), body)
		Eventually(ctx, func() []string {
			var names []string
			for _, b := range jobBuilds(ctx, f, p, "unit") {
				names = append(names, fmt.Sprint(b["name"]))
			}
			return names
		}).WithTimeout(120 * time.Second).WithPolling(100 * time.Millisecond).Should(ContainElement("2"))
		GinkgoWriter.Printf("commit, webhook → build 2 created in %s\n", time.Since(start))
		waitForBuildNamed(ctx, f, p, "unit", "2", "succeeded", 180*time.Second)
		Expect(run(ctx, f, "resource-versions", "-r", p+"/src").Stdout).To(ContainSubstring(second))

		By("still never checked periodically: a third commit without a call builds nothing")
		commit(ctx, repo, "main", "third")
		Consistently(ctx, func() int {
			return len(jobBuilds(ctx, f, p, "unit"))
		}).WithTimeout(5 * time.Second).WithPolling(time.Second).Should(Equal(2))
	})

	It("triggers the job when a push to git's http-backend in a pod runs the repository's post-receive hook, which calls the webhook", func(ctx SpecContext) {
		ns, err := testenv.CreateNamespace(ctx, s.env.Admin, "porter-gitserver-")
		DeferCleanup(func(ctx context.Context) error {
			if ns == "" {
				return nil
			}
			return s.env.Admin.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		})
		Expect(err).NotTo(HaveOccurred())
		git, err := gitserver.StartInCluster(ctx, s.env.Admin, ns)
		if git != nil {
			DeferCleanup(git.Close)
		}
		Expect(err).NotTo(HaveOccurred())
		// The hook runs in the pod; the server's API listens on loopback.
		api, err := testenv.StartProxyOn(s.env.Cluster["PORTER_CLUSTER_NODE_IP"], strings.TrimPrefix(s.server.URL(), "http://"))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(api.Close)

		f := newFly(ctx)
		p, repo, token := pipelineName("pushed"), pipelineName("pushed"), strings.ToLower(rand.Text())
		hook := fmt.Sprintf("http://%s/api/v1/teams/main/pipelines/%s/resources/src/check/webhook?webhook_token=%s", api.Addr, p, token)
		Expect(git.CreateRepo(ctx, repo, "main", hook)).To(Succeed())
		setPipeline(ctx, f, p, fmt.Sprintf(`
resources:
- name: src
  type: git
  check_every: never
  webhook_token: %s
  source: {uri: %q, branch: main}
jobs:
- name: unit
  plan:
  - get: src
    trigger: true
`, token, git.URL(repo)))
		w, err := git.Work(ctx, GinkgoT().TempDir(), repo, "main")
		Expect(err).NotTo(HaveOccurred())
		for i, readme := range []string{"first", "second"} {
			sha, err := w.Commit(ctx, map[string]string{"README": readme}, readme)
			Expect(err).NotTo(HaveOccurred())
			start := time.Now()
			said, err := w.Push(ctx)
			Expect(err).NotTo(HaveOccurred())
			Expect(said).To(ContainSubstring("webhook answered 201 Created"))
			name := fmt.Sprint(i + 1)
			waitForBuildNamed(ctx, f, p, "unit", name, "succeeded", 180*time.Second)
			GinkgoWriter.Printf("push → build %s succeeded in %s\n", name, time.Since(start))
			Expect(run(ctx, f, "resource-versions", "-r", p+"/src").Stdout).To(ContainSubstring(sha))
		}
		Expect(jobBuilds(ctx, f, p, "unit")).To(HaveLen(2), "one build per push")
	})
})
