// Package e2e_test holds Porter's end-to-end specs against a real Kubernetes
// cluster (hack/cluster-up.sh). The cluster is found through PORTER_KUBECONFIG
// (default /var/lib/porter-cluster/admin.kubeconfig). With no cluster the specs
// are skipped, unless CI is set: then they fail.
package e2e_test

import (
	"errors"
	"os"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/porter-ci/porter/test/testenv"
)

// cluster is what every spec gets: the admin config and a client made from it.
var cluster struct {
	admin  *rest.Config
	client kubernetes.Interface
}

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Porter e2e suite")
}

var _ = ReportAfterSuite("spec times", testenv.RecordSpecTimes)

var _ = BeforeSuite(func(ctx SpecContext) {
	path := testenv.KubeconfigPath()
	config, err := testenv.AdminConfig(ctx, path)
	if errors.Is(err, testenv.ErrNoCluster) {
		if os.Getenv("CI") != "" {
			Fail(err.Error() + "; CI is set, so this is a failure")
		}
		Skip(err.Error() + " (run `make cluster-up` or set PORTER_KUBECONFIG)")
	}
	Expect(err).NotTo(HaveOccurred())
	cluster.admin = config
	cluster.client, err = kubernetes.NewForConfig(config)
	Expect(err).NotTo(HaveOccurred(), "creating a Kubernetes client")
}, NodeTimeout(30*time.Second))
