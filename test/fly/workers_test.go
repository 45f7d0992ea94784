package fly_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/porter-ci/porter/pkg/podspec"
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
		type container struct {
			BuildID int `json:"build_id"`
		}
		var cs []container
		Expect(json.Unmarshal([]byte(res.Stdout), &cs)).To(Succeed(), res.String())
		return slices.Contains(cs, container{BuildID: id})
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
		Expect(plain(out.Stdout)).To(ContainSubstring("waiting for a worker (platform linux, team main): worker " + name + " is land"))
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
			// Registers, but runs team other's steps only.
			{Name: "team-other", Namespace: s.ns, Team: "other"},
		}})
		f := newFly("registration")
		login(ctx, f, srv, adminUser, s.adminPassword)

		Eventually(srv.Log).WithTimeout(30 * time.Second).Should(And(
			MatchRegexp(`worker not registered.* worker=nowhere .*connection refused`),
			MatchRegexp(`worker not registered.* worker=no-create .*not allowed in namespace `+noCreate.Name+`: create pods"?\n`),
		))
		Eventually(func() map[string]flyWorker { return workers(ctx, f) }).WithContext(ctx).WithTimeout(30 * time.Second).
			Should(HaveKey("team-other"))
		ws := workers(ctx, f)
		Expect(ws).To(HaveKey(srv.Config.WorkerName))
		Expect(ws["team-other"].Team).To(Equal("other"))
		Expect(ws).NotTo(HaveKey("nowhere"))
		Expect(ws).NotTo(HaveKey("no-create"))
		res := succeed(ctx, f, "workers", "-d")
		Expect(plain(res.Stdout)).To(MatchRegexp(`(?m)^team-other\s+0\s+linux\s+none\s+other\s+running\s+2\.5\s+\S+\s+namespace/`+s.ns.Name+`\s+s3://\S+\s+0\s+git, mock, registry-image, time\s*$`), res.String())

		// Team main's steps run on the shared worker that registered, never
		// on team other's (six tries: fewest-build-containers breaks ties at
		// random).
		for range 6 {
			res := succeed(ctx, f, "execute", "-c", shTask("true"))
			Expect(plain(res.Stdout)).To(ContainSubstring("selected worker: " + srv.Config.WorkerName + "\n"))
		}
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
		// Started: its pod exists (the kubelet runs it from here on); the
		// check pod its image's check ran in may be there too.
		Eventually(func() bool {
			pods, err := s.env.Admin.CoreV1().Pods(s.ns.Name).List(ctx, metav1.ListOptions{LabelSelector: "porter.dev/worker=" + name})
			Expect(err).NotTo(HaveOccurred())
			pods.Items = slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return podspec.IsCheckPod(p.Labels[podspec.LabelStep]) })
			return len(pods.Items) == 1 && pods.Items[0].Status.Phase == "Running"
		}).WithContext(ctx).WithTimeout(time.Minute).Should(BeTrue())

		proxy.Down()
		down := time.Now()
		Eventually(func() string { return workerState(ctx, f, name) }).WithContext(ctx).
			WithTimeout(15 * time.Second).Should(Equal("stalled"))
		Expect(build.Done()).NotTo(BeClosed(), "the build ended while its worker's API server was unreachable")
		// A stalled worker may be pruned; alive again, it registers anew.
		Expect(succeed(ctx, f, "prune-worker", "-w", name).Stdout).To(Equal("pruned '" + name + "'\n"))
		Expect(workers(ctx, f)).NotTo(HaveKey(name))
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
	})
})

// cutFromPods keeps process pid from opening connections to cidr: it moves
// the process into a cgroup of its own and rejects, in iptables, new
// connections from that cgroup to cidr (answers on connections the pods
// opened still flow). Undone at the spec's end.
func cutFromPods(pid int, cidr string) (cgroup string) {
	GinkgoHelper()
	// The cgroup v2 hierarchy: hybrid hosts mount it at unified/.
	root := "/sys/fs/cgroup/unified"
	if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
		root = "/sys/fs/cgroup"
	}
	_, err := os.Stat(filepath.Join(root, "cgroup.subtree_control"))
	Expect(err).NotTo(HaveOccurred(), "no cgroup v2 hierarchy to put the server in")
	name := "porter-noroute-" + strconv.Itoa(pid)
	dir := filepath.Join(root, name)
	Expect(os.Mkdir(dir, 0o755)).To(Succeed())
	rule := []string{"OUTPUT", "-m", "cgroup", "--path", name, "-d", cidr, "-m", "conntrack", "--ctstate", "NEW",
		"-j", "REJECT", "--reject-with", "icmp-net-prohibited"}
	DeferCleanup(func() {
		// Out of the cgroup first (it cannot be removed with a process in it).
		_ = os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
		_ = exec.Command("iptables", append([]string{"-D"}, rule...)...).Run()
		Expect(os.Remove(dir)).To(Succeed())
	})
	Expect(os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)).To(Succeed())
	out, err := exec.Command("iptables", append([]string{"-I"}, rule...)...).CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), string(out))
	return dir
}

// dialFrom tries a TCP connection to addr from inside cgroup dir and
// returns what bash said.
func dialFrom(ctx context.Context, dir, addr string) string {
	host, port, _ := strings.Cut(addr, ":")
	script := "echo $$ > " + filepath.Join(dir, "cgroup.procs") + "; exec 3<>/dev/tcp/" + host + "/" + port
	out, _ := exec.CommandContext(ctx, "bash", "-c", script).CombinedOutput()
	return string(out)
}

var _ = Describe("a worker the ATC cannot reach", func() {
	It("runs, streams and intercepts a step while the ATC cannot open a connection to the pod network (the sidecar dials out)", func(ctx SpecContext) {
		srv := newServer(ctx, testenv.ATCConfig{KeepAlive: 2 * time.Minute})
		cgroup := cutFromPods(srv.Pid(), s.env.Cluster["PORTER_CLUSTER_POD_SUBNET"])

		f := newFly("unreachable")
		login(ctx, f, srv, adminUser, s.adminPassword)
		res := succeed(ctx, f, "execute", "-c", shTask("echo streamed-line; echo intercept-me > marker.txt"))
		Expect(lines(res.Stdout)).To(ContainElement("streamed-line"))
		id := strconv.Itoa(buildID(res.Stdout))

		// The cut is real: from the server's cgroup the step's pod cannot be
		// dialled, while from outside the pod itself answers (refusing).
		pods, err := s.env.Admin.CoreV1().Pods(s.ns.Name).List(ctx, metav1.ListOptions{LabelSelector: "porter.dev/worker=" + srv.Config.WorkerName})
		Expect(err).NotTo(HaveOccurred())
		Expect(pods.Items).NotTo(BeEmpty())
		podAddr := pods.Items[0].Status.PodIP + ":1"
		Expect(dialFrom(ctx, cgroup, podAddr)).To(ContainSubstring("Network is unreachable"))
		out, _ := exec.CommandContext(ctx, "bash", "-c", "exec 3<>/dev/tcp/"+strings.Replace(podAddr, ":", "/", 1)).CombinedOutput()
		Expect(string(out)).To(ContainSubstring("Connection refused"))

		res = succeed(ctx, f, "intercept", "-b", id, "-s", "one-off", "--", "sh", "-c", "cat marker.txt")
		Expect(res.Stdout).To(Equal("intercept-me\n"))
	})
})
