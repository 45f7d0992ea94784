// Package pipelines_test drives Concourse's own `fly` (v8.2.5) through the
// Kubernetes runtime RFC's developer milestones against the real
// `atc-porter-runtime serve` on the real local cluster, with the real
// MinIO, PostgreSQL, OCI registry and a git server on the host: pipelines
// set and triggered with fly, resources checked and fetched by the resource
// types Porter ships, images resolved to digests and pulled by the kubelet.
//
// The specs share one server, namespace and database (CI time matters) and
// each sets pipelines of its own names, so they run in parallel.
package pipelines_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/test/testenv"
	"github.com/porter-ci/porter/test/testenv/gitserver"
)

func TestPipelines(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "pipelines through fly")
}

var _ = ReportAfterSuite("spec times", testenv.RecordSpecTimes)

const adminUser = "admin"

type suite struct {
	env      *testenv.ATCEnv
	ns       testenv.WorkerNamespace
	server   *testenv.ATC
	flyBin   string
	password string
	// credNS is team main's credential namespace (creds_test.go).
	credNS string
	dsn    string
	// git is a git server on the host that step pods reach through the
	// node's IP; specs create repositories of their own names in it.
	git *gitserver.Server
	// porterImage is this tree's porter image (vault_test.go starts a
	// server of its own with it).
	porterImage string
}

var s suite

var _ = SynchronizedBeforeSuite(func(ctx SpecContext) []byte { return nil }, func(ctx SpecContext, _ []byte) {
	flyBin, err := testenv.FindFly()
	skipIfUnavailable(err)
	env, err := testenv.NewATCEnv(ctx, GinkgoT().TempDir())
	skipIfUnavailable(err)
	s = suite{env: env, flyBin: flyBin, password: rand.Text()}
	s.git, err = gitserver.New(env.Cluster["PORTER_CLUSTER_NODE_IP"])
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(s.git.Close)
	var removeNS func(context.Context) error
	s.ns, removeNS, err = env.NewWorkerNamespace(ctx, "porter-pipelines-")
	DeferCleanup(removeNS)
	Expect(err).NotTo(HaveOccurred())
	credPrefix, removeCredNS, err := env.NewCredentialNamespace(ctx, s.ns, "main")
	DeferCleanup(removeCredNS)
	Expect(err).NotTo(HaveOccurred())
	s.credNS = credPrefix + "main"
	dsn, drop, err := env.NewDatabase(ctx)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(drop)
	s.dsn = dsn
	porterImage, removeImage, err := testenv.BuildPorterImage(ctx, GinkgoT().TempDir(), "pipelines")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(removeImage)
	s.porterImage = porterImage
	// This tree's git resource (dumb HTTP), the other base types from the registry.
	gitImage, removeGitImage, err := testenv.BuildResourceImage(ctx, GinkgoT().TempDir(), "git", "pipelines")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(removeGitImage)
	baseTypes := []string{"git=" + gitImage}
	for _, t := range env.LocalBaseResourceTypes(ctx) {
		if !strings.HasPrefix(t, "git=") {
			baseTypes = append(baseTypes, t)
		}
	}
	s.server, err = env.NewATC(testenv.ATCConfig{
		Worker: s.ns, WorkerName: "pipelines", Database: dsn, CredentialNamespacePrefix: credPrefix,
		LocalUsers: []string{adminUser + ":" + s.password}, MainTeamUsers: []string{adminUser},
		PodRetention: time.Minute,
		// This tree's sidecar: it redacts credentials from the audit journal.
		Args:              []string{"--porter-image", porterImage},
		BaseResourceTypes: baseTypes,
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(s.server.Start(ctx)).To(Succeed())
	DeferCleanup(func() {
		Expect(s.server.Stop()).To(Succeed())
		GinkgoWriter.Printf("log of the server at %s:\n%s\n", s.server.URL(), s.server.Log())
	})
})

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

// newFly is a fly of its own, logged in to the shared server as admin.
func newFly(ctx context.Context) *testenv.Fly {
	GinkgoHelper()
	f := testenv.NewFly(s.flyBin, GinkgoT().TempDir(), "porter")
	f.Log = GinkgoWriter
	res, err := f.Login(ctx, s.server.URL(), adminUser, s.password)
	Expect(err).NotTo(HaveOccurred())
	Expect(res.ExitCode).To(Equal(0), res.String())
	return f
}

func run(ctx context.Context, f *testenv.Fly, args ...string) testenv.FlyResult {
	GinkgoHelper()
	res, err := f.Exec(ctx, testenv.FlyCmd{Args: args})
	Expect(err).NotTo(HaveOccurred(), res.String())
	return res
}

func succeed(ctx context.Context, f *testenv.Fly, args ...string) testenv.FlyResult {
	GinkgoHelper()
	res := run(ctx, f, args...)
	Expect(res.ExitCode).To(Equal(0), res.String())
	return res
}

// pipelineName is unique per spec, so specs never share a pipeline.
func pipelineName(base string) string {
	return base + "-" + strings.ToLower(rand.Text()[:6])
}

// setPipeline writes config to a file, sets it as name and unpauses it.
func setPipeline(ctx context.Context, f *testenv.Fly, name, config string, extra ...string) {
	GinkgoHelper()
	path := filepath.Join(GinkgoT().TempDir(), name+".yml")
	Expect(os.WriteFile(path, []byte(config), 0o644)).To(Succeed())
	succeed(ctx, f, append([]string{"set-pipeline", "-n", "-p", name, "-c", path}, extra...)...)
	succeed(ctx, f, "unpause-pipeline", "-p", name)
}
