package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/test/testenv"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sample is one look at the server and the cluster.
type sample struct {
	At time.Time `json:"at"`
	// KeptPods are pods whose build has ended but which still hold a pod
	// slot (kept for intercept); DonePods have ended altogether and hold
	// no slot, only an API object.
	KeptPods    int   `json:"kept_pods"`
	DonePods    int   `json:"done_pods"`
	RunningPods int   `json:"running_pods"`
	NodePods    int   `json:"node_pods"`
	RSSBytes    int64 `json:"rss_bytes,omitempty"`
	Goroutines  int   `json:"goroutines,omitempty"`
	Builds      int64 `json:"builds,omitempty"`
	DBRows      int64 `json:"db_rows,omitempty"`
	Objects     int64 `json:"objects,omitempty"`
	// OverCap names the kept pods when there were more than the cap.
	OverCap []string `json:"over_cap,omitempty"`
	kept    []string
}

// gcSettle is how long after its build ended a pod counts as kept: the
// end nudges a GC pass, which the server spaces a second apart, and the
// pass's deletes take a moment more.
const gcSettle = 5 * time.Second

type sampler struct {
	s        *soak
	node     string
	nodeCap  int64
	objects  *minio.Client
	bucket   string
	mu       sync.Mutex
	samples  []sample
	lastObjs time.Time
}

func newSampler(ctx context.Context, s *soak) (*sampler, error) {
	nodes, err := s.env.Admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		return nil, fmt.Errorf("want the local cluster's one node: %v (%d nodes)", err, len(nodes.Items))
	}
	c := s.env.Cluster
	mc, err := minio.New(c["PORTER_CLUSTER_MINIO_ENDPOINT"], &minio.Options{
		Creds:  credentials.NewStaticV4(c["PORTER_CLUSTER_MINIO_ACCESS_KEY"], c["PORTER_CLUSTER_MINIO_SECRET_KEY"], ""),
		Secure: c["PORTER_CLUSTER_MINIO_SECURE"] == "true",
	})
	if err != nil {
		return nil, fmt.Errorf("MinIO client: %w", err)
	}
	n := nodes.Items[0]
	return &sampler{s: s, node: n.Name, nodeCap: n.Status.Allocatable.Pods().Value(), objects: mc, bucket: s.srv.Config.Bucket}, nil
}

func (m *sampler) close() {}

func (m *sampler) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		m.sampleOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sampleOnce takes one sample; what cannot be read now (a part is down
// for a fault) stays zero and is left out of the figures.
func (m *sampler) sampleOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	sm := sample{At: time.Now()}
	kube := m.s.env.Admin.CoreV1()
	if pods, err := kube.Pods(m.s.ns.Name).List(ctx, metav1.ListOptions{}); err == nil {
		ended := m.s.endedBuilds(ctx, pods.Items, gcSettle)
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			switch {
			case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
				sm.DonePods++
			case ended[p.Labels[podspec.LabelBuild]]:
				sm.KeptPods++
				sm.kept = append(sm.kept, p.Name)
			default:
				sm.RunningPods++
			}
		}
	}
	if pods, err := kube.Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + m.node}); err == nil {
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				sm.NodePods++
			}
		}
	}
	if pid := m.s.srv.Pid(); pid > 0 {
		sm.RSSBytes = rss(pid)
	}
	sm.Goroutines = goroutines(ctx, m.s.srv.OpsURL()+"/metrics")
	if conn, err := pgx.Connect(ctx, m.s.pg.DSN); err == nil {
		_ = conn.QueryRow(ctx, "SELECT count(*) FROM builds").Scan(&sm.Builds)
		_ = conn.QueryRow(ctx, "SELECT coalesce(sum(n_live_tup), 0)::bigint FROM pg_stat_user_tables").Scan(&sm.DBRows)
		conn.Close(ctx)
	}
	// Listing the bucket costs more: twice a minute is enough.
	if time.Since(m.lastObjs) > 30*time.Second {
		var n int64
		for o := range m.objects.ListObjects(ctx, m.bucket, minio.ListObjectsOptions{Recursive: true}) {
			if o.Err != nil {
				n = 0
				break
			}
			n++
		}
		if n > 0 {
			sm.Objects = n
			m.lastObjs = time.Now()
		}
	}
	if sm.KeptPods > m.s.cfg.KeptCap {
		sm.OverCap = sm.kept
	}
	sm.kept = nil
	m.mu.Lock()
	m.samples = append(m.samples, sm)
	m.mu.Unlock()
}

// endedBuilds are the builds (by pod label) of pods that PostgreSQL says
// ended at least settle ago: their pods are kept ones, whose sidecar (and
// the step container, for intercept) still run. The end of a build nudges
// a GC pass (at most a second later), so a build that has just ended may
// push the count over the cap for that long. Empty while PostgreSQL is
// down.
func (s *soak) endedBuilds(ctx context.Context, pods []corev1.Pod, settle time.Duration) map[string]bool {
	var ids []int64
	for _, p := range pods {
		if id, err := strconv.ParseInt(p.Labels[podspec.LabelBuild], 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	ended := map[string]bool{}
	conn, err := pgx.Connect(ctx, s.pg.DSN)
	if err != nil {
		return ended
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT id FROM builds WHERE id = ANY($1) AND end_time < now() - make_interval(secs => $2)", ids, settle.Seconds())
	if err != nil {
		return ended
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return ended
	}
	for _, id := range done {
		ended[strconv.FormatInt(id, 10)] = true
	}
	return ended
}

func rss(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func goroutines(ctx context.Context, url string) int {
	v, _ := testenv.Metric(ctx, url, "go_goroutines")
	return int(v)
}

// build is one build as PostgreSQL has it.
type build struct {
	ID      int64     `json:"id"`
	Name    string    `json:"name"`
	Job     string    `json:"job,omitempty"`
	Check   bool      `json:"check,omitempty"`
	Status  string    `json:"status"`
	Created time.Time `json:"created"`
	End     time.Time `json:"end"`
	Reaped  bool      `json:"reaped,omitempty"`
	// ServerLog: the server's last log lines about an unexplained build.
	ServerLog []string `json:"server_log,omitempty"`
}

// reaped says whether build id's log has been reaped.
func (s *soak) reaped(ctx context.Context, id int64) (bool, error) {
	conn, err := pgx.Connect(ctx, s.pg.DSN)
	if err != nil {
		return false, err
	}
	defer conn.Close(ctx)
	var reaped bool
	err = conn.QueryRow(ctx, "SELECT reap_time IS NOT NULL FROM builds WHERE id = $1", id).Scan(&reaped)
	return reaped, err
}

func (s *soak) builds(ctx context.Context) ([]build, error) {
	conn, err := pgx.Connect(ctx, s.pg.DSN)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT b.id, b.name, coalesce(j.name, ''), b.resource_id IS NOT NULL, b.status,
		b.create_time, coalesce(b.end_time, 'epoch'), b.reap_time IS NOT NULL FROM builds b LEFT JOIN jobs j ON j.id = b.job_id ORDER BY b.id`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (build, error) {
		var b build
		err := r.Scan(&b.ID, &b.Name, &b.Job, &b.Check, &b.Status, &b.Created, &b.End, &b.Reaped)
		return b, err
	})
}

func final(status string) bool { return status != "pending" && status != "started" }

// drain waits until every build that existed when the load stopped has
// finished, and returns those that did not within timeout.
func (s *soak) drain(ctx context.Context, timeout time.Duration) ([]build, error) {
	var last int64
	deadline := time.Now().Add(timeout)
	for {
		bs, err := s.builds(ctx)
		if err != nil {
			return nil, err
		}
		if last == 0 && len(bs) > 0 {
			last = bs[len(bs)-1].ID
		}
		var open []build
		for _, b := range bs {
			if b.ID <= last && !final(b.Status) {
				open = append(open, b)
			}
		}
		if len(open) == 0 || time.Now().After(deadline) {
			return open, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// checkRow is one line of the results table.
type checkRow struct {
	Check  string `json:"check"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

type results struct {
	Seed     uint64        `json:"seed"`
	Duration string        `json:"duration"`
	Checks   []checkRow    `json:"checks"`
	Faults   []faultRecord `json:"faults"`
	Ops      []opRecord    `json:"failed_operations"`
	Samples  []sample      `json:"samples"`
	Builds   []build       `json:"unexplained_builds"`
}

func (r *results) add(check string, ok bool, format string, args ...any) {
	r.Checks = append(r.Checks, checkRow{Check: check, OK: ok, Detail: fmt.Sprintf(format, args...)})
}

func (r *results) ok() bool {
	for _, c := range r.Checks {
		if !c.OK {
			return false
		}
	}
	return true
}

func (r *results) print(w io.Writer) {
	fmt.Fprintf(w, "\nsoak results (seed %d, %s)\n", r.Seed, r.Duration)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "check\tresult\tdetail")
	for _, c := range r.Checks {
		res := "PASS"
		if !c.OK {
			res = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Check, res, c.Detail)
	}
	tw.Flush()
	if len(r.Faults) > 0 {
		fmt.Fprintln(w, "\nfaults:")
		for _, f := range r.Faults {
			fmt.Fprintf(w, "  %s  %-15s %6s  %s\n", f.Start.Format("15:04:05"), f.Name, f.End.Sub(f.Start).Round(time.Millisecond), f.Error)
		}
	}
	for _, b := range r.Builds {
		fmt.Fprintf(w, "  unexplained: build %d (%s %s) %s\n", b.ID, b.Job, b.Name, b.Status)
		for _, l := range b.ServerLog {
			fmt.Fprintf(w, "    | %s\n", l)
		}
	}
	for _, o := range r.Ops {
		fmt.Fprintf(w, "  failed %s at %s: %s\n", o.Kind, o.Start.Format("15:04:05"), o.Error)
	}
}

func (r *results) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// explained: something that went wrong between start and end overlaps a
// fault, or the minute after it, when the parts come back.
func (s *soak) explained(start, end time.Time) bool {
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	for _, f := range s.rec.faults {
		if !start.After(f.End.Add(90*time.Second)) && !end.Before(f.Start.Add(-5*time.Second)) {
			return true
		}
	}
	return false
}

func (s *soak) check(ctx context.Context, smp *sampler, hung []build, took time.Duration) (*results, error) {
	r := &results{Seed: s.cfg.Seed, Duration: took.Round(time.Second).String()}
	r.Faults = slices.Clone(s.rec.faults)
	r.add("every build finished", len(hung) == 0, "%d builds still pending or started 5m after the load stopped", len(hung))
	r.Builds = append(r.Builds, hung...)

	bs, err := s.builds(ctx)
	if err != nil {
		return nil, err
	}
	counts := map[string]int{}
	var errored, explainedN, checkErr, badAbort, reaped, manual int
	var replay []build
	for _, b := range bs {
		counts[b.Status]++
		end := b.End
		if b.Job == "manual" && final(b.Status) {
			manual++
			if b.Reaped {
				reaped++
			}
		}
		if !final(b.Status) {
			continue
		}
		switch {
		case b.Job == "slow":
			// An abort the server accepted while the build ran must abort
			// it, whatever fault came after: nothing excuses losing it.
			// Builds whose abort was refused, or never sent (trigger-job
			// lost in a fault), sleep to their end, within the drain.
			s.rec.mu.Lock()
			sent, accepted := s.rec.abortsAccepted[b.Name]
			s.rec.mu.Unlock()
			lost := accepted && (b.End.IsZero() || b.End.After(sent))
			if b.Status != "aborted" && (lost || !s.explained(b.Created, end)) {
				badAbort++
				r.Builds = append(r.Builds, b)
			}
		case b.Status == "succeeded":
			if b.Job != "" && !b.Check && !b.Reaped {
				replay = append(replay, b)
			}
		case s.explained(b.Created, end):
			explainedN++
		case b.Check:
			checkErr++
			r.Builds = append(r.Builds, b)
		default:
			errored++
			r.Builds = append(r.Builds, b)
		}
	}
	r.add("no unexplained failure", errored == 0, "%d builds: %v; %d not succeeded but overlapping a fault", len(bs), counts, explainedN)
	r.add("no unexplained errored check", checkErr == 0, "%d check builds failed or errored outside a fault", checkErr)
	// The manual job keeps 5 builds' logs (build_log_retention); GC runs
	// every 30 s, so all but about a pass's worth of the others are gone.
	r.add("build logs reaped by retention", manual <= 8 || reaped >= manual-8, "%d of %d finished builds of the manual job reaped (it keeps 5)", reaped, manual)
	r.add("aborts abort", badAbort == 0, "%d builds of the slow job ended other than aborted", badAbort)
	if len(r.Builds) > 0 {
		ids := make([]int64, len(r.Builds))
		for i, b := range r.Builds {
			ids[i] = b.ID
		}
		about := serverLogAbout(s.srv.LogPath(), ids, 8)
		for i := range r.Builds {
			r.Builds[i].ServerLog = about[r.Builds[i].ID]
		}
	}

	var opsN, opsBad, opsExplained int
	s.rec.mu.Lock()
	ops := slices.Clone(s.rec.ops)
	s.rec.mu.Unlock()
	perKind := map[string][2]int{}
	for _, o := range ops {
		opsN++
		k := perKind[o.Kind]
		k[0]++
		if o.Error != "" {
			if s.explained(o.Start, o.End) {
				opsExplained++
			} else {
				opsBad++
				k[1]++
				r.Ops = append(r.Ops, o)
			}
		}
		perKind[o.Kind] = k
	}
	r.add("fly operations succeed", opsBad == 0, "%d runs %v (runs, unexplained failures); %d failed during a fault", opsN, perKind, opsExplained)

	// Replay: every numbered line once and in order, from the stored log.
	if len(replay) > 80 {
		picked := slices.Clone(replay[len(replay)-60:])
		for range 20 {
			picked = append(picked, replay[s.intn(len(replay)-60)])
		}
		replay = picked
	}
	var replayBad, reapedMeanwhile int
	for _, b := range replay {
		res, err := s.fly.Run(ctx, "watch", "-b", strconv.FormatInt(b.ID, 10))
		if err != nil || res.ExitCode != 0 {
			replayBad++
			s.rec.logProblem(fmt.Sprintf("replay: fly watch -b %d: %v %s", b.ID, err, lastLines(res.Output(), 2)))
			continue
		}
		want := map[string]bool{}
		for _, t := range jobTags[b.Job] {
			want[t] = true
		}
		if p := checkLines(res.Stdout, want); p != "" {
			// GC goes on while the builds are replayed: the manual job's
			// older builds lose their logs to its build_log_retention once
			// younger ones end (CI saw a pass reap 2 during the replay).
			if reaped, err := s.reaped(ctx, b.ID); err == nil && reaped {
				reapedMeanwhile++
				continue
			}
			replayBad++
			s.rec.logProblem(fmt.Sprintf("replay: build %d (%s #%s): %s", b.ID, b.Job, b.Name, p))
		}
	}
	s.rec.mu.Lock()
	problems := slices.Clone(s.rec.logProblems)
	artifacts := s.rec.artifacts
	s.rec.mu.Unlock()
	r.add("log lines once, in order", len(problems) == 0, "%d builds replayed with fly watch (%d bad, %d reaped by retention meanwhile), live fly execute logs checked; %s",
		len(replay), replayBad, reapedMeanwhile, strings.Join(first(problems, 3), "; "))
	r.add("outputs identical to inputs", artifacts[1] == 0 && artifacts[0] > 0, "%d identical, %d different", artifacts[0], artifacts[1])

	smp.mu.Lock()
	r.Samples = slices.Clone(smp.samples)
	smp.mu.Unlock()
	var maxKept, maxDone, maxNode int
	for _, sm := range r.Samples {
		maxKept, maxDone, maxNode = max(maxKept, sm.KeptPods), max(maxDone, sm.DonePods), max(maxNode, sm.NodePods)
	}
	if r.enoughSamples("kept pods within the cap", r.Samples) {
		r.add("kept pods within the cap", maxKept <= s.cfg.KeptCap, "at most %d kept %s after their build ended (cap %d) and %d ended pods left, %d samples",
			maxKept, gcSettle, s.cfg.KeptCap, maxDone, len(r.Samples))
	}
	if r.enoughSamples("node never out of pod slots", r.Samples) {
		r.add("node never out of pod slots", int64(maxNode) < smp.nodeCap, "at most %d of %d pod slots in use", maxNode, smp.nodeCap)
	}
	r.addBounded("server RSS bounded", r.Samples, func(sm sample) int64 { return sm.RSSBytes }, 1.5, 64<<20, mib)
	r.addBounded("goroutines bounded", r.Samples, func(sm sample) int64 { return int64(sm.Goroutines) }, 1.5, 200, plain)
	r.addGrowth("database rows per build", r.Samples, func(sm sample) int64 { return sm.DBRows })
	r.addGrowth("bucket objects per build", r.Samples, func(sm sample) int64 { return sm.Objects })
	return r, nil
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

func mib(v int64) string   { return fmt.Sprintf("%.0f MiB", float64(v)/(1<<20)) }
func plain(v int64) string { return strconv.FormatInt(v, 10) }

// median of the non-zero values of f over samples.
func medianOf(samples []sample, f func(sample) int64) int64 {
	var vs []int64
	for _, s := range samples {
		if v := f(s); v > 0 {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return 0
	}
	slices.Sort(vs)
	return vs[len(vs)/2]
}

// minSamples is the fewest samples a check over them judges: two in each
// quarter (the sampler takes one every 5s, so 40s of soak).
const minSamples = 8

// enoughSamples says whether check can judge samples; if not, the check
// fails saying so: a soak that sampled too little has not shown what the
// check asks.
func (r *results) enoughSamples(check string, samples []sample) bool {
	if len(samples) < minSamples {
		r.add(check, false, "too few samples to judge: %d, need at least %d", len(samples), minSamples)
		return false
	}
	return true
}

// addBounded: the last quarter's median is at most factor times the
// second quarter's (after warm-up) plus slack.
func (r *results) addBounded(check string, samples []sample, f func(sample) int64, factor float64, slack int64, format func(int64) string) {
	if !r.enoughSamples(check, samples) {
		return
	}
	q := len(samples) / 4
	early, late := medianOf(samples[q:2*q], f), medianOf(samples[3*q:], f)
	peak := int64(0)
	for _, s := range samples {
		peak = max(peak, f(s))
	}
	r.add(check, float64(late) <= factor*float64(early)+float64(slack), "median %s in the 2nd quarter, %s in the last, peak %s",
		format(early), format(late), format(peak))
}

// addGrowth: rows (or objects) per build do not climb: the last quarter's
// per-build figure is at most 1.5 times the second quarter's.
func (r *results) addGrowth(check string, samples []sample, f func(sample) int64) {
	per := func(part []sample) float64 {
		var v, b int64
		for _, s := range part {
			if f(s) > 0 && s.Builds > 0 {
				v, b = f(s), s.Builds
			}
		}
		if b == 0 {
			return 0
		}
		return float64(v) / float64(b)
	}
	if !r.enoughSamples(check, samples) {
		return
	}
	q := len(samples) / 4
	early, late := per(samples[q:2*q]), per(samples[3*q:])
	r.add(check, late <= 1.5*early+1, "%.1f per build in the 2nd quarter, %.1f at the end", early, late)
}

// serverLogAbout returns, for each of the builds ids, the last n lines of
// the server's log at path that name the build (build=N) or one of its
// steps (step=bN-…), read in one pass, so that a failed soak says what the
// server did with each.
func serverLogAbout(path string, ids []int64, n int) map[int64][]string {
	out := map[int64][]string{}
	f, err := os.Open(path)
	if err != nil {
		for _, id := range ids {
			out[id] = []string{fmt.Sprintf("(server log: %v)", err)}
		}
		return out
	}
	defer f.Close()
	wanted := map[int64]bool{}
	for _, id := range ids {
		wanted[id] = true
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		seen := map[int64]bool{}
		for _, m := range buildInLog.FindAllStringSubmatch(l, -1) {
			id, err := strconv.ParseInt(m[1]+m[2], 10, 64)
			if err == nil && wanted[id] && !seen[id] {
				seen[id] = true
				out[id] = append(out[id], l)
			}
		}
	}
	for id, lines := range out {
		out[id] = lines[max(0, len(lines)-n):]
	}
	return out
}

// buildInLog finds the builds a server log line names: build=N (a whole
// field) or a step ID, step=bN-….
var buildInLog = regexp.MustCompile(`\bbuild=(\d+)(?:\s|$)|\bstep=b(\d+)-`)
