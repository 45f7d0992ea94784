// Package runtime_test proves the ATC runtime end to end: the real
// `atc-porter-runtime serve` process, running as a service account with
// exactly deploy/atc's Role, drives step pods on the real local cluster
// (hack/cluster-up.sh) with the real MinIO and PostgreSQL, and people's
// commands (`execute`, `watch`, `abort`, `builds`) talk to it over HTTP.
package runtime_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"

	"github.com/porter-ci/porter/test/testenv"
)

func TestRuntime(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "ATC runtime end to end")
}

var _ = ReportAfterSuite("spec times", testenv.RecordSpecTimes)

// user is the local user the specs log in as: an owner of team main.
const user = "e2e"

var (
	admin     kubernetes.Interface
	cluster   map[string]string // testenv.ATCEnv.Cluster
	namespace string
	server    *testenv.ATC // see test/testenv/atc.go for its API
	password  string
	// databaseDSN is the server's database: a spec writes the state a
	// crash leaves at a moment no kill can hit reliably.
	databaseDSN string
)

var _ = BeforeSuite(func(ctx SpecContext) {
	env, err := testenv.NewATCEnv(ctx, GinkgoT().TempDir())
	if testenv.Unavailable(err) {
		if os.Getenv("CI") == "" {
			Skip(fmt.Sprintf("%v (run `make cluster-up`)", err))
		}
		Fail(fmt.Sprintf("CI needs the local cluster and PostgreSQL: %v", err))
	}
	Expect(err).NotTo(HaveOccurred())
	admin, cluster = env.Admin, env.Cluster

	// The server runs as deploy/atc's service account, so every spec also
	// proves the Role is enough (and nothing more is needed).
	ns, removeNS, err := env.NewWorkerNamespace(ctx, "porter-e2e-")
	DeferCleanup(removeNS)
	Expect(err).NotTo(HaveOccurred())
	namespace = ns.Name
	// task_test runs a privileged step: its worker allows them, in a
	// namespace labelled for them.
	Expect(testenv.SetPodSecurity(ctx, env.Admin, ns.Name, "privileged")).To(Succeed())
	dsn, dropDB, err := env.NewDatabase(ctx)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(dropDB)
	databaseDSN = dsn

	password = rand.Text()
	server, err = env.NewATC(testenv.ATCConfig{
		Worker: ns, Database: dsn, Privileged: true,
		// A bucket of its own: build logs and caches start afresh.
		Bucket:        namespace,
		LocalUsers:    []string{user + ":" + password},
		MainTeamUsers: []string{user},
		// A pod per check: these specs follow a check's own pod (its
		// Secret, its resume after a crash); test/economy, test/fly and
		// test/pipelines run the checks in check pods, the default.
		Args: append(resourceTypeArgs(ctx), "--check-pod-lifetime", "0"),
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(server.Start(ctx)).To(Succeed())
	DeferCleanup(func(context.Context) {
		Expect(server.Stop()).To(Succeed())
		GinkgoWriter.Printf("server log:\n%s\n", server.Log())
	})
})
