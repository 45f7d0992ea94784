package economy_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/jackc/pgx/v5"

	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/test/testenv"
)

// countingProxy forwards a worker's API requests to the API server and
// counts them by verb and resource.
type countingProxy struct {
	mu     sync.Mutex
	counts map[string]int
}

var apiPath = regexp.MustCompile(`^/api/v1/namespaces/[^/]+/([a-z]+)(?:/[^/]+(?:/([a-z]+))?)?$`)

func (p *countingProxy) count(r *http.Request) {
	m := apiPath.FindStringSubmatch(r.URL.Path)
	key := "other"
	if m != nil {
		key = m[1]
		if m[2] != "" {
			key += "/" + m[2]
		}
	}
	verb := strings.ToLower(r.Method)
	if r.URL.Query().Get("watch") == "true" {
		verb = "watch"
	}
	p.mu.Lock()
	p.counts[verb+" "+key]++
	p.mu.Unlock()
}

func (p *countingProxy) snapshot() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for k, v := range p.counts {
		out[k] = v
	}
	return out
}

// startCountingProxy serves ns's API on a local port and returns a
// kubeconfig that reaches it.
func startCountingProxy(ns testenv.WorkerNamespace) (*countingProxy, string) {
	GinkgoHelper()
	cfg, err := clientcmd.BuildConfigFromFlags("", ns.Kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	rt, err := rest.TransportFor(cfg)
	Expect(err).NotTo(HaveOccurred())
	target, err := http.NewRequest(http.MethodGet, cfg.Host, nil)
	Expect(err).NotTo(HaveOccurred())
	p := &countingProxy{counts: map[string]int{}}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			p.count(r.In)
			r.SetURL(target.URL)
		},
		Transport:     rt,
		FlushInterval: -1, // watches stream
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	DeferCleanup(func() { _ = srv.Close() })

	kc := clientcmdapi.NewConfig()
	kc.Clusters["proxy"] = &clientcmdapi.Cluster{Server: "http://" + l.Addr().String()}
	kc.AuthInfos["none"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "none", Namespace: ns.Name}
	kc.CurrentContext = "proxy"
	path := filepath.Join(GinkgoT().TempDir(), "proxy.kubeconfig")
	Expect(clientcmd.WriteToFile(*kc, path)).To(Succeed())
	return p, path
}

// The cost of checks: many resources checking every few seconds run in
// one check pod, each check a session in it, so a check costs no pod and
// next to no API requests. PORTER_ECONOMY_CHECK_COST=1 measures longer
// (90 s instead of 40); PORTER_ECONOMY_ATC_BIN runs another
// atc-porter-runtime build (e.g. an older main's) for the figures before,
// without the assertions.
var _ = Describe("check economy", func() {
	It("runs many resources' checks in one check pod, with a fraction of an API request per check", func(ctx SpecContext) {
		resources, every, window := 10, 3*time.Second, 40*time.Second
		if os.Getenv("PORTER_ECONOMY_CHECK_COST") != "" {
			window = 90 * time.Second
		}
		// The load: PORTER_ECONOMY_CHECK_RESOURCES=200
		// PORTER_ECONOMY_CHECK_EVERY=1m PORTER_ECONOMY_CHECK_WINDOW=30m.
		if v := os.Getenv("PORTER_ECONOMY_CHECK_RESOURCES"); v != "" {
			n, err := strconv.Atoi(v)
			Expect(err).NotTo(HaveOccurred(), "PORTER_ECONOMY_CHECK_RESOURCES")
			resources = n
		}
		for name, d := range map[string]*time.Duration{"PORTER_ECONOMY_CHECK_EVERY": &every, "PORTER_ECONOMY_CHECK_WINDOW": &window} {
			if v := os.Getenv(name); v != "" {
				parsed, err := time.ParseDuration(v)
				Expect(err).NotTo(HaveOccurred(), name)
				*d = parsed
			}
		}
		cenv := *env
		args := []string{"--gc-interval", "5s"}
		other := os.Getenv("PORTER_ECONOMY_ATC_BIN")
		if other != "" {
			cenv.Bin = other
		} else {
			args = append(args, "--gc-max-kept-pods-per-worker", "50")
		}
		wns, removeNS, err := cenv.NewWorkerNamespace(ctx, "porter-checkcost-")
		DeferCleanup(removeNS)
		Expect(err).NotTo(HaveOccurred())
		proxy, kubeconfig := startCountingProxy(wns)
		dsn, drop, err := cenv.NewDatabase(ctx)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(drop)
		atc, err := cenv.NewATC(testenv.ATCConfig{
			Worker: testenv.WorkerNamespace{Name: wns.Name, Kubeconfig: kubeconfig}, WorkerName: "checkcost", Database: dsn,
			LocalUsers: []string{"cost:cost"}, MainTeamUsers: []string{"cost"},
			// As the demo runs: steps interceptible for 10 minutes.
			KeepAlive: 10 * time.Minute, PodRetention: 2 * time.Minute, Args: args,
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(atc.Start(ctx)).To(Succeed())
		DeferCleanup(func() { Expect(atc.Stop()).To(Succeed()) })
		f := testenv.NewFly(fly.Bin, GinkgoT().TempDir(), "cost")
		f.Log = GinkgoWriter
		res, err := f.Login(ctx, atc.URL(), "cost", "cost")
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), res.String())

		var cfg strings.Builder
		cfg.WriteString("resources:\n")
		for i := range resources {
			fmt.Fprintf(&cfg, "- name: r%d\n  type: mock\n  check_every: %s\n  source: {initial_version: v%d}\n", i, every, i)
		}
		cfg.WriteString("jobs:\n- name: j\n  plan:\n")
		for i := range resources {
			fmt.Fprintf(&cfg, "  - get: r%d\n", i)
		}
		path := filepath.Join(GinkgoT().TempDir(), "pipeline.yml")
		Expect(os.WriteFile(path, []byte(cfg.String()), 0o644)).To(Succeed())
		for _, args := range [][]string{{"set-pipeline", "-n", "-p", "cost", "-c", path}, {"unpause-pipeline", "-p", "cost"}} {
			res, err := f.Run(ctx, args...)
			Expect(err).NotTo(HaveOccurred())
			Expect(res.ExitCode).To(Equal(0), res.String())
		}
		db, err := pgx.Connect(ctx, dsn)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) { _ = db.Close(ctx) })
		checkBuilds := func(status string) int {
			var n int
			Expect(db.QueryRow(ctx, `SELECT count(*) FROM builds WHERE resource_id IS NOT NULL AND ($1 = '' OR status = $1)`, status).Scan(&n)).To(Succeed())
			return n
		}
		// The first checks create the pod: the window starts once it runs.
		Eventually(ctx, func() int { return checkBuilds("succeeded") }).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(BeNumerically(">=", resources))

		before, checksBefore := proxy.snapshot(), checkBuilds("")
		start := time.Now()
		mostPods := 0
		for time.Since(start) < window {
			pods, err := env.Admin.CoreV1().Pods(wns.Name).List(ctx, metav1.ListOptions{LabelSelector: podspec.WorkerSelector("checkcost")})
			Expect(err).NotTo(HaveOccurred())
			holding := 0
			for _, p := range pods.Items {
				if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
					holding++
				}
			}
			mostPods = max(mostPods, holding)
			time.Sleep(2 * time.Second)
		}
		after, checks := proxy.snapshot(), checkBuilds("")-checksBefore
		total, keys := 0, []string{}
		for k, v := range after {
			if d := v - before[k]; d > 0 {
				total += d
				keys = append(keys, fmt.Sprintf("%s=%d", k, d))
			}
		}
		slices.Sort(keys)
		podsCreated := after["post pods"] - before["post pods"]
		AddReportEntry("check economy", fmt.Sprintf("binary %q: %d resources every %s for %s: %d checks, %d pods created (%.2f per check), %d API requests (%.2f per check), most slot-holding pods %d; %s",
			cenv.Bin, resources, every, window, checks, podsCreated, float64(podsCreated)/float64(max(checks, 1)), total, float64(total)/float64(max(checks, 1)), mostPods, strings.Join(keys, " ")))
		if other != "" {
			return
		}
		// 10 resources every 3 s (with jitter) give about 130 checks in 40 s.
		Expect(checks).To(BeNumerically(">=", resources*int(window/every)/2), "the resources were not checked every %s", every)
		// A check pod takes checks for half its --check-pod-lifetime (10m):
		// a longer window sees its successor, and both for a while.
		successors := int(window / (5 * time.Minute))
		Expect(podsCreated).To(BeNumerically("<=", successors), "checks created pods instead of running in the check pod: %s", strings.Join(keys, " "))
		Expect(float64(total)/float64(checks)).To(BeNumerically("<", 0.5), "API requests per check: %s", strings.Join(keys, " "))
		Expect(mostPods).To(BeNumerically("<=", 1+min(successors, 1)), "one check pod should hold the checks")
		var bad int
		Expect(db.QueryRow(ctx, `SELECT count(*) FROM builds WHERE resource_id IS NOT NULL AND status NOT IN ('succeeded', 'started', 'pending')`).Scan(&bad)).To(Succeed())
		Expect(bad).To(BeZero(), "checks that did not succeed")
	}, SpecTimeout(time.Hour))
})
