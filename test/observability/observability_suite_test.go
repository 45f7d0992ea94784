// Package observability_test proves the ATC's observability on the real
// local cluster: /metrics, /livez and /readyz on the ops listener after
// real builds driven by Concourse's fly, a Kubernetes Event on the pod of a
// step that failed on its pod, one trace across the server and the step's
// sidecar (exported by OTLP to a receiver in this process), and JSON logs
// with client-go's klog in them.
package observability_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/url"
	"os"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"k8s.io/client-go/kubernetes"

	"github.com/porter-ci/porter/test/testenv"
)

func TestObservability(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "ATC observability end to end")
}

var _ = ReportAfterSuite("spec times", testenv.RecordSpecTimes)

const user = "obs"

var (
	admin     kubernetes.Interface
	namespace string
	server    *testenv.ATC
	fly       *testenv.Fly
	receiver  *traceReceiver
	dbProxy   *testenv.Proxy
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
	admin = env.Admin
	flyBin, err := testenv.FindFly()
	Expect(err).NotTo(HaveOccurred())

	ns, removeNS, err := env.NewWorkerNamespace(ctx, "porter-obs-")
	DeferCleanup(removeNS)
	Expect(err).NotTo(HaveOccurred())
	namespace = ns.Name
	dsn, dropDB, err := env.NewDatabase(ctx)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(dropDB)
	// The server reaches its database through a proxy a spec can cut.
	u, err := url.Parse(dsn)
	Expect(err).NotTo(HaveOccurred())
	dbProxy, err = testenv.StartProxy(u.Host)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(dbProxy.Close)
	u.Host = dbProxy.Addr
	dsn = u.String()

	// The OTLP receiver listens where both the server (on this host) and
	// the step pods (through the node's address) reach it.
	nodeIP := env.Cluster["PORTER_CLUSTER_NODE_IP"]
	ln, err := net.Listen("tcp", net.JoinHostPort(nodeIP, "0"))
	Expect(err).NotTo(HaveOccurred())
	receiver = newTraceReceiver()
	gs := grpc.NewServer()
	receiver.register(gs)
	go func() { _ = gs.Serve(ln) }()
	DeferCleanup(gs.Stop)
	otlp := "http://" + ln.Addr().String()

	// The sidecar's spans need this branch's porter binary in the step
	// pods: an image of its own, so porter.local/porter:dev (which other
	// suites run) is left alone.
	porterImage := buildPorterImage(ctx)

	password := rand.Text()
	server, err = env.NewATC(testenv.ATCConfig{
		Worker: ns, Database: dsn, Bucket: namespace,
		LocalUsers: []string{user + ":" + password}, MainTeamUsers: []string{user},
		Args: []string{"--porter-image", porterImage, "--pod-otlp-endpoint", otlp,
			"--log-format", "json", "--log-level", "debug"},
		Env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + otlp},
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(server.Start(ctx)).To(Succeed())
	DeferCleanup(func(context.Context) {
		Expect(server.Stop()).To(Succeed())
		GinkgoWriter.Printf("server log:\n%s\n", server.Log())
	})
	fly = testenv.NewFly(flyBin, GinkgoT().TempDir(), "obs")
	fly.Log = GinkgoWriter
	res, err := fly.Login(ctx, server.URL(), user, password)
	Expect(err).NotTo(HaveOccurred())
	Expect(res.ExitCode).To(Equal(0), res.String())
})

// buildPorterImage builds this tree's sidecar into an image of its own for
// the suite (removed after it).
func buildPorterImage(ctx context.Context) string {
	GinkgoHelper()
	ref, remove, err := testenv.BuildPorterImage(ctx, GinkgoT().TempDir(), "obs")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(remove)
	return ref
}
