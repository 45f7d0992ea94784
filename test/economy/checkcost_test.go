package economy_test

import (
	"bytes"
	"fmt"
	"io"
	"maps"
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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/jackc/pgx/v5"

	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/test/testenv"
)

// countingProxy forwards a worker's API requests to the API server and
// counts them by verb and resource, and by the object they name (a POST's
// from its body), so a build's own requests can be told from the checks'.
type countingProxy struct {
	mu     sync.Mutex
	counts map[string]int
	byName map[string]int
}

var apiPath = regexp.MustCompile(`^/api/v1/namespaces/[^/]+/([a-z]+)(?:/([^/]+)(?:/([a-z]+))?)?$`)

// count reads a POST's body from out, the request forwarded, and puts it
// back for it.
func (p *countingProxy) count(r, out *http.Request) {
	m := apiPath.FindStringSubmatch(r.URL.Path)
	key, name := "other", ""
	if m != nil {
		key, name = m[1], m[2]
		if m[3] != "" {
			key += "/" + m[3]
		}
	}
	if name == "" && r.Method == http.MethodPost && out.Body != nil {
		// client-go sends core objects as protobuf.
		body, err := io.ReadAll(out.Body)
		if err == nil {
			if obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil); err == nil {
				if m, err := meta.Accessor(obj); err == nil {
					name = m.GetName()
				}
			}
		}
		out.Body = io.NopCloser(bytes.NewReader(body))
	}
	verb := strings.ToLower(r.Method)
	if r.URL.Query().Get("watch") == "true" {
		verb = "watch"
	}
	p.mu.Lock()
	p.counts[verb+" "+key]++
	if name != "" {
		p.byName[name]++
	}
	p.mu.Unlock()
}

// snapshot returns the counts by verb and resource, and by object name.
func (p *countingProxy) snapshot() (byKey, byName map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.counts), maps.Clone(p.byName)
}

// requestsNaming counts the requests between two snapshots by name that
// named an object whose name starts with one of prefixes.
func requestsNaming(before, after map[string]int, prefixes []string) int {
	n := 0
	for name, c := range after {
		if slices.ContainsFunc(prefixes, func(pre string) bool { return strings.HasPrefix(name, pre) }) {
			n += c - before[name]
		}
	}
	return n
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
	p := &countingProxy{counts: map[string]int{}, byName: map[string]int{}}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			p.count(r.In, r.Out)
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
// next to no API requests, while a job's builds run beside them
// (PORTER_ECONOMY_CHECK_BUILD_EVERY, default 10s) and none of them waits
// for the checks. PORTER_ECONOMY_CHECK_COST=1 measures longer (90 s
// instead of 40); PORTER_ECONOMY_ATC_BIN runs another atc-porter-runtime
// build (e.g. an older main's) for the figures before, without the
// assertions.
var _ = Describe("check economy", func() {
	It("runs many resources' checks in one check pod, with a fraction of an API request per check", func(ctx SpecContext) {
		resources, every, window, buildEvery := 10, 3*time.Second, 40*time.Second, 10*time.Second
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
		for name, d := range map[string]*time.Duration{"PORTER_ECONOMY_CHECK_EVERY": &every, "PORTER_ECONOMY_CHECK_WINDOW": &window, "PORTER_ECONOMY_CHECK_BUILD_EVERY": &buildEvery} {
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
		// The builds beside the checks: a task in a pod of its own.
		cfg.WriteString("- name: beside\n  plan:\n  - task: t\n    config:\n      platform: linux\n" +
			"      image_resource: {type: registry-image, source: {repository: busybox}}\n" +
			"      run: {path: sh, args: [-c, 'echo beside']}\n")
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

		// The first build beside them makes the check pod of its image's
		// type (registry-image), before the window.
		res, err = f.Run(ctx, "trigger-job", "-w", "-j", "cost/beside")
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), res.String())

		before, namesBefore := proxy.snapshot()
		checksBefore := checkBuilds("")
		start := time.Now()
		mostPods, mostCheckPods, triggered := 0, 0, 1
		checkPods := map[string]bool{}
		for next := start; time.Since(start) < window; time.Sleep(2 * time.Second) {
			if !time.Now().Before(next) {
				res, err := f.Run(ctx, "trigger-job", "-j", "cost/beside")
				Expect(err).NotTo(HaveOccurred())
				Expect(res.ExitCode).To(Equal(0), res.String())
				triggered++
				next = next.Add(buildEvery)
			}
			pods, err := env.Admin.CoreV1().Pods(wns.Name).List(ctx, metav1.ListOptions{LabelSelector: podspec.WorkerSelector("checkcost")})
			Expect(err).NotTo(HaveOccurred())
			holding, holdingChecks := 0, 0
			for _, p := range pods.Items {
				if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
					holding++
					if podspec.IsCheckPod(p.Labels[podspec.LabelStep]) {
						holdingChecks++
						checkPods[p.Name] = true
					}
				}
			}
			mostPods, mostCheckPods = max(mostPods, holding), max(mostCheckPods, holdingChecks)
		}

		// Every build beside the checks ends, and how long each took is
		// what a person waiting for it sees.
		type besideBuild struct {
			id           int64
			status       string
			queued, took float64
		}
		var builds []besideBuild
		Eventually(ctx, func(g Gomega) {
			rows, err := db.Query(ctx, `SELECT b.id, b.status, extract(epoch FROM coalesce(b.start_time, now()) - b.create_time)::float8,
				extract(epoch FROM coalesce(b.end_time, now()) - b.create_time)::float8
				FROM builds b JOIN jobs j ON j.id = b.job_id WHERE j.name = 'beside' ORDER BY b.id`)
			g.Expect(err).NotTo(HaveOccurred())
			builds = builds[:0]
			for rows.Next() {
				var b besideBuild
				g.Expect(rows.Scan(&b.id, &b.status, &b.queued, &b.took)).To(Succeed())
				builds = append(builds, b)
			}
			g.Expect(rows.Err()).NotTo(HaveOccurred())
			g.Expect(builds).To(HaveLen(triggered))
			for _, b := range builds {
				g.Expect(b.status).NotTo(BeElementOf("pending", "started"), "build %d", b.id)
			}
		}).WithTimeout(3 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		// The window ends once its builds have, so that every build's own
		// requests are in the counts.
		after, namesAfter := proxy.snapshot()
		checks, measured := checkBuilds("")-checksBefore, time.Since(start).Round(time.Second)
		var buildPrefixes []string
		var took []float64
		mostQueued := 0.0
		for _, b := range builds {
			// A job's step IDs start with "b<build id>-"; the pod and its
			// Secret are named "porter-<step id>".
			buildPrefixes = append(buildPrefixes, fmt.Sprintf("porter-b%d-", b.id))
			took = append(took, b.took)
			mostQueued = max(mostQueued, b.queued)
		}
		slices.Sort(took)
		buildRequests := requestsNaming(namesBefore, namesAfter, buildPrefixes)

		total, keys := 0, []string{}
		for k, v := range after {
			if d := v - before[k]; d > 0 {
				total += d
				keys = append(keys, fmt.Sprintf("%s=%d", k, d))
			}
		}
		slices.Sort(keys)
		checkRequests := total - buildRequests
		podsCreated := after["post pods"] - before["post pods"] - (len(builds) - 1)
		AddReportEntry("check economy", fmt.Sprintf("binary %q: %d resources every %s for %s: %d checks, %d pods created for checks (%.2f per check), %d API requests for checks (%.2f per check), most slot-holding pods %d (check pods %d, %d in all); "+
			"%d builds beside, one every %s: %d API requests of their own, took median %.1fs, longest %.1fs, longest until started %.1fs; %s",
			cenv.Bin, resources, every, measured, checks, podsCreated, float64(podsCreated)/float64(max(checks, 1)), checkRequests, float64(checkRequests)/float64(max(checks, 1)),
			mostPods, mostCheckPods, len(checkPods), len(builds), buildEvery, buildRequests, took[len(took)/2], took[len(took)-1], mostQueued, strings.Join(keys, " ")))
		if other != "" {
			return
		}
		// 10 resources every 3 s (with jitter) give about 130 checks in 40 s.
		Expect(checks).To(BeNumerically(">=", resources*int(measured/every)/2), "the resources were not checked every %s", every)
		// A check pod takes checks for half its --check-pod-lifetime (10m):
		// a longer window sees its successor, and both for a while.
		successors := int(measured / (5 * time.Minute))
		// The builds' image checks (registry-image) have a check pod of
		// their own, made before the window.
		Expect(podsCreated).To(BeNumerically("<=", 2*successors), "checks created pods instead of running in the check pod: %s", strings.Join(keys, " "))
		// Checks cost the API server next to nothing: the check pod is made
		// before the window, and GC reads pods from the watch cache.
		Expect(float64(checkRequests)/float64(checks)).To(BeNumerically("<", 0.1), "API requests per check: %s", strings.Join(keys, " "))
		// Per resource type: one pod taking checks; past half a lifetime its
		// successor, and for a moment the one before still ending.
		Expect(mostCheckPods).To(BeNumerically("<=", 2*(1+min(successors, 2))), "one check pod per resource type should hold the checks")
		for _, b := range builds {
			Expect(b.status).To(Equal("succeeded"), "build %d of the job beside the checks", b.id)
		}
		// Starved: a build waiting for its pod behind the checks. A `true`
		// task takes about a second here; a minute is far beyond it.
		Expect(took[len(took)-1]).To(BeNumerically("<", 60), "a build beside the checks took %.1fs", took[len(took)-1])
		var bad int
		Expect(db.QueryRow(ctx, `SELECT count(*) FROM builds WHERE resource_id IS NOT NULL AND status NOT IN ('succeeded', 'started', 'pending')`).Scan(&bad)).To(Succeed())
		Expect(bad).To(BeZero(), "checks that did not succeed")
	}, SpecTimeout(time.Hour))
})
