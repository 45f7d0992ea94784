package cluster_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/test/testenv"
)

// What deploy/ sets for the local cluster.
const (
	porterNamespace = "porter"
	atcSelector     = "app.kubernetes.io/name=atc-porter-runtime"
	atcReplicas     = 2
	// The ATC Service's NodePort on the node IP (deploy/atc/service.yaml),
	// also its --external-url.
	atcNodePort   = 30880
	adminUser     = "admin"
	adminPassword = "porter-dev-admin"
	// deploy/postgres/dev's hostPath volume.
	postgresVolume = "/var/lib/porter-cluster/volumes/postgres"
)

// The key Secrets the ATC creates on first start (deploy/atc/statefulset.yaml).
var atcKeySecrets = []string{"atc-porter-runtime-signing-key", "atc-porter-runtime-step-token-key", "atc-porter-runtime-ca"}

// Porter applied as a user would (one `kubectl apply -k deploy/`): the ATC
// runs in the cluster with two replicas, reaches PostgreSQL and MinIO by
// Service DNS names, and fly drives it through its Service. It takes over the
// namespace "porter" of the local cluster (removing what a previous run left)
// and removes it again, MinIO (the cluster's, which other suites use) apart.
var _ = Describe("Porter deployed in the cluster", Ordered, func() {
	var (
		root, kubectl, url string
		fly                *testenv.Fly
		task               string
	)

	BeforeAll(func(ctx SpecContext) {
		var err error
		root, err = testenv.RepoRoot()
		Expect(err).NotTo(HaveOccurred())
		kubectl = getenv("PORTER_KUBECTL", filepath.Join(os.Getenv("HOME"), ".cache", "porter", "bin", "kubectl"))
		flyBin, err := testenv.FindFly()
		Expect(err).NotTo(HaveOccurred())
		_, err = env.client.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "no cluster DNS: the cluster predates CoreDNS; run hack/cluster-up.sh")
		url = fmt.Sprintf("http://%s:%d", env.nodeIP, atcNodePort)

		// The image of this checkout's ATC (a no-op when it is current). Not
		// pushed: only this deploy runs it, from the node's containerd.
		runIn(ctx, root, filepath.Join(root, "hack", "images.sh"), "--no-push", "atc-porter-runtime")

		removePorter(ctx, root, kubectl)
		DeferCleanup(func(ctx SpecContext) { removePorter(ctx, root, kubectl) }, NodeTimeout(2*time.Minute))
		start := time.Now()
		runIn(ctx, root, kubectl, "--kubeconfig", kubeconfigPath(), "apply", "-k", "deploy/")
		waitATCs(ctx, nil)
		waitAPI(ctx, url)
		fmt.Fprintf(GinkgoWriter, "deploy/ applied and the ATC answering in %s\n", time.Since(start).Round(time.Millisecond))

		fly = testenv.NewFly(flyBin, GinkgoT().TempDir(), "incluster")
		fly.Log = GinkgoWriter
		task = filepath.Join(GinkgoT().TempDir(), "task.yml")
		Expect(os.WriteFile(task, []byte(`platform: linux
image_resource:
  type: registry-image
  source: {repository: busybox}
params: {WORD: in-cluster}
run: {path: sh, args: [-c, 'echo "hello $WORD from $(hostname)"']}
`), 0o644)).To(Succeed())
	}, NodeTimeout(4*time.Minute))

	It("logs in and runs a build through the ATC's Service", func(ctx SpecContext) {
		res, err := fly.Login(ctx, url, adminUser, adminPassword)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), res.String())
		res, err = fly.Run(ctx, "execute", "-c", task)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), res.String())
		Expect(res.Stdout).To(ContainSubstring("hello in-cluster from porter-b"), res.String())
		Expect(res.Stdout).To(ContainSubstring("succeeded"), res.String())

		By("the step pods' sidecars dialled an ATC pod's own IP (over TLS: the build ran)")
		atcIPs := map[string]bool{}
		atcs, err := env.client.CoreV1().Pods(porterNamespace).List(ctx, metav1.ListOptions{LabelSelector: atcSelector})
		Expect(err).NotTo(HaveOccurred())
		for _, p := range atcs.Items {
			atcIPs[p.Status.PodIP] = true
		}
		steps, err := env.client.CoreV1().Pods(porterNamespace).List(ctx, metav1.ListOptions{LabelSelector: podspec.LabelStep})
		Expect(err).NotTo(HaveOccurred())
		Expect(steps.Items).NotTo(BeEmpty(), "the build's step pods (kept for --pod-retention)")
		for _, p := range steps.Items {
			var addr string
			for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
				for _, e := range c.Env {
					if e.Name == podspec.EnvATCAddress {
						addr = e.Value
					}
				}
			}
			host, _, err := net.SplitHostPort(addr)
			Expect(err).NotTo(HaveOccurred(), "pod %s: %s=%q", p.Name, podspec.EnvATCAddress, addr)
			Expect(atcIPs).To(HaveKey(host), "pod %s dials %s, not an ATC pod's IP", p.Name, addr)
		}

		By("one replica holds the scheduler's Lease")
		lease, err := env.client.CoordinationV1().Leases(porterNamespace).Get(ctx, "atc-porter-runtime-scheduler", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(lease.Spec.HolderIdentity).NotTo(BeNil())
		Expect(*lease.Spec.HolderIdentity).To(BeElementOf("atc-porter-runtime-0", "atc-porter-runtime-1"))
	}, SpecTimeout(2*time.Minute))

	It("keeps its keys when its pods are replaced: the login from before still works, and builds run", func(ctx SpecContext) {
		secrets := map[string]types.UID{}
		for _, name := range atcKeySecrets {
			s, err := env.client.CoreV1().Secrets(porterNamespace).Get(ctx, name, metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred(), "the ATC keeps its keys in Secret %s", name)
			secrets[name] = s.UID
		}
		pods, err := env.client.CoreV1().Pods(porterNamespace).List(ctx, metav1.ListOptions{LabelSelector: atcSelector})
		Expect(err).NotTo(HaveOccurred())
		Expect(pods.Items).To(HaveLen(atcReplicas))
		old := map[types.UID]bool{}
		for _, p := range pods.Items {
			old[p.UID] = true
		}

		// Both replicas: no surviving process can hold a key in memory.
		runIn(ctx, root, kubectl, "--kubeconfig", kubeconfigPath(), "-n", porterNamespace, "delete", "pod", "-l", atcSelector, "--wait=true")
		waitATCs(ctx, old)
		waitAPI(ctx, url)

		for name, uid := range secrets {
			s, err := env.client.CoreV1().Secrets(porterNamespace).Get(ctx, name, metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			Expect(s.UID).To(Equal(uid), "Secret %s was replaced", name)
		}
		// No fly login: the token from before the restart.
		res, err := fly.Run(ctx, "execute", "-c", task)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), res.String())
		Expect(res.Stdout).To(ContainSubstring("hello in-cluster from porter-b"), res.String())
		res, err = fly.Run(ctx, "builds")
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), res.String())
		Expect(strings.Count(res.Stdout, "succeeded")).To(BeNumerically(">=", 2), res.String())
	}, SpecTimeout(2*time.Minute))
})

func kubeconfigPath() string { return getenv("PORTER_KUBECONFIG", defaultKubeconfig) }

// runIn runs a command in dir and fails the spec with its output if it fails.
func runIn(ctx context.Context, dir, name string, args ...string) {
	GinkgoHelper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	fmt.Fprintf(GinkgoWriter, "$ %s %s\n%s", name, strings.Join(args, " "), out)
	Expect(err).NotTo(HaveOccurred(), "%s %s:\n%s", name, strings.Join(args, " "), out)
}

// waitATCs waits until the StatefulSet's pods, none of them in old, are all Ready.
func waitATCs(ctx context.Context, old map[types.UID]bool) {
	GinkgoHelper()
	Eventually(ctx, func(g Gomega) {
		pods, err := env.client.CoreV1().Pods(porterNamespace).List(ctx, metav1.ListOptions{LabelSelector: atcSelector})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pods.Items).To(HaveLen(atcReplicas))
		for _, p := range pods.Items {
			g.Expect(old[p.UID]).To(BeFalse(), "pod %s is still the old one", p.Name)
			ready := false
			for _, c := range p.Status.Conditions {
				ready = ready || (c.Type == "Ready" && c.Status == "True")
			}
			g.Expect(ready).To(BeTrue(), "pod %s is not Ready", p.Name)
		}
	}).WithPolling(500 * time.Millisecond).WithTimeout(150 * time.Second).Should(Succeed())
}

// waitAPI waits until the ATC answers through its Service's NodePort.
func waitAPI(ctx context.Context, url string) {
	GinkgoHelper()
	Eventually(ctx, func() (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/api/v1/info", nil)
		if err != nil {
			return 0, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}).WithPolling(500 * time.Millisecond).WithTimeout(60 * time.Second).Should(Equal(http.StatusOK))
}

// removePorter deletes what deploy/ applied, but the cluster's MinIO, and
// waits until the namespace and the PostgreSQL volume are gone, so the next
// apply starts from nothing (initdb included).
func removePorter(ctx context.Context, root, kubectl string) {
	GinkgoHelper()
	for _, dir := range []string{"deploy/networkpolicy", "deploy/atc", "deploy/postgres/dev"} {
		runIn(ctx, root, kubectl, "--kubeconfig", kubeconfigPath(), "delete", "-k", dir, "--ignore-not-found", "--wait=false")
	}
	Eventually(ctx, func() bool {
		_, err := env.client.CoreV1().Namespaces().Get(ctx, porterNamespace, metav1.GetOptions{})
		_, pvErr := env.client.CoreV1().PersistentVolumes().Get(ctx, "porter-local-postgres", metav1.GetOptions{})
		return apierrors.IsNotFound(err) && apierrors.IsNotFound(pvErr)
	}).WithPolling(time.Second).WithTimeout(100*time.Second).Should(BeTrue(), "namespace %s and its volume to go", porterNamespace)
	Expect(os.RemoveAll(postgresVolume)).To(Succeed())
}
