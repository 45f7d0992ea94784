// Package fly_test drives Concourse's own `fly` (v8.2.5, not written by this
// project) against the real `atc-porter-runtime serve`, running as
// deploy/atc's service account on the real local cluster with the real
// MinIO and PostgreSQL: every fly command Porter promises to answer (issue
// 7 §3), and the bad input and faults around login, teams and the database.
//
// Most specs share one server, one namespace and one database (CI time
// matters); specs that restart, crash or misconfigure a server start their
// own in the same namespace, with a worker name and database of their own.
package fly_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/test/testenv"
)

func TestFly(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "fly against Porter")
}

var _ = ReportAfterSuite("spec times", testenv.RecordSpecTimes)

// The shared server's people: admin owns team main (so is an admin);
// alice gets team other from the set-team spec.
const (
	adminUser = "admin"
	aliceUser = "alice"
	// sharedWorker is the shared server's untagged worker; servers of
	// single specs get their own, so no two servers touch each other's pods.
	sharedWorker = "e2e"
	// taggedWorker is the shared server's second worker (another
	// namespace), tagged workerTag: only steps with that tag run there.
	taggedWorker = "e2e-tagged"
	workerTag    = "e2e-tag"
)

// suite is what the specs share; BeforeSuite fills it.
type suite struct {
	env *testenv.ATCEnv
	ns  testenv.WorkerNamespace
	// tagged is the namespace of the shared server's tagged worker.
	tagged testenv.WorkerNamespace
	server *testenv.ATC
	flyBin string

	adminPassword, alicePassword string
	// adminFly is logged in to the shared server as admin, in team main;
	// adminToken is a token of admin's for direct API calls.
	adminFly   *testenv.Fly
	adminToken string
}

var s suite

var _ = BeforeSuite(func(ctx SpecContext) {
	flyBin, err := testenv.FindFly()
	skipIfUnavailable(err)
	env, err := testenv.NewATCEnv(ctx, GinkgoT().TempDir())
	skipIfUnavailable(err)
	s = suite{env: env, flyBin: flyBin, adminPassword: rand.Text(), alicePassword: rand.Text()}

	var removeNS func(context.Context) error
	s.ns, removeNS, err = env.NewWorkerNamespace(ctx, "porter-fly-")
	DeferCleanup(removeNS)
	Expect(err).NotTo(HaveOccurred())
	// execute_test runs a privileged step on the shared worker: it allows
	// them, in a namespace labelled for them.
	Expect(testenv.SetPodSecurity(ctx, env.Admin, s.ns.Name, "privileged")).To(Succeed())

	var removeTagged func(context.Context) error
	s.tagged, removeTagged, err = env.NewWorkerNamespace(ctx, "porter-fly-tagged-")
	DeferCleanup(removeTagged)
	Expect(err).NotTo(HaveOccurred())
	s.server = newServer(ctx, testenv.ATCConfig{
		WorkerName: sharedWorker, Privileged: true,
		MoreWorkers: []testenv.Worker{{Name: taggedWorker, Namespace: s.tagged, Tags: []string{workerTag},
			// Where the tag's steps go: a node label the node has, and a
			// toleration (of a taint it does not have).
			TagPlacement: map[string]any{workerTag: map[string]any{
				"node_selector": map[string]string{"kubernetes.io/os": "linux"},
				"tolerations":   []map[string]string{{"key": "porter.dev/e2e", "operator": "Exists", "effect": "NoSchedule"}},
			}}}},
		// Finished steps stay interceptible long enough for the intercept
		// specs, whatever order they run in.
		KeepAlive: 3 * time.Minute,
	})
	s.adminFly = newFly("porter")
	login(ctx, s.adminFly, s.server, adminUser, s.adminPassword)
	s.adminToken, err = s.server.Login(ctx, adminUser, s.adminPassword)
	Expect(err).NotTo(HaveOccurred())
})

// skipIfUnavailable skips the suite when the cluster, PostgreSQL or fly is
// missing, unless CI is set: then it fails.
func skipIfUnavailable(err error) {
	GinkgoHelper()
	if testenv.Unavailable(err) {
		if os.Getenv("CI") == "" {
			Skip(fmt.Sprintf("%v (run `make cluster-up`)", err))
		}
		Fail(fmt.Sprintf("CI needs the local cluster, PostgreSQL and fly: %v", err))
	}
	Expect(err).NotTo(HaveOccurred())
}

// newServer starts a server with a fresh database (unless cfg names one)
// in the suite's namespace, with the suite's users, and stops it (printing
// its log) when the spec or suite that started it ends.
func newServer(ctx context.Context, cfg testenv.ATCConfig) *testenv.ATC {
	GinkgoHelper()
	srv := prepareServer(ctx, cfg)
	Expect(srv.Start(ctx)).To(Succeed())
	return srv
}

// prepareServer is newServer without the start.
func prepareServer(ctx context.Context, cfg testenv.ATCConfig) *testenv.ATC {
	GinkgoHelper()
	if cfg.Database == "" {
		dsn, drop, err := s.env.NewDatabase(ctx)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(drop)
		cfg.Database = dsn
	}
	if cfg.Worker.Name == "" {
		cfg.Worker = s.ns
	}
	if cfg.WorkerName == "" {
		cfg.WorkerName = "e2e-" + strings.ToLower(rand.Text()[:6])
	}
	cfg.LocalUsers = append(cfg.LocalUsers, adminUser+":"+s.adminPassword, aliceUser+":"+s.alicePassword)
	cfg.MainTeamUsers = append(cfg.MainTeamUsers, adminUser)
	srv, err := s.env.NewATC(cfg)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		Expect(srv.Stop()).To(Succeed())
		GinkgoWriter.Printf("log of the server at %s:\n%s\n", srv.URL(), srv.Log())
	})
	return srv
}

// sharedBucket is the shared server's bucket, with the cluster's MinIO
// credentials.
func sharedBucket(ctx context.Context) blobstore.Store {
	GinkgoHelper()
	cl := s.env.Cluster
	store, err := blobstore.Open(ctx, blobstore.Config{Driver: blobstore.DriverMinio,
		Endpoint: cl["PORTER_CLUSTER_MINIO_ENDPOINT"], Bucket: s.server.Config.Bucket, Region: cl["PORTER_CLUSTER_MINIO_REGION"],
		AccessKey: cl["PORTER_CLUSTER_MINIO_ACCESS_KEY"], SecretKey: cl["PORTER_CLUSTER_MINIO_SECRET_KEY"]})
	Expect(err).NotTo(HaveOccurred())
	return store
}
