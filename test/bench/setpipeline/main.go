// Command setpipeline measures what saving a pipeline costs the real
// server (issue 18, item 4: linear cost for any pipeline): `set-pipeline`
// (the API's PUT of a config, as fly sends it) of a 1,000-job pipeline and
// of a chain of 30 custom resource types (the cap), beside a one-job
// pipeline as the baseline, and a 31-deep chain, which is refused. Each
// figure is the median of -n saves (each a new pipeline), with the
// server's CPU time for them, its RSS after them and its peak RSS so far
// (VmHWM, which only grows: the cases run baseline first).
//
// The server is a real atc-porter-runtime on the local cluster with its own
// PostgreSQL database (testenv.StartBenchServer). It prints figures and
// never fails on timing.
//
//	go run ./test/bench/setpipeline [-n 5]
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/porter-ci/porter/test/bench/internal/benchstat"
	"github.com/porter-ci/porter/test/bench/internal/stepbench"
	"github.com/porter-ci/porter/test/testenv"
)

func main() {
	n := flag.Int("n", 5, "saves of each pipeline")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, max(*n, 1)); err != nil {
		fmt.Fprintln(os.Stderr, "bench-set-pipeline:", err)
		os.Exit(1)
	}
}

type benchCase struct {
	name   string
	config string
	want   int // the status a save answers
}

type result struct {
	benchCase
	bytes        int
	median       time.Duration
	cpu          time.Duration // the server's, over all n saves
	rss, peakRSS int64
	answer       string // a refusal's error
	status       int
}

func run(ctx context.Context, n int) error {
	dir, err := os.MkdirTemp("", "porter-bench-setpipeline-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bs, err := testenv.StartBenchServer(ctx, dir, "porter-bench-setpipeline-")
	if err != nil {
		return err
	}
	defer func() {
		if err := bs.Close(context.WithoutCancel(ctx)); err != nil {
			fmt.Fprintln(os.Stderr, "bench-set-pipeline: clean up:", err)
		}
	}()
	token, err := bs.Server.Login(ctx, "bench", "bench")
	if err != nil {
		return err
	}
	pid := bs.Server.Pid()
	cases := []benchCase{
		{"1 job (baseline)", manyJobs(1), http.StatusCreated},
		{"1,000 jobs", manyJobs(1000), http.StatusCreated},
		{"30-deep type chain", testenv.TypeChainPipeline(30), http.StatusCreated},
		{"31-deep type chain (refused)", testenv.TypeChainPipeline(31), http.StatusBadRequest},
	}
	idleRSS, err := procRSS(pid)
	if err != nil {
		return err
	}
	idlePeak, err := stepbench.ProcessPeakRSS(pid)
	if err != nil {
		return err
	}
	var results []result
	for ci, c := range cases {
		r := result{benchCase: c, bytes: len(c.config)}
		cpu0, err := stepbench.ProcessCPU(pid)
		if err != nil {
			return err
		}
		var took []time.Duration
		for i := range n {
			start := time.Now()
			status, body, err := save(ctx, bs.Server.URL(), token, fmt.Sprintf("p%d-%d", ci, i), c.config)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			took = append(took, time.Since(start))
			if status != c.want {
				return fmt.Errorf("%s: answered %d, want %d: %s", c.name, status, c.want, body)
			}
			r.status = status
			if status != http.StatusCreated {
				r.answer = strings.Join(strings.Fields(body), " ")
			}
		}
		r.median = benchstat.Median(took)
		cpu1, err := stepbench.ProcessCPU(pid)
		if err != nil {
			return err
		}
		r.cpu = cpu1 - cpu0
		if r.rss, err = procRSS(pid); err != nil {
			return err
		}
		if r.peakRSS, err = stepbench.ProcessPeakRSS(pid); err != nil {
			return err
		}
		results = append(results, r)
	}

	fmt.Printf("\nset-pipeline: PUT of a config to a real atc-porter-runtime (PostgreSQL on the local cluster), %d saves each, each a new pipeline; %d CPUs\n",
		n, runtime.NumCPU())
	fmt.Printf("server before: RSS %d MiB, peak %d MiB\n\n", idleRSS>>20, idlePeak>>20)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pipeline\tconfig\tanswer\tmedian save\tserver CPU (all saves)\tserver RSS after\tserver peak RSS so far\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d KiB\t%d\t%s\t%s\t%d MiB\t%d MiB\t\n", r.name, r.bytes>>10, r.status,
			r.median.Round(100*time.Microsecond), r.cpu, r.rss>>20, r.peakRSS>>20)
	}
	tw.Flush()
	for _, r := range results {
		if r.answer != "" {
			fmt.Printf("\n%s answered: %s\n", r.name, r.answer)
		}
	}
	return nil
}

// save PUTs config as pipeline name of team main, as fly set-pipeline
// does, and returns the status and body.
func save(ctx context.Context, url, token, name, config string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url+"/api/v1/teams/main/pipelines/"+name+"/config", bytes.NewBufferString(config))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/x-yaml")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// manyJobs is n jobs in a line: each takes the version the one before it
// passed and runs an inline task.
func manyJobs(n int) string {
	var b strings.Builder
	b.WriteString("resources:\n- {name: r, type: mock, source: {}}\njobs:\n")
	for i := range n {
		passed := ""
		if i > 0 {
			passed = fmt.Sprintf(", passed: [job-%d]", i-1)
		}
		fmt.Fprintf(&b, `- name: job-%d
  plan:
  - {get: r, trigger: true%s}
  - task: unit
    config:
      platform: linux
      image_resource: {type: registry-image, source: {repository: busybox}}
      inputs: [{name: r}]
      run: {path: sh, args: [-c, 'echo %d']}
`, i, passed, i)
	}
	return b.String()
}

// procRSS is process pid's resident memory now.
func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err != nil {
				return 0, err
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}
