// Package runtime_test proves the ATC runtime end to end: the real
// `atc-porter-runtime serve` process, running as a service account with
// exactly deploy/atc's Role, drives step pods on the real local cluster
// (hack/cluster-up.sh) with the real MinIO, and people's commands
// (`execute`, `watch`, `abort`, `builds`) talk to it over HTTP.
package runtime_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/porter-ci/porter/test/testenv"
)

func TestRuntime(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "ATC runtime end to end")
}

var (
	admin     kubernetes.Interface
	adminCfg  *rest.Config
	namespace string
	atcBin    string
	server    *atcServer
)

var _ = BeforeSuite(func(ctx SpecContext) {
	cfg, err := testenv.AdminConfig(ctx, testenv.KubeconfigPath())
	if err != nil {
		if os.Getenv("CI") == "" {
			Skip(fmt.Sprintf("no local cluster (run `make cluster-up`): %v", err))
		}
		Fail(fmt.Sprintf("CI needs the local cluster: %v", err))
	}
	adminCfg = cfg
	admin, err = kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	env, err := testenv.ClusterEnv()
	Expect(err).NotTo(HaveOccurred())

	dir, err := os.MkdirTemp("", "porter-runtime-e2e-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(os.RemoveAll, dir)
	atcBin = filepath.Join(dir, "atc-porter-runtime")
	build := exec.CommandContext(ctx, "go", "build", "-o", atcBin, "github.com/porter-ci/porter/cmd/atc-porter-runtime")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), string(out))

	namespace, err = testenv.CreateNamespace(ctx, admin, "porter-e2e-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func(ctx context.Context) {
		_ = admin.CoreV1().Namespaces().Delete(ctx, namespace, metav1.DeleteOptions{})
	})

	// The server runs as deploy/atc's service account, so every spec also
	// proves the Role is enough (and nothing more is needed).
	kubeconfig := filepath.Join(dir, "atc.kubeconfig")
	applyRBAC(ctx, namespace)
	saCfg, err := testenv.ServiceAccountKubeconfig(ctx, adminCfg, namespace, "atc-porter-runtime")
	Expect(err).NotTo(HaveOccurred())
	writeKubeconfig(saCfg, namespace, kubeconfig)

	server = &atcServer{
		dir: dir, kubeconfig: kubeconfig, nodeIP: env["PORTER_CLUSTER_NODE_IP"],
		env: []string{
			"PORTER_BLOBSTORE_ENDPOINT=" + env["PORTER_CLUSTER_MINIO_ENDPOINT"],
			"PORTER_BLOBSTORE_ACCESS_KEY=" + env["PORTER_CLUSTER_MINIO_ACCESS_KEY"],
			"PORTER_BLOBSTORE_SECRET_KEY=" + env["PORTER_CLUSTER_MINIO_SECRET_KEY"],
			"PORTER_BLOBSTORE_REGION=" + env["PORTER_CLUSTER_MINIO_REGION"],
			// A bucket of its own: build numbers and caches start afresh.
			"PORTER_BLOBSTORE_BUCKET=" + namespace,
		},
		podBlobstore: env["PORTER_CLUSTER_MINIO_POD_ENDPOINT"],
	}
	server.grpcAddr = freeAddr(server.nodeIP)
	server.httpAddr = freeAddr("127.0.0.1")
	server.start()
	DeferCleanup(server.stop)
})

func applyRBAC(ctx context.Context, ns string) {
	root, err := testenv.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	objs, err := testenv.DecodeManifests(filepath.Join(root, "deploy", "atc", "rbac.yaml"))
	Expect(err).NotTo(HaveOccurred())
	for _, obj := range objs {
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			o.Namespace = ns
			_, err = admin.CoreV1().ServiceAccounts(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			o.Namespace = ns
			_, err = admin.RbacV1().Roles(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			o.Namespace = ns
			for i := range o.Subjects {
				o.Subjects[i].Namespace = ns
			}
			_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, o, metav1.CreateOptions{})
		default:
			Fail(fmt.Sprintf("unexpected %T in deploy/atc/rbac.yaml", obj))
		}
		Expect(err).NotTo(HaveOccurred())
	}
}

func writeKubeconfig(cfg *rest.Config, ns, path string) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["atc"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["atc"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "atc", Namespace: ns}
	kc.CurrentContext = "atc"
	Expect(clientcmd.WriteToFile(*kc, path)).To(Succeed())
}

func freeAddr(host string) string {
	addr, err := testenv.FreeAddr(host)
	Expect(err).NotTo(HaveOccurred())
	return addr
}

// atcServer is the `atc-porter-runtime serve` process.
type atcServer struct {
	dir, kubeconfig, nodeIP, podBlobstore string
	grpcAddr, httpAddr                    string
	env                                   []string
	keepAlive                             time.Duration // serve --keep-alive
	podRetention                          time.Duration // serve --pod-retention (default 10m)

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

func (s *atcServer) url() string { return "http://" + s.httpAddr }

func (s *atcServer) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	logPath := filepath.Join(s.dir, "atc.log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	Expect(err).NotTo(HaveOccurred())
	s.log = f
	s.cmd = exec.Command(atcBin, "serve",
		"--kubeconfig", s.kubeconfig, "--namespace", namespace, "--worker", "e2e",
		"--grpc-listen", s.grpcAddr, "--http-listen", s.httpAddr,
		"--state-dir", filepath.Join(s.dir, "state"),
		"--porter-image", "porter.local/porter:dev",
		// The local cluster has no cluster DNS; nothing here resolves names.
		"--dns-policy", "Default",
		"--pod-retention", s.retention().String(),
		"--keep-alive", s.keepAlive.String(),
		"--pod-blobstore-endpoint", s.podBlobstore,
	)
	s.cmd.Env = append(os.Environ(), s.env...)
	s.cmd.Stdout, s.cmd.Stderr = f, f
	Expect(s.cmd.Start()).To(Succeed())
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(s.cmd, s.done)
	Eventually(func() error {
		select {
		case <-s.done:
			return StopTrying("the server exited:\n" + s.logText())
		default:
		}
		resp, err := http.Get(s.url() + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}).WithTimeout(60 * time.Second).Should(Succeed())
}

// stop ends the server: gracefully with TERM, or as a crash with KILL.
func (s *atcServer) stopWith(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
	s.log.Close()
}

func (s *atcServer) stop() {
	s.stopWith(syscall.SIGTERM)
	GinkgoWriter.Printf("server log:\n%s\n", s.logText())
}

func (s *atcServer) logText() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "atc.log"))
	return string(b)
}

func (s *atcServer) retention() time.Duration {
	if s.podRetention == 0 {
		return 10 * time.Minute
	}
	return s.podRetention
}
