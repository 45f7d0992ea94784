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

// The cost of checks, measured (opt-in: PORTER_ECONOMY_CHECK_COST=1, about
// 2 minutes). PORTER_ECONOMY_ATC_BIN runs another atc-porter-runtime build
// (e.g. main's) for the figures before.
var _ = Describe("check economy", func() {
	It("measures pods and API requests per check for resources checking every few seconds", func(ctx SpecContext) {
		if os.Getenv("PORTER_ECONOMY_CHECK_COST") == "" {
			Skip("opt-in: PORTER_ECONOMY_CHECK_COST=1")
		}
		const resources, every, window = 5, 5 * time.Second, 90 * time.Second
		cenv := *env
		args := []string{"--gc-interval", "5s"}
		if bin := os.Getenv("PORTER_ECONOMY_ATC_BIN"); bin != "" {
			cenv.Bin = bin
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

		before := proxy.snapshot()
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
		after := proxy.snapshot()
		total, keys := 0, []string{}
		for k, v := range after {
			if d := v - before[k]; d > 0 {
				total += d
				keys = append(keys, fmt.Sprintf("%s=%d", k, d))
			}
		}
		slices.Sort(keys)
		checks := after["post pods"] - before["post pods"]
		Expect(checks).To(BeNumerically(">", 0))
		AddReportEntry("check economy", fmt.Sprintf("binary %q: %d resources every %s for %s: %d check pods created (%.1f/min), %d API requests (%.1f per check), most slot-holding pods %d; %s",
			cenv.Bin, resources, every, window, checks, float64(checks)/window.Minutes(), total, float64(total)/float64(checks), mostPods, strings.Join(keys, " ")))
	}, SpecTimeout(6*time.Minute))
})
