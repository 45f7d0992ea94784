// Command streams measures the ATC's sidecar endpoint under many concurrent
// sidecars (issue 10, item 9c: 1,000 concurrent sidecar streams against one
// server at ≥ 50,000 events/s with server RSS ≤ 1 GiB). The server is the
// real stepserver with the ATC's real sink and token verifier, committing
// build logs to a MinIO container, served over gRPC+TLS in a child process;
// the sidecars are simulated in this process, each with its own connection
// and stream, sending 100-byte output lines as events and waiting for acks.
//
// Phases (-phases), each against a fresh server child, each a load and a
// sink:
//   - paced: every sidecar offers its share of -rate, in batches every
//     -batch-interval (what its process wrote since the last one);
//   - flat (out): every sidecar keeps -window events in flight (a process
//     printing as fast as the ATC takes it): the ceiling;
//   - sink atc: the ATC's; sink discard, the baseline: the same stepserver
//     with a sink that stores nothing, the cost of gRPC, TLS and the
//     stepserver alone.
//
// It prints figures next to the goals and never fails on timing.
//
//	go run ./test/bench/streams [-sidecars 1000] [-rate 50000] [-duration 20s] [-profile DIR]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/test/bench/internal/stepbench"
	"github.com/porter-ci/porter/test/testenv"
)

// The goals of issue 10, item 9c.
const (
	goalEventsPerSec = 50_000
	goalRSS          = 1 << 30
)

type config struct {
	sidecars      int
	stepsPerBuild int
	rate          int
	line          int
	batchInterval time.Duration
	window        int
	warmup        time.Duration
	duration      time.Duration
	phases        string
	profileDir    string
	stats         time.Duration
}

func main() {
	stepbench.MaybeServe()
	var c config
	flag.IntVar(&c.sidecars, "sidecars", 1000, "concurrent simulated sidecars, one connection and stream each")
	flag.IntVar(&c.stepsPerBuild, "steps-per-build", 1, "sidecars (steps) sharing one build and its log")
	flag.IntVar(&c.rate, "rate", goalEventsPerSec, "events/s offered in all by the paced phase")
	flag.IntVar(&c.line, "line", 100, "bytes per output line (one line per event)")
	flag.DurationVar(&c.batchInterval, "batch-interval", 100*time.Millisecond, "paced: how often a sidecar sends what its process wrote")
	flag.IntVar(&c.window, "window", 256, "flat out: events each sidecar keeps in flight")
	flag.DurationVar(&c.warmup, "warmup", 5*time.Second, "load before the measured window")
	flag.DurationVar(&c.duration, "duration", 20*time.Second, "the measured window")
	flag.StringVar(&c.phases, "phases", "paced/atc,flat/atc,flat/discard", "phases to run, each `load/sink`: load paced or flat (out), sink atc or discard (the baseline)")
	flag.DurationVar(&c.stats, "stats", 0, "print the server child's rates this often (0: never)")
	flag.StringVar(&c.profileDir, "profile", "", "write the server child's CPU and heap profiles here (one pair per phase)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "bench-streams:", err)
		os.Exit(1)
	}
}

type phase struct {
	name   string
	sink   string
	paced  bool
	result result
}

type result struct {
	acked         int
	received      int // events the server's sink took within the window
	minioCPU      time.Duration
	latencies     []time.Duration
	peakRSS       int64 // at the window's end
	peakRSSAll    int64 // over the child's life, ending every build included
	serverCPU     time.Duration
	clientCPU     time.Duration
	undelivered   int
	clientErrs    int
	firstClientEr error
}

func run(ctx context.Context, c config) error {
	tmp, err := os.MkdirTemp("", "porter-bench-streams-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var phases []*phase
	for _, spec := range strings.Split(c.phases, ",") {
		load, sink, _ := strings.Cut(strings.TrimSpace(spec), "/")
		p := &phase{sink: sink, paced: load == "paced"}
		switch {
		case sink != stepbench.SinkATC && sink != stepbench.SinkDiscard:
			return fmt.Errorf("phase %q: the sink is atc or discard", spec)
		case load == "paced":
			p.name = fmt.Sprintf("paced, %d ev/s offered", c.rate)
		case load == "flat":
			p.name = fmt.Sprintf("flat out, %d in flight each", c.window)
		default:
			return fmt.Errorf("phase %q: the load is paced or flat", spec)
		}
		if sink == stepbench.SinkDiscard {
			p.name = "baseline: " + p.name
		}
		phases = append(phases, p)
	}
	slog.Info("starting MinIO")
	measured := false
	err = testenv.WithMinIOBucket(ctx, func(m *testenv.MinIO, blob blobstore.Config) error {
		minioPid, err := m.Pid(ctx)
		if err != nil {
			return err
		}
		for i, p := range phases {
			slog.Info("phase", "name", p.name, "sink", p.sink)
			dir := filepath.Join(tmp, fmt.Sprintf("phase-%d", i))
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			r, err := measure(ctx, c, blob, minioPid, dir, p, i)
			if err != nil {
				return fmt.Errorf("phase %q: %w", p.name, err)
			}
			p.result = r
		}
		measured = true
		return nil
	})
	// The figures stand even if removing MinIO failed.
	if measured {
		report(c, phases)
	}
	return err
}

func measure(ctx context.Context, c config, blob blobstore.Config, minioPid int, dir string, p *phase, n int) (result, error) {
	opts := stepbench.Options{Dir: dir, Blob: blob, Sink: p.sink, Steps: c.sidecars, StepsPerBuild: c.stepsPerBuild,
		MaxBuildLogBytes: 1 << 30, Stats: c.stats, Stderr: os.Stderr}
	if c.profileDir != "" {
		if err := os.MkdirAll(c.profileDir, 0o755); err != nil {
			return result{}, err
		}
		opts.CPUProfile = filepath.Join(c.profileDir, fmt.Sprintf("server-%d-%s.cpu.pprof", n, p.sink))
		opts.MemProfile = filepath.Join(c.profileDir, fmt.Sprintf("server-%d-%s.heap.pprof", n, p.sink))
	}
	srv, err := stepbench.Start(ctx, opts)
	if err != nil {
		return result{}, err
	}
	stopped := false
	defer func() {
		if !stopped {
			srv.Kill()
		}
	}()

	// One connection per sidecar, as step pods have; opened a few at a time.
	conns := make([]*grpc.ClientConn, c.sidecars)
	cars := make([]*stepbench.Sidecar, c.sidecars)
	defer func() {
		for _, conn := range conns {
			if conn != nil {
				conn.Close()
			}
		}
	}()
	start := time.Now()
	connectTimeout := 2 * time.Minute
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i := range c.sidecars {
		g.Go(func() error {
			conn, err := srv.Dial()
			if err != nil {
				return err
			}
			conns[i] = conn
			cctx, cancel := context.WithTimeout(gctx, connectTimeout)
			defer cancel()
			car, err := stepbench.Connect(cctx, srv, conn, i)
			if err != nil {
				return err
			}
			cars[i] = car
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return result{}, fmt.Errorf("connect the sidecars: %w", err)
	}
	slog.Info("sidecars connected", "n", c.sidecars, "took", time.Since(start).Round(time.Millisecond))
	// Warm-up counts from the last connection.
	from := time.Now().Add(c.warmup)
	to := from.Add(c.duration)
	for _, car := range cars {
		car.SetWindow(from, to)
	}

	line := max(c.line, 16)
	perSidecar := float64(c.rate) / float64(c.sidecars)
	var (
		errMu    sync.Mutex
		errs     []error
		wg       sync.WaitGroup
		cpuStart time.Duration
		cliStart time.Duration
	)
	sendCtx, stopSending := context.WithDeadline(ctx, to)
	defer stopSending()
	for _, car := range cars {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if p.paced {
				err = sendPaced(sendCtx, car, perSidecar, c.batchInterval, line)
			} else {
				err = sendFlatOut(sendCtx, car, c.window, line)
			}
			if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				errMu.Lock()
				errs = append(errs, err)
				errMu.Unlock()
			}
		}()
	}
	// The window: CPU and RSS are read at its bounds.
	select {
	case <-time.After(time.Until(from)):
	case <-ctx.Done():
		return result{}, ctx.Err()
	}
	cpuStart, _ = srv.CPUTime()
	cliStart = selfCPU()
	minioStart, _ := stepbench.ProcessCPU(minioPid)
	eventsStart, err := srv.Events()
	if err != nil {
		return result{}, err
	}
	select {
	case <-time.After(time.Until(to)):
	case <-ctx.Done():
		return result{}, ctx.Err()
	}
	var r result
	cpuEnd, _ := srv.CPUTime()
	r.serverCPU = cpuEnd - cpuStart
	r.clientCPU = selfCPU() - cliStart
	minioEnd, _ := stepbench.ProcessCPU(minioPid)
	r.minioCPU = minioEnd - minioStart
	eventsEnd, err := srv.Events()
	if err != nil {
		return result{}, err
	}
	r.received = int(eventsEnd - eventsStart)
	r.peakRSS, err = srv.PeakRSS()
	if err != nil {
		return result{}, err
	}
	if opts.MemProfile != "" {
		if err := srv.HeapProfile(); err != nil {
			return result{}, err
		}
	}
	wg.Wait()

	// Every event sent is acknowledged before the streams close.
	drain, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, car := range cars {
		pending, _, _ := car.Unacked()
		if pending > 0 {
			if err := car.WaitAllAcked(drain); err != nil {
				r.undelivered += pending
				errs = append(errs, err)
			}
		}
	}
	for _, car := range cars {
		lat, acked := car.Results()
		r.latencies = append(r.latencies, lat...)
		r.acked += acked
		if err := car.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	r.clientErrs = len(errs)
	if len(errs) > 0 {
		r.firstClientEr = errs[0]
	}
	stopped = true
	u, err := srv.Stop()
	if err != nil {
		return result{}, err
	}
	r.peakRSSAll = u.PeakRSS
	slices.Sort(r.latencies)
	return r, nil
}

// sendPaced offers rate events/s, in batches every interval: what a
// process printing steadily has written since the sidecar last sent.
func sendPaced(ctx context.Context, car *stepbench.Sidecar, rate float64, interval time.Duration, line int) error {
	// Spread the sidecars' batches over the interval.
	select {
	case <-time.After(rand.N(interval)):
	case <-ctx.Done():
		return ctx.Err()
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	begin := time.Now()
	sent := 0
	for {
		// Catch up on what is due, so the average rate is exact even when
		// a tick comes late or a send blocks.
		due := int(time.Since(begin).Seconds() * rate)
		for ; sent < due && ctx.Err() == nil; sent++ {
			if _, err := car.Send(outputLine(car, sent, line)); err != nil {
				return err
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// sendFlatOut keeps window events in flight.
func sendFlatOut(ctx context.Context, car *stepbench.Sidecar, window, line int) error {
	sent := 0
	for {
		pending, changed, err := car.Unacked()
		if err != nil {
			return err
		}
		for ; pending < window; pending++ {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if _, err := car.Send(outputLine(car, sent, line)); err != nil {
				return err
			}
			sent++
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// outputLine is one line of a step's output, n bytes with its newline.
func outputLine(car *stepbench.Sidecar, i, n int) []byte {
	b := fmt.Appendf(make([]byte, 0, n), "%s line %d: ", car.StepID, i)
	for len(b) < n-1 {
		b = append(b, "the quick brown fox jumps over the lazy dog "[len(b)%44])
	}
	return append(b[:n-1], '\n')
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func report(c config, phases []*phase) {
	fmt.Printf("\nsidecar streams: %d simulated sidecars over gRPC+TLS, 1 connection each, %d step(s) per build;\n", c.sidecars, c.stepsPerBuild)
	fmt.Printf("%d-byte output lines, one per event; %s measured after %s of warm-up; %d CPUs (GOMAXPROCS %d) shared by the sidecars, the server and MinIO\n\n",
		c.line, c.duration, c.warmup, runtime.NumCPU(), runtime.GOMAXPROCS(0))
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tsink\tacked ev/s\treceived ev/s\tp50 ack\tp99 ack\tserver peak RSS\tserver CPU\tper event\tMinIO CPU\tsidecars' CPU\terrors\t")
	fmt.Fprintf(tw, "goal (item 9c)\t\t≥ %d\t\t\t\t≤ %d MiB\t\t\t\t\t\t\n", goalEventsPerSec, goalRSS>>20)
	cores := func(d time.Duration) string { return fmt.Sprintf("%.2f cores", d.Seconds()/c.duration.Seconds()) }
	for _, p := range phases {
		r := p.result
		perEvent := "-"
		if r.received > 0 {
			perEvent = fmt.Sprintf("%.1f µs", float64(r.serverCPU.Microseconds())/float64(r.received))
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%s\t%s\t%d MiB\t%s\t%s\t%s\t%s\t%d\t\n", p.name, p.sink,
			float64(r.acked)/c.duration.Seconds(), float64(r.received)/c.duration.Seconds(), pct(r.latencies, 0.50), pct(r.latencies, 0.99),
			r.peakRSS>>20, cores(r.serverCPU), perEvent, cores(r.minioCPU), cores(r.clientCPU), r.clientErrs)
	}
	tw.Flush()
	fmt.Println()
	for _, p := range phases {
		r := p.result
		verdict := func(ok bool) string {
			if ok {
				return "met"
			}
			return "NOT met"
		}
		evs := float64(r.acked) / c.duration.Seconds()
		fmt.Printf("%s (%s): %s ev/s goal %s, RSS goal %s; peak RSS including ending every build %d MiB",
			p.name, p.sink, fmtInt(int(evs)), verdict(evs >= goalEventsPerSec), verdict(r.peakRSS <= goalRSS), r.peakRSSAll>>20)
		if r.undelivered > 0 || r.firstClientEr != nil {
			fmt.Printf("; %d events never acknowledged; first error: %v", r.undelivered, r.firstClientEr)
		}
		fmt.Println()
	}
}

func pct(sorted []time.Duration, p float64) string {
	if len(sorted) == 0 {
		return "-"
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))].Round(100 * time.Microsecond).String()
}

func fmtInt(n int) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}
