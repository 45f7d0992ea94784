package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/porter-ci/porter/test/testenv"
)

const (
	pipelineName = "soak"
	// linesPerTask is how many numbered lines every soak task prints.
	linesPerTask = 20
)

// taskYAML is a task that prints linesPerTask numbered lines tagged tag.
func taskYAML(name, tag, indent string) string {
	return fmt.Sprintf(`%[3]s- task: %[1]s
%[3]s  config:
%[3]s    platform: linux
%[3]s    image_resource: {type: registry-image, source: {repository: busybox}}
%[3]s    run: {path: sh, args: [-ec, 'for i in $(seq 1 %[4]d); do echo "soak %[2]s line $i"; done']}
`, name, tag, indent, linesPerTask)
}

// jobTags are the tags each job's succeeded build prints, linesPerTask each.
var jobTags = map[string][]string{
	"a":      {"left", "right", "hook-success", "hook-ensure"},
	"b":      {"b"},
	"c":      {"c"},
	"timed":  {"timed"},
	"manual": {"manual"},
}

func (s *soak) pipelineYAML() string {
	var b strings.Builder
	fmt.Fprintf(&b, `resources:
- name: repo
  type: git
  check_every: 5s
  source: {uri: %q, branch: main}
- name: every-minute
  type: time
  source: {interval: 1m}
jobs:
- name: a
  plan:
  - get: repo
    trigger: true
  - in_parallel:
`, s.git.URL(s.repo))
	b.WriteString(taskYAML("left", "left", "    "))
	b.WriteString(taskYAML("right", "right", "    "))
	b.WriteString("  on_success:\n    do:\n")
	b.WriteString(taskYAML("hook-success", "hook-success", "    "))
	b.WriteString("  ensure:\n    do:\n")
	b.WriteString(taskYAML("hook-ensure", "hook-ensure", "    "))
	for _, j := range []struct{ name, passed string }{{"b", "a"}, {"c", "b"}} {
		fmt.Fprintf(&b, "- name: %s\n  serial: true\n  plan:\n  - get: repo\n    passed: [%s]\n    trigger: true\n", j.name, j.passed)
		b.WriteString(taskYAML("work", j.name, "  "))
	}
	b.WriteString("- name: timed\n  plan:\n  - get: every-minute\n    trigger: true\n")
	b.WriteString(taskYAML("work", "timed", "  "))
	// Its logs are reaped as Concourse's build_log_retention says: the
	// soak sees log objects shrink after GC.
	b.WriteString("- name: manual\n  serial: true\n  build_log_retention: {builds: 5}\n  plan:\n")
	b.WriteString(taskYAML("work", "manual", "  "))
	b.WriteString(`- name: slow
  plan:
  - task: sleep
    config:
      platform: linux
      image_resource: {type: registry-image, source: {repository: busybox}}
      run: {path: sleep, args: ["180"]}
`)
	return b.String()
}

func (s *soak) setPipelines(ctx context.Context) error {
	s.repo = "soak"
	if err := s.git.CreateRepo(ctx, s.repo, "main"); err != nil {
		return err
	}
	if _, err := s.git.Commit(ctx, s.repo, "main", map[string]string{"n": "0"}, "0"); err != nil {
		return err
	}
	path := filepath.Join(s.dir, "pipeline.yml")
	if err := os.WriteFile(path, []byte(s.pipelineYAML()), 0o600); err != nil {
		return err
	}
	if res, err := s.fly.Run(ctx, "set-pipeline", "-n", "-p", pipelineName, "-c", path); err != nil || res.ExitCode != 0 {
		return fmt.Errorf("fly set-pipeline: %v %s", err, res)
	}
	if res, err := s.fly.Run(ctx, "unpause-pipeline", "-p", pipelineName); err != nil || res.ExitCode != 0 {
		return fmt.Errorf("fly unpause-pipeline: %v %s", err, res)
	}
	return nil
}

// loaders are the load's goroutines; each runs until ctx ends.
func (s *soak) loaders() []func(context.Context) {
	return []func(context.Context){
		s.every(20*time.Second, "commit", s.commit),
		s.every(15*time.Second, "trigger-job", s.triggerManual),
		s.every(10*time.Second, "execute", s.execute),
		s.every(12*time.Second, "execute", s.execute),
		s.every(45*time.Second, "intercept", s.intercept),
		s.every(60*time.Second, "abort", s.abort),
	}
}

// every runs op at jittered intervals of d until ctx ends, recording each
// run's outcome under kind.
func (s *soak) every(d time.Duration, kind string, op func(context.Context) (string, error)) func(context.Context) {
	return func(ctx context.Context) {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(s.jitter(d)):
			}
			start := time.Now()
			// An operation runs to its end even when the load stops: a
			// half-run fly is not a finding.
			opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
			detail, err := op(opCtx)
			cancel()
			s.rec.op(kind, start, time.Now(), detail, err)
		}
	}
}

func (s *soak) commit(ctx context.Context) (string, error) {
	n := strconv.FormatInt(time.Now().UnixNano(), 10)
	_, err := s.git.Commit(ctx, s.repo, "main", map[string]string{"n": n}, n)
	return "", err
}

func (s *soak) triggerManual(ctx context.Context) (string, error) {
	res, err := s.fly.Run(ctx, "trigger-job", "-j", pipelineName+"/manual")
	return flyOutcome(res, err)
}

// flyOutcome is a fly run's result as an operation's: an error unless fly
// exited 0.
func flyOutcome(res testenv.FlyResult, err error) (string, error) {
	if err != nil {
		return res.Output(), err
	}
	if res.ExitCode != 0 {
		return "", fmt.Errorf("fly exited %d: %s", res.ExitCode, lastLines(res.Output(), 3))
	}
	return strings.TrimSpace(res.Stdout), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

const executeTask = `platform: linux
image_resource: {type: registry-image, source: {repository: busybox}}
inputs: [{name: in}]
outputs: [{name: out}]
run: {path: sh, args: [-ec, 'for i in $(seq 1 20); do echo "soak exec line $i"; done; cp in/data out/data']}
`

// execute: `fly execute -i/-o` of a random file; the output must be the
// input byte for byte and the live log every numbered line once, in order.
func (s *soak) execute(ctx context.Context) (string, error) {
	dir, err := os.MkdirTemp(s.dir, "execute-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out")
	data := make([]byte, 64<<10+s.intn(2<<20))
	rand.Read(data)
	if err := os.MkdirAll(in, 0o700); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(in, "data"), data, 0o600); err != nil {
		return "", err
	}
	task := filepath.Join(dir, "task.yml")
	if err := os.WriteFile(task, []byte(executeTask), 0o600); err != nil {
		return "", err
	}
	res, err := s.fly.Run(ctx, "execute", "-c", task, "-i", "in="+in, "-o", "out="+out)
	if detail, err := flyOutcome(res, err); err != nil {
		return detail, err
	}
	if problem := checkLines(res.Stdout, map[string]bool{"exec": true}); problem != "" {
		s.rec.logProblem("live: fly execute: " + problem)
	}
	got, err := os.ReadFile(filepath.Join(out, "data"))
	if err != nil {
		return "", fmt.Errorf("read the output: %w", err)
	}
	s.rec.artifact(bytes.Equal(got, data))
	if !bytes.Equal(got, data) {
		return "", fmt.Errorf("output differs from input: %d bytes, sha256 %x, want %d bytes, sha256 %x",
			len(got), sha256.Sum256(got), len(data), sha256.Sum256(data))
	}
	return fmt.Sprintf("%d bytes", len(data)), nil
}

// intercept: a command in the task pod of job c's latest build, as a user
// would after reading its log: `fly intercept -j soak/c -b N -s work`.
// The server keeps a succeeded build's pods for --pod-retention (2m, as in
// the demo), so only a build that ended within the last minute is asked
// for; without one (c has not run lately) there is nothing to intercept.
func (s *soak) intercept(ctx context.Context) (string, error) {
	name, err := s.recentBuild(ctx, "c", time.Minute)
	if err != nil || name == "" {
		return fmt.Sprintf("skipped: no build of job c ended in the last minute (%v)", err), nil
	}
	res, err := s.fly.Run(ctx, "intercept", "-j", pipelineName+"/c", "-b", name, "-s", "work", "true")
	return flyOutcome(res, err)
}

// recentBuild is the name of job's latest build that succeeded within the
// last d, or "".
func (s *soak) recentBuild(ctx context.Context, job string, d time.Duration) (string, error) {
	conn, err := pgx.Connect(ctx, s.pg.DSN)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var name string
	err = conn.QueryRow(ctx, `SELECT b.name FROM builds b JOIN jobs j ON j.id = b.job_id
		WHERE j.name = $1 AND b.status = 'succeeded' AND b.end_time > now() - make_interval(secs => $2)
		ORDER BY b.id DESC LIMIT 1`, job, d.Seconds()).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return name, err
}

var startedBuild = regexp.MustCompile(`started \S+ #(\d+)`)

// abort: trigger the slow job, then abort its build while it runs. A refused
// abort-build (the server down in a fault) is sent again, as a person would,
// until the server accepts it.
func (s *soak) abort(ctx context.Context) (string, error) {
	res, err := s.fly.Run(ctx, "trigger-job", "-j", pipelineName+"/slow")
	if detail, err := flyOutcome(res, err); err != nil {
		return detail, err
	}
	m := startedBuild.FindStringSubmatch(res.Stdout)
	if m == nil {
		return "", fmt.Errorf("no build number in fly's output %q", res.Stdout)
	}
	time.Sleep(time.Duration(2+s.intn(8)) * time.Second)
	var refused []string
	for {
		sent := time.Now()
		res, err = s.fly.Run(ctx, "abort-build", "-j", pipelineName+"/slow", "-b", m[1])
		detail, err := flyOutcome(res, err)
		if err == nil {
			s.rec.abortAccepted(m[1], sent)
			if len(refused) > 0 {
				detail = fmt.Sprintf("%s (after %d refusals: %s)", detail, len(refused), strings.Join(refused, "; "))
			}
			return detail, nil
		}
		refused = append(refused, err.Error())
		select {
		case <-ctx.Done():
			return detail, errors.Join(ctx.Err(), err)
		case <-time.After(3 * time.Second):
		}
	}
}

var numberedLine = regexp.MustCompile(`soak (\S+) line (\d+)`)

// checkLines checks that every tag of out's numbered lines has lines 1 to
// linesPerTask, each once and in order, and that the tags are want's (when
// want is not nil). It returns a problem, or "".
func checkLines(out string, want map[string]bool) string {
	next := map[string]int{}
	for _, m := range numberedLine.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[2])
		if n != next[m[1]]+1 {
			return fmt.Sprintf("tag %s: line %d after line %d", m[1], n, next[m[1]])
		}
		next[m[1]] = n
	}
	for tag := range want {
		if next[tag] != linesPerTask {
			return fmt.Sprintf("tag %s: %d of %d lines", tag, next[tag], linesPerTask)
		}
	}
	for tag, n := range next {
		if want != nil && !want[tag] {
			return fmt.Sprintf("unexpected tag %s (%d lines)", tag, n)
		}
		if n != linesPerTask {
			return fmt.Sprintf("tag %s: %d of %d lines", tag, n, linesPerTask)
		}
	}
	return ""
}

// recorder is what happened, for the checks.
type recorder struct {
	mu     sync.Mutex
	ops    []opRecord
	faults []faultRecord
	// abortsAccepted: when an accepted abort-build was sent, by the slow
	// job's build name.
	abortsAccepted map[string]time.Time
	logProblems    []string
	artifacts      [2]int // identical, differing
}

type opRecord struct {
	Kind   string    `json:"kind"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Error  string    `json:"error,omitempty"`
	Detail string    `json:"detail,omitempty"`
}

type faultRecord struct {
	Name  string    `json:"name"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	Error string    `json:"error,omitempty"`
}

func newRecorder() *recorder {
	return &recorder{abortsAccepted: map[string]time.Time{}}
}

func (r *recorder) op(kind string, start, end time.Time, detail string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := opRecord{Kind: kind, Start: start, End: end, Detail: detail}
	if err != nil {
		o.Error = err.Error()
	}
	r.ops = append(r.ops, o)
}

func (r *recorder) fault(f faultRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, f)
}

func (r *recorder) abortAccepted(build string, sent time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.abortsAccepted[build] = sent
}

func (r *recorder) logProblem(p string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logProblems = append(r.logProblems, p)
}

func (r *recorder) artifact(identical bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if identical {
		r.artifacts[0]++
	} else {
		r.artifacts[1]++
	}
}
