// Package netpol_test proves deploy/networkpolicy on the local cluster
// (hack/cluster-up.sh). That cluster's CNI (the bridge plugin) does not
// enforce NetworkPolicies, so no packet can show what they block. Instead the
// specs prove both halves of "the policies isolate step pods" against the
// real parts they depend on:
//
//   - the API server accepts every policy deploy/ renders (server-side dry
//     run), and what it would store is what gets evaluated;
//   - pkg/netpolicy, evaluating those policies with the labels, address and
//     ports of real step pods (built by the real podspec.Build and read back
//     from the API server) and of the pods deploy/ declares, allows and
//     denies what docs/deploy.md says.
//
// With no cluster the specs are skipped, unless CI is set: then they fail.
package netpol_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"

	"github.com/porter-ci/porter/test/testenv"
)

var cluster struct {
	client kubernetes.Interface
	// env is cluster-up's settings (PORTER_CLUSTER_NODE_IP,
	// PORTER_CLUSTER_POD_SUBNET, ...).
	env     map[string]string
	kubectl string
	root    string
}

func TestNetpol(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Network policies")
}

var _ = ReportAfterSuite("spec times", testenv.RecordSpecTimes)

var _ = BeforeSuite(func(ctx SpecContext) {
	config, err := testenv.AdminConfig(ctx, testenv.KubeconfigPath())
	if err == nil {
		cluster.env, err = testenv.ClusterEnv()
	}
	if errors.Is(err, testenv.ErrNoCluster) {
		if os.Getenv("CI") != "" {
			Fail(err.Error() + "; CI is set, so this is a failure")
		}
		Skip(err.Error() + " (run `make cluster-up` or set PORTER_KUBECONFIG)")
	}
	Expect(err).NotTo(HaveOccurred())
	cluster.client, err = kubernetes.NewForConfig(config)
	Expect(err).NotTo(HaveOccurred(), "creating a Kubernetes client")
	cluster.root, err = testenv.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	cluster.kubectl = os.Getenv("PORTER_KUBECTL")
	if cluster.kubectl == "" {
		cluster.kubectl = filepath.Join(os.Getenv("HOME"), ".cache", "porter", "bin", "kubectl")
	}
}, NodeTimeout(30*time.Second))
