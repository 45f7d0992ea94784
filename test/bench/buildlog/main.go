// Command buildlog measures the server's memory while one running build
// prints a very large log (issue 10, item 5: a build printing 10 GiB of
// logs keeps the server under a fixed budget). The output takes a real
// step's path on the server: a simulated sidecar sends it as output events
// over gRPC+TLS to the real stepserver, whose sink is the ATC's (events
// translated into build events and appended to the build's log, committed
// as zstd chunks to a MinIO container, and evicted from memory but for a
// window). The server runs in a child process; its peak RSS is read at
// 10%, 50% and 100% of the output (1, 5 and 10 GiB by default), next to its
// RSS once the sidecar is connected and before any output (the baseline).
//
// The build's output cap (--max-build-log-bytes, 1 GiB by default) would
// drop everything past it: this benchmark sets it to twice -bytes, so every
// byte flows through the log.
//
// It prints figures and never fails on timing.
//
//	go run ./test/bench/buildlog [-bytes 10737418240] [-chunk 32768] [-in-flight 33554432]
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/test/bench/internal/stepbench"
	"github.com/porter-ci/porter/test/testenv"
)

type config struct {
	bytes      int64
	chunk      int
	inFlight   int
	profileDir string
	stats      time.Duration
}

func main() {
	stepbench.MaybeServe()
	var c config
	flag.Int64Var(&c.bytes, "bytes", 10<<30, "bytes of output the build prints")
	// pkg/sidecar/entrypoint reads a process's output 32 KiB at a time,
	// and each read becomes one event.
	flag.IntVar(&c.chunk, "chunk", 32<<10, "bytes of output per event")
	// pkg/sidecar's outbox holds up to 32 MiB unacknowledged by default.
	flag.IntVar(&c.inFlight, "in-flight", 32<<20, "bytes of events the sidecar keeps unacknowledged")
	flag.StringVar(&c.profileDir, "profile", "", "write the server child's CPU and heap profiles here")
	flag.DurationVar(&c.stats, "stats", 0, "print the server child's rates this often (0: never)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "bench-buildlog:", err)
		os.Exit(1)
	}
}

// mark is the server's memory once some of the output is durable.
type mark struct {
	name         string
	bytes        int64
	took         time.Duration // since the previous mark
	segment      int64         // bytes since the previous mark
	peakRSS, rss int64
	serverCPU    time.Duration // since the previous mark
}

func run(ctx context.Context, c config) error {
	tmp, err := os.MkdirTemp("", "porter-bench-buildlog-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	slog.Info("starting MinIO")
	var marks []mark
	var usage stepbench.Usage
	var total time.Duration
	err = testenv.WithMinIOBucket(ctx, func(_ *testenv.MinIO, blob blobstore.Config) error {
		var err error
		marks, usage, total, err = measure(ctx, c, blob, tmp)
		return err
	})
	// The figures stand even if removing MinIO failed.
	if len(marks) < 4 {
		return err
	}

	fmt.Printf("\nbuild log: one step printing %s in %d KiB output events over gRPC+TLS → stepserver → the ATC's build log → MinIO;\n",
		human(c.bytes), c.chunk>>10)
	fmt.Printf("--max-build-log-bytes set to %s (above the output, so every byte is kept); %d CPUs shared by the sidecar, the server and MinIO\n\n",
		human(2*c.bytes), runtime.NumCPU())
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "log durable\tserver peak RSS\tserver RSS\tMB/s since previous\tserver CPU since previous\t")
	for _, m := range marks {
		rate, cpu := "-", "-"
		if m.segment > 0 {
			rate = fmt.Sprintf("%.1f", float64(m.segment)/1e6/m.took.Seconds())
			cpu = fmt.Sprintf("%.2f cores", m.serverCPU.Seconds()/m.took.Seconds())
		}
		fmt.Fprintf(tw, "%s\t%d MiB\t%d MiB\t%s\t%s\t\n", m.name, m.peakRSS>>20, m.rss>>20, rate, cpu)
	}
	tw.Flush()
	first, last := marks[1], marks[len(marks)-1]
	fmt.Printf("\n%s in %s: %.1f MB/s; server peak RSS grew %+d MiB from %s to %s (goal: flat); over the child's life, ending the build included: %d MiB; server CPU %s\n",
		human(c.bytes), total.Round(time.Millisecond), float64(c.bytes)/1e6/total.Seconds(),
		(last.peakRSS-first.peakRSS)>>20, first.name, last.name, usage.PeakRSS>>20, (usage.User + usage.System).Round(time.Millisecond))
	return err
}

func measure(ctx context.Context, c config, blob blobstore.Config, tmp string) ([]mark, stepbench.Usage, time.Duration, error) {
	opts := stepbench.Options{Dir: tmp, Blob: blob, Sink: stepbench.SinkATC, Steps: 1, StepsPerBuild: 1,
		MaxBuildLogBytes: 2 * c.bytes, Stats: c.stats, Stderr: os.Stderr}
	if c.profileDir != "" {
		if err := os.MkdirAll(c.profileDir, 0o755); err != nil {
			return nil, stepbench.Usage{}, 0, err
		}
		opts.CPUProfile = filepath.Join(c.profileDir, "server-buildlog.cpu.pprof")
		opts.MemProfile = filepath.Join(c.profileDir, "server-buildlog.heap.pprof")
	}
	srv, err := stepbench.Start(ctx, opts)
	if err != nil {
		return nil, stepbench.Usage{}, 0, err
	}
	stopped := false
	defer func() {
		if !stopped {
			srv.Kill()
		}
	}()
	conn, err := srv.Dial()
	if err != nil {
		return nil, stepbench.Usage{}, 0, err
	}
	defer conn.Close()
	car, err := stepbench.Connect(ctx, srv, conn, 0)
	if err != nil {
		return nil, stepbench.Usage{}, 0, err
	}

	// sample reads the server's memory and its CPU time so far.
	sample := func(name string, bytes int64) (mark, error) {
		m := mark{name: name, bytes: bytes}
		var err error
		if m.peakRSS, err = srv.PeakRSS(); err != nil {
			return m, err
		}
		if m.rss, err = srv.RSS(); err != nil {
			return m, err
		}
		m.serverCPU, err = srv.CPUTime()
		return m, err
	}
	idle, err := sample("0 (connected, no output: baseline)", 0)
	if err != nil {
		return nil, stepbench.Usage{}, 0, err
	}
	marks := []mark{idle}
	pool := logText(64 << 20)
	window := max(1, c.inFlight/c.chunk)
	start := time.Now()
	prevAt, prevCPU := start, idle.serverCPU
	var sent int64
	off := 0
	for _, target := range []int64{c.bytes / 10, c.bytes / 2, c.bytes} {
		var last uint64
		for sent < target {
			pending, changed, err := car.Unacked()
			if err != nil {
				return nil, stepbench.Usage{}, 0, fmt.Errorf("the server ended the stream: %w", err)
			}
			if pending >= window {
				select {
				case <-changed:
				case <-ctx.Done():
					return nil, stepbench.Usage{}, 0, ctx.Err()
				}
				continue
			}
			n := int(min(int64(c.chunk), target-sent))
			if off+n > len(pool) {
				off = 0
			}
			if last, err = car.Send(pool[off : off+n]); err != nil {
				return nil, stepbench.Usage{}, 0, err
			}
			// Not a multiple of anything in the text: no two events repeat.
			off += n + 4099
			sent += int64(n)
		}
		if err := car.WaitAcked(ctx, last); err != nil {
			return nil, stepbench.Usage{}, 0, err
		}
		m, err := sample(human(target), target)
		if err != nil {
			return nil, stepbench.Usage{}, 0, err
		}
		now := time.Now()
		m.took, m.segment = now.Sub(prevAt), target-marks[len(marks)-1].bytes
		m.serverCPU, prevCPU = m.serverCPU-prevCPU, m.serverCPU
		prevAt = now
		marks = append(marks, m)
		slog.Info("durable", "bytes", human(target), "peak_rss_mib", m.peakRSS>>20, "mb_per_s", fmt.Sprintf("%.1f", float64(m.segment)/1e6/m.took.Seconds()))
	}
	total := time.Since(start)
	if opts.MemProfile != "" {
		if err := srv.HeapProfile(); err != nil {
			return nil, stepbench.Usage{}, 0, err
		}
	}
	if err := car.Close(); err != nil {
		return nil, stepbench.Usage{}, 0, err
	}
	stopped = true
	u, err := srv.Stop()
	return marks, u, total, err
}

// logText is n bytes of something like a build's output: lines of words
// and numbers, compressible as logs are, but not one repeated line.
func logText(n int) []byte {
	words := []string{"compiling", "ok", "PASS", "FAIL", "warning:", "error:", "github.com/porter-ci/porter/pkg/atc",
		"downloading", "test", "--- RUN", "TestBuildLog", "(0.01s)", "=== CONT", "go:", "npm", "WARN", "deprecated",
		"Step", "5/12", "RUN", "apt-get", "install", "-y", "Fetched", "kB", "in", "0s", "Setting", "up", "the", "of", "and"}
	rng := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 0, n+256)
	for line := 0; len(b) < n; line++ {
		b = fmt.Appendf(b, "%06d %08x", line, rng.Uint32())
		for range 4 + rng.IntN(12) {
			b = append(b, ' ')
			b = append(b, words[rng.IntN(len(words))]...)
		}
		b = append(b, '\n')
	}
	return b[:n]
}

func human(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d B", n)
}
