// Package economy_test proves the pod economy on the real local cluster,
// PostgreSQL and fly (issue 21): which finished steps' pods GC keeps and
// why, the per-worker cap, kept pods shrunk in place, and steps that wait
// for room instead of failing.
package economy_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/test/testenv"
)

func TestEconomy(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "pod economy")
}

var _ = ReportAfterSuite("spec times", testenv.RecordSpecTimes)

const (
	user       = "economy"
	workerName = "e2e-economy"
	// maxKept is the server's --gc-max-kept-pods-per-worker.
	maxKept = 8
	// keepAlive keeps finished steps running (interceptible, holding a
	// pod slot) long after every spec here: only GC frees them.
	keepAlive = 10 * time.Minute
)

var (
	env    *testenv.ATCEnv
	ns     testenv.WorkerNamespace
	server *testenv.ATC
	fly    *testenv.Fly
)

var _ = BeforeSuite(func(ctx SpecContext) {
	flyBin, err := testenv.FindFly()
	skipIfUnavailable(err)
	env, err = testenv.NewATCEnv(ctx, GinkgoT().TempDir())
	skipIfUnavailable(err)

	var removeNS func(context.Context) error
	ns, removeNS, err = env.NewWorkerNamespace(ctx, "porter-economy-")
	DeferCleanup(removeNS)
	Expect(err).NotTo(HaveOccurred())
	// Reading nodes tells a step that can never fit from one that waits.
	removeNodeReader, err := testenv.ApplyNodeReaderRBAC(ctx, env.Admin, ns.Name)
	DeferCleanup(removeNodeReader)
	Expect(err).NotTo(HaveOccurred())
	dsn, drop, err := env.NewDatabase(ctx)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(drop)

	password := rand.Text()
	server, err = env.NewATC(testenv.ATCConfig{
		Worker: ns, WorkerName: workerName, Database: dsn,
		LocalUsers: []string{user + ":" + password}, MainTeamUsers: []string{user},
		KeepAlive: keepAlive, PodRetention: time.Millisecond,
		Args: []string{"--gc-interval", "5s", "--gc-max-kept-pods-per-worker", strconv.Itoa(maxKept),
			"--gc-one-off-grace-period", "10m"},
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(server.Start(ctx)).To(Succeed())
	DeferCleanup(func() {
		Expect(server.Stop()).To(Succeed())
		GinkgoWriter.Printf("server log:\n%s\n", server.Log())
	})

	fly = testenv.NewFly(flyBin, GinkgoT().TempDir(), "economy")
	fly.Log = GinkgoWriter
	res, err := fly.Login(ctx, server.URL(), user, password)
	Expect(err).NotTo(HaveOccurred())
	Expect(res.ExitCode).To(Equal(0), res.String())
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

// run runs fly and expects it to succeed.
func run(ctx context.Context, args ...string) testenv.FlyResult {
	GinkgoHelper()
	res, err := fly.Exec(ctx, testenv.FlyCmd{Args: args})
	Expect(err).NotTo(HaveOccurred())
	Expect(res.ExitCode).To(Equal(0), res.String())
	return res
}

var executingBuild = regexp.MustCompile(`executing build (\d+)`)

func buildID(out string) string {
	GinkgoHelper()
	m := executingBuild.FindStringSubmatch(out)
	Expect(m).NotTo(BeNil(), out)
	return m[1]
}

// taskFile writes a busybox task config running script with sh -c, plus extra.
func taskFile(extra, script string) string {
	GinkgoHelper()
	path := filepath.Join(GinkgoT().TempDir(), "task.yml")
	body := "platform: linux\nimage_resource:\n  type: registry-image\n  source: {repository: busybox}\n" + extra +
		"run:\n  path: sh\n  args: [-c, " + strconv.Quote(script) + "]\n"
	Expect(os.WriteFile(path, []byte(body), 0o644)).To(Succeed())
	return path
}

// container is a row of `fly containers --json`.
type container struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	StepName  string `json:"step_name"`
	BuildID   int    `json:"build_id"`
	ExpiresIn string `json:"expires_in"`
	State     string `json:"state"`
}

func flyContainers(ctx context.Context) []container {
	GinkgoHelper()
	res := run(ctx, "containers", "--json")
	var out []container
	Expect(json.Unmarshal([]byte(res.Stdout), &out)).To(Succeed(), res.String())
	return out
}

// workerPods are the worker's step pods that hold a pod slot (not ended,
// not being deleted).
func workerPods(ctx context.Context) []corev1.Pod {
	GinkgoHelper()
	pods, err := env.Admin.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{LabelSelector: podspec.WorkerSelector(workerName)})
	Expect(err).NotTo(HaveOccurred())
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	return out
}

// keptCount is how many containers the containers API says GC keeps.
func keptCount(cs []container) int {
	n := 0
	for _, c := range cs {
		if strings.HasPrefix(c.ExpiresIn, "kept: ") {
			n++
		}
	}
	return n
}

func suffix() string { return strings.ToLower(rand.Text()[:8]) }

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
