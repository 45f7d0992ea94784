package fly_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/porter-ci/porter/test/testenv"
)

// flyWorker is what `fly workers --json` says of a worker.
type flyWorker struct {
	Name        string   `json:"name"`
	State       string   `json:"state"`
	Tags        []string `json:"tags"`
	Team        string   `json:"team"`
	ActiveTasks int      `json:"active_tasks"`
}

func workers(ctx context.Context, f *testenv.Fly) map[string]flyWorker {
	GinkgoHelper()
	res := succeed(ctx, f, "workers", "--json")
	var ws []flyWorker
	Expect(json.Unmarshal([]byte(res.Stdout), &ws)).To(Succeed(), res.String())
	out := map[string]flyWorker{}
	for _, w := range ws {
		out[w.Name] = w
	}
	return out
}

func workerState(ctx context.Context, f *testenv.Fly, name string) string {
	GinkgoHelper()
	return workers(ctx, f)[name].State // "" when it is not listed
}

// heartbeat makes a spec's server notice a worker's changes within seconds.
var heartbeat = []string{"--worker-heartbeat-interval", "1s"}

// buildRunning waits until the build has a step pod (a container).
func buildRunning(ctx context.Context, f *testenv.Fly, id int) {
	GinkgoHelper()
	Eventually(func() bool {
		res := succeed(ctx, f, "containers", "--json")
		var cs []struct {
			BuildID int `json:"build_id"`
		}
		Expect(json.Unmarshal([]byte(res.Stdout), &cs)).To(Succeed(), res.String())
		return slices.ContainsFunc(cs, func(c struct {
			BuildID int `json:"build_id"`
		}) bool {
			return c.BuildID == id
		})
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(500 * time.Millisecond).Should(BeTrue())
}

var _ = Describe("workers: land, retire, prune, stall and registration", func() {
	It("lands a worker with a running build: the build finishes, new steps wait, the worker is landed; retire removes it", func(ctx SpecContext) {
		srv := newServer(ctx, testenv.ATCConfig{Args: heartbeat})
		name := srv.Config.WorkerName
		f := newFly("landing")
		login(ctx, f, srv, adminUser, s.adminPassword)

		res := run(ctx, f, "prune-worker", "-w", name)
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		Expect(res.Output()).To(ContainSubstring("cannot prune running worker"))

		running := buildID(succeed(ctx, f, "execute", "--background", "-c",
			shTask("for i in 1 2 3 4 5 6 7 8; do echo line-$i; sleep 1; done")).Stdout)
		buildRunning(ctx, f, running)
		Expect(succeed(ctx, f, "land-worker", "-w", name).Stdout).To(Equal("landed '" + name + "'\n"))
		Expect(workerState(ctx, f, name)).To(Equal("landing"))

		waiting, err := f.Start(testenv.FlyCmd{Args: []string{"execute", "-c", shTask("echo never")}, Dir: GinkgoT().TempDir()})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(waiting.Kill)

		res = succeed(ctx, f, "watch", "-b", strconv.Itoa(running))
		Expect(lines(res.Stdout)).To(ContainElements("line-1", "line-8"))
		Expect(plain(res.Stdout)).To(ContainSubstring("succeeded"))
		Eventually(func() string { return workerState(ctx, f, name) }).WithContext(ctx).
			WithTimeout(30 * time.Second).Should(Equal("landed"))

		// The step that waited for a worker has not run; aborting it ends it.
		Consistently(waiting.Done()).WithTimeout(2 * time.Second).ShouldNot(BeClosed())
		Expect(waiting.Interrupt()).To(Succeed())
		out, err := waiting.Wait(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(plain(out.Stdout)).To(ContainSubstring("waiting for a worker (platform linux): worker " + name + " is land"))
		Expect(out.Stdout).NotTo(ContainSubstring("never\n"))
		waitingID := buildID(out.Stdout)
		Eventually(func() string {
			return plain(succeed(ctx, f, "builds", "--json").Stdout)
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(MatchRegexp(`"id":\s*` + strconv.Itoa(waitingID) + `,[^}]*"status":\s*"aborted"`))

		// fly has no retire-worker (a Concourse worker retires itself), so
		// the API is called as the worker's process would.
		succeed(ctx, f, "curl", "/api/v1/workers/"+name+"/retire", "--", "-sSf", "-X", "PUT")
		Eventually(func() map[string]flyWorker { return workers(ctx, f) }).WithContext(ctx).
			WithTimeout(30 * time.Second).ShouldNot(HaveKey(name))
		Expect(srv.Log()).To(ContainSubstring("worker retired"))
	})

	It("registers only workers it can use, naming why not: a kubeconfig pointing nowhere, a Role without pods/create", func(ctx SpecContext) {
		nowhere := filepath.Join(GinkgoT().TempDir(), "nowhere.kubeconfig")
		kc := clientcmdapi.NewConfig()
		kc.Clusters["nowhere"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1", InsecureSkipTLSVerify: true}
		kc.AuthInfos["nobody"] = &clientcmdapi.AuthInfo{Token: "none"}
		kc.Contexts["nowhere"] = &clientcmdapi.Context{Cluster: "nowhere", AuthInfo: "nobody"}
		kc.CurrentContext = "nowhere"
		Expect(clientcmd.WriteToFile(*kc, nowhere)).To(Succeed())

		noCreate, remove, err := s.env.NewWorkerNamespace(ctx, "porter-fly-nocreate-")
		DeferCleanup(remove)
		Expect(err).NotTo(HaveOccurred())
		roles := s.env.Admin.RbacV1().Roles(noCreate.Name)
		role, err := roles.Get(ctx, "atc-porter-runtime", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		for i, r := range role.Rules {
			if slices.Contains(r.Resources, "pods") {
				role.Rules[i].Verbs = slices.DeleteFunc(slices.Clone(r.Verbs), func(v string) bool { return v == "create" })
			}
		}
		_, err = roles.Update(ctx, role, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())

		srv := newServer(ctx, testenv.ATCConfig{Args: heartbeat, MoreWorkers: []testenv.Worker{
			{Name: "nowhere", Namespace: s.ns, Kubeconfig: nowhere},
			{Name: "no-create", Namespace: noCreate},
		}})
		f := newFly("registration")
		login(ctx, f, srv, adminUser, s.adminPassword)

		Eventually(srv.Log).WithTimeout(30 * time.Second).Should(And(
			MatchRegexp(`worker not registered.* worker=nowhere .*connection refused`),
			MatchRegexp(`worker not registered.* worker=no-create .*not allowed in namespace `+noCreate.Name+`: create pods"?\n`),
		))
		ws := workers(ctx, f)
		Expect(ws).To(HaveKey(srv.Config.WorkerName))
		Expect(ws).NotTo(HaveKey("nowhere"))
		Expect(ws).NotTo(HaveKey("no-create"))

		// Steps run on the worker that registered.
		res := succeed(ctx, f, "execute", "-c", shTask("echo placed"))
		Expect(plain(res.Stdout)).To(ContainSubstring("selected worker: " + srv.Config.WorkerName + "\n"))
	})

	It("stalls a worker whose API server is unreachable for 60 s, keeps its running build going without losing a line, and runs it again when back", func(ctx SpecContext) {
		apiAddr, err := testenv.APIServerAddr(s.ns.Kubeconfig)
		Expect(err).NotTo(HaveOccurred())
		proxy, err := testenv.StartProxy(apiAddr)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(proxy.Close)
		through := filepath.Join(GinkgoT().TempDir(), "through-proxy.kubeconfig")
		Expect(testenv.KubeconfigThrough(s.ns.Kubeconfig, proxy.Addr, through)).To(Succeed())

		srv := newServer(ctx, testenv.ATCConfig{Args: heartbeat, Worker: testenv.WorkerNamespace{Name: s.ns.Name, Kubeconfig: through}})
		name := srv.Config.WorkerName
		f := newFly("stall")
		login(ctx, f, srv, adminUser, s.adminPassword)

		const n = 80
		build, err := f.Start(testenv.FlyCmd{Args: []string{"execute", "-c",
			shTask("i=1; while [ $i -le " + strconv.Itoa(n) + " ]; do echo line-$i; i=$((i+1)); sleep 1; done")}, Dir: GinkgoT().TempDir()})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(build.Kill)
		Eventually(func() int { return workers(ctx, f)[name].ActiveTasks }).WithContext(ctx).WithTimeout(time.Minute).Should(Equal(1))
		// Started: its pod exists (the kubelet runs it from here on).
		Eventually(func() bool {
			pods, err := s.env.Admin.CoreV1().Pods(s.ns.Name).List(ctx, metav1.ListOptions{LabelSelector: "porter.dev/worker=" + name})
			Expect(err).NotTo(HaveOccurred())
			return len(pods.Items) == 1 && pods.Items[0].Status.Phase == "Running"
		}).WithContext(ctx).WithTimeout(time.Minute).Should(BeTrue())

		proxy.Down()
		down := time.Now()
		Eventually(func() string { return workerState(ctx, f, name) }).WithContext(ctx).
			WithTimeout(15 * time.Second).Should(Equal("stalled"))
		Expect(build.Done()).NotTo(BeClosed(), "the build ended while its worker's API server was unreachable")
		time.Sleep(time.Until(down.Add(60 * time.Second)))
		Expect(proxy.Up()).To(Succeed())
		Eventually(func() string { return workerState(ctx, f, name) }).WithContext(ctx).
			WithTimeout(15 * time.Second).Should(Equal("running"))

		res, err := build.Wait(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), res.String())
		got := slices.DeleteFunc(lines(res.Stdout), func(l string) bool { return len(l) < 5 || l[:5] != "line-" })
		want := make([]string, n)
		for i := range want {
			want[i] = "line-" + strconv.Itoa(i+1)
		}
		Expect(got).To(Equal(want))
		Expect(srv.Log()).To(ContainSubstring("worker stalled"))
		Expect(srv.Log()).To(ContainSubstring("worker running again"))
		_ = os.Remove(through)
	})
})
