// Package gc_test proves the garbage collector (pkg/gc) on the real local
// cluster, MinIO and PostgreSQL: a real `atc-porter-runtime serve` with
// short retentions and a 1 s GC interval, driven by Concourse's own fly.
package gc_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/test/testenv"
)

func TestGC(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "garbage collection")
}

var _ = ReportAfterSuite("spec times", testenv.RecordSpecTimes)

const (
	user       = "gc"
	workerName = "e2e-gc"
	// artifactRetention is the server's --artifact-retention.
	artifactRetention = 5 * time.Second
)

var (
	env      *testenv.ATCEnv
	ns       testenv.WorkerNamespace
	dsn      string
	server   *testenv.ATC
	fly      *testenv.Fly
	store    blobstore.Store
	bucket   string
	password string
)

var _ = BeforeSuite(func(ctx SpecContext) {
	flyBin, err := testenv.FindFly()
	skipIfUnavailable(err)
	env, err = testenv.NewATCEnv(ctx, GinkgoT().TempDir())
	skipIfUnavailable(err)

	var removeNS func(context.Context) error
	ns, removeNS, err = env.NewWorkerNamespace(ctx, "porter-gc-")
	DeferCleanup(removeNS)
	Expect(err).NotTo(HaveOccurred())
	var drop func(context.Context) error
	dsn, drop, err = env.NewDatabase(ctx)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(drop)

	bucket = ns.Name
	password = rand.Text()
	server, err = env.NewATC(testenv.ATCConfig{
		Worker: ns, WorkerName: workerName, Database: dsn, Bucket: bucket,
		LocalUsers: []string{user + ":" + password}, MainTeamUsers: []string{user},
		PodRetention: time.Second,
		Args: []string{"--gc-interval", "1s", "--artifact-retention", artifactRetention.String(),
			"--gc-orphan-grace", "2s"},
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(server.Start(ctx)).To(Succeed())
	DeferCleanup(func() {
		Expect(server.Stop()).To(Succeed())
		GinkgoWriter.Printf("server log:\n%s\n", server.Log())
	})

	cl := env.Cluster
	store, err = blobstore.Open(ctx, blobstore.Config{Driver: blobstore.DriverMinio, Endpoint: cl["PORTER_CLUSTER_MINIO_ENDPOINT"],
		Bucket: bucket, Region: cl["PORTER_CLUSTER_MINIO_REGION"],
		AccessKey: cl["PORTER_CLUSTER_MINIO_ACCESS_KEY"], SecretKey: cl["PORTER_CLUSTER_MINIO_SECRET_KEY"]})
	Expect(err).NotTo(HaveOccurred())
	Expect(blobstore.EnsureBucket(ctx, store)).To(Succeed())
	DeferCleanup(func(ctx context.Context) { emptyBucket(ctx) })

	fly = testenv.NewFly(flyBin, GinkgoT().TempDir(), "gc")
	fly.Log = GinkgoWriter
	res, err := fly.Login(ctx, server.URL(), user, password)
	Expect(err).NotTo(HaveOccurred())
	Expect(res.ExitCode).To(Equal(0), res.String())
})

// emptyBucket removes what the specs and their builds stored.
func emptyBucket(ctx context.Context) {
	objs, err := store.List(ctx, "")
	Expect(err).NotTo(HaveOccurred())
	for _, o := range objs {
		Expect(store.Delete(ctx, o.Key)).To(Succeed())
	}
}

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

// run runs fly and expects it to succeed.
func run(ctx context.Context, c testenv.FlyCmd) testenv.FlyResult {
	GinkgoHelper()
	res, err := fly.Exec(ctx, c)
	Expect(err).NotTo(HaveOccurred())
	Expect(res.ExitCode).To(Equal(0), res.String())
	return res
}

var executingBuild = regexp.MustCompile(`executing build (\d+)`)

func buildID(out string) int {
	GinkgoHelper()
	m := executingBuild.FindStringSubmatch(out)
	Expect(m).NotTo(BeNil(), out)
	id, err := strconv.Atoi(m[1])
	Expect(err).NotTo(HaveOccurred())
	return id
}

const busybox = `platform: linux
image_resource:
  type: registry-image
  source: {repository: busybox}
`

// taskFile writes a task config running script with sh -c, plus extra.
func taskFile(extra, script string) string {
	GinkgoHelper()
	path := filepath.Join(GinkgoT().TempDir(), "task.yml")
	body := busybox + extra + "run:\n  path: sh\n  args: [-c, " + strconv.Quote(script) + "]\n"
	Expect(os.WriteFile(path, []byte(body), 0o644)).To(Succeed())
	return path
}

// flyContainers are the build's rows of `fly containers --json`.
func flyContainers(ctx context.Context, id int) []map[string]any {
	GinkgoHelper()
	res := run(ctx, testenv.FlyCmd{Args: []string{"containers", "--json"}})
	var all, out []map[string]any
	Expect(json.Unmarshal([]byte(res.Stdout), &all)).To(Succeed(), res.String())
	for _, c := range all {
		if c["build_id"] == float64(id) {
			out = append(out, c)
		}
	}
	return out
}

// flyVolumePaths are the blob keys `fly volumes --json` shows.
func flyVolumePaths(ctx context.Context) []string {
	GinkgoHelper()
	res := run(ctx, testenv.FlyCmd{Args: []string{"volumes", "--json"}})
	var all []struct {
		Path string `json:"path"`
	}
	Expect(json.Unmarshal([]byte(res.Stdout), &all)).To(Succeed(), res.String())
	var out []string
	for _, v := range all {
		out = append(out, v.Path)
	}
	return out
}

// buildPods are the step pods of a build on the suite's worker.
func buildPods(ctx context.Context, id int) []corev1.Pod {
	GinkgoHelper()
	pods, err := env.Admin.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{LabelSelector: podspec.BuildSelector(workerName, strconv.Itoa(id))})
	Expect(err).NotTo(HaveOccurred())
	return pods.Items
}

// blobExists reports whether key is in the bucket.
func blobExists(ctx context.Context, key string) bool {
	GinkgoHelper()
	_, err := store.Stat(ctx, key)
	if err != nil {
		Expect(err).To(MatchError(blobstore.ErrNotFound))
		return false
	}
	return true
}
