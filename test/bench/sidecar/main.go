// Command sidecar measures the in-pod path with real processes, a real MinIO
// and a real gRPC server playing the ATC, and prints:
//   - log latency, from a line's write in the wrapped process to its receipt
//     by the ATC (p50/p99), at a steady 10,000 lines/s;
//   - the sidecar's peak RSS while it downloads and re-uploads a multi-GiB
//     artifact.
//
// It prints figures and never fails on timing.
//
//	go run ./test/bench/sidecar [-rate 10000] [-duration 10s] [-artifact-size 10737418240]
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/stepserver"
	"github.com/porter-ci/porter/pkg/steptoken"
	"github.com/porter-ci/porter/test/bench/internal/stepbench"
	"github.com/porter-ci/porter/test/stepproc"
	"github.com/porter-ci/porter/test/testenv"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "gen" {
		os.Exit(generate(os.Args[2:]))
	}
	rate := flag.Int("rate", 10_000, "log lines per second")
	duration := flag.Duration("duration", 10*time.Second, "how long the process logs")
	size := flag.Int64("artifact-size", 10<<30, "bytes of the artifact moved for the RSS figure")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *rate, *duration, *size); err != nil {
		fmt.Fprintln(os.Stderr, "bench-sidecar:", err)
		os.Exit(1)
	}
}

// generate is the wrapped process: it writes lines carrying their write time
// at a steady rate, in 1 ms batches.
func generate(args []string) int {
	fs := flag.NewFlagSet("gen", flag.ExitOnError)
	rate := fs.Int("rate", 10_000, "lines per second")
	duration := fs.Duration("duration", 10*time.Second, "how long")
	fs.Parse(args)
	w := bufio.NewWriterSize(os.Stdout, 64<<10)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	sent := 0
	for now := range tick.C {
		elapsed := min(now.Sub(start), *duration)
		// Catch up on ticks the scheduler skipped, so the average rate is exact.
		for due := int(elapsed.Seconds() * float64(*rate)); sent < due; sent++ {
			fmt.Fprintf(w, "t=%d\n", time.Now().UnixNano())
		}
		w.Flush()
		if elapsed >= *duration {
			break
		}
	}
	return 0
}

// latencySink stores events like the ATC would and times each line on receipt.
type latencySink struct {
	*stepserver.MemorySink
	mu        sync.Mutex
	partial   string
	latencies []time.Duration
}

func (s *latencySink) Append(ctx context.Context, stepID string, evs []*eventspb.Event) error {
	now := time.Now()
	s.mu.Lock()
	for _, ev := range evs {
		data := s.partial + string(ev.GetOutput().GetData())
		lines := strings.Split(data, "\n")
		s.partial = lines[len(lines)-1]
		for _, l := range lines[:len(lines)-1] {
			if ns, err := strconv.ParseInt(strings.TrimPrefix(l, "t="), 10, 64); err == nil {
				s.latencies = append(s.latencies, now.Sub(time.Unix(0, ns)))
			}
		}
	}
	s.mu.Unlock()
	return s.MemorySink.Append(ctx, stepID, evs)
}

type bench struct {
	porter string
	self   string
	addr   string
	keys   *steptoken.Keyring
	sink   stepserver.Sink
	blob   blobstore.Config
	tmp    string
	steps  int
}

func run(ctx context.Context, rate int, duration time.Duration, size int64) (err error) {
	tmp, err := os.MkdirTemp("", "porter-bench-sidecar-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	b := &bench{tmp: tmp}
	if b.self, err = os.Executable(); err != nil {
		return err
	}
	if b.porter, err = stepproc.BuildPorter(ctx, tmp); err != nil {
		return err
	}
	return testenv.WithMinIOBucket(ctx, func(_ *testenv.MinIO, cfg blobstore.Config) error {
		b.blob = cfg
		return b.measure(ctx, rate, duration, size)
	})
}

func (b *bench) measure(ctx context.Context, rate int, duration time.Duration, size int64) (err error) {
	key, _ := steptoken.NewKey()
	if b.keys, err = steptoken.NewKeyring(key); err != nil {
		return err
	}
	sink := &latencySink{MemorySink: stepserver.NewMemorySink()}
	b.sink = sink
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	b.addr = ln.Addr().String()
	gs := grpc.NewServer()
	stepserver.New(sink, b.keys, slog.New(slog.DiscardHandler)).Register(gs)
	go gs.Serve(ln)
	defer gs.Stop()

	fmt.Printf("log latency: %d lines/s for %s through porter entrypoint → sidecar → gRPC\n", rate, duration)
	a := b.action("loglatency", b.self, "gen", "-rate", strconv.Itoa(rate), "-duration", duration.String())
	var logPeak peakRSS
	if _, err := b.runStep(ctx, a, logPeak.watch); err != nil {
		return err
	}
	lat := slices.Clone(sink.latencies)
	slices.Sort(lat)
	if len(lat) == 0 {
		return fmt.Errorf("no log line arrived")
	}
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(float64(len(lat))*p))] }
	fmt.Printf("  lines received %d (%.0f/s), p50 %s, p90 %s, p99 %s, max %s\n", len(lat), float64(len(lat))/duration.Seconds(),
		pct(0.50).Round(time.Microsecond), pct(0.90).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), lat[len(lat)-1].Round(time.Microsecond))
	fmt.Printf("  sidecar peak RSS %.1f MiB (the baseline for the figure below: no artifact)\n\n", float64(logPeak.load())/(1<<20))

	fmt.Printf("sidecar peak RSS moving a %.1f GiB artifact (download as input, upload as output)\n", float64(size)/(1<<30))
	store, err := blobstore.Open(ctx, b.blob)
	if err != nil {
		return err
	}
	src := filepath.Join(b.tmp, "src")
	if err := writeRandomFile(filepath.Join(src, "big.bin"), size); err != nil {
		return err
	}
	art, err := blobstore.UploadDir(ctx, store, src, blobstore.NewBlobKey("main", "bench"), blobstore.UploadOptions{})
	if err != nil {
		return err
	}
	os.RemoveAll(src)
	a = b.action("bigartifact", "true")
	a.Inputs = []action.Input{{Name: "data", Path: "data", Key: art.Key, Digest: art.Digest}}
	// Appending a byte makes a new artifact, so the upload is not deduplicated away.
	a.Run = action.Run{Path: "sh", Args: []string{"-c", "echo x >> data/big.bin"}}
	a.Outputs = []action.Output{{Name: "data", Path: "data"}}
	start := time.Now()
	var peak peakRSS
	step, err := b.runStep(ctx, a, peak.watch)
	if err != nil {
		return err
	}
	took := time.Since(start)
	ru := step.Sidecar.ProcessState.SysUsage().(*syscall.Rusage)
	fmt.Printf("  stored artifact %.1f MiB; step took %s; sidecar peak RSS %.1f MiB (VmHWM, read every %s); sidecar CPU user %s sys %s\n",
		float64(art.Size)/(1<<20), took.Round(time.Millisecond), float64(peak.load())/(1<<20), hwmInterval,
		time.Duration(ru.Utime.Nano()).Round(time.Millisecond), time.Duration(ru.Stime.Nano()).Round(time.Millisecond))
	return nil
}

func (b *bench) action(name string, argv ...string) *action.Action {
	b.steps++
	return &action.Action{StepID: fmt.Sprintf("%s-%d", name, b.steps), Build: action.Build{ID: "bench", Team: "main"},
		StepName: name, Type: "task", Image: "host", Run: action.Run{Path: argv[0], Args: argv[1:]},
		WorkDir: filepath.Join(b.tmp, "work-"+name), ATCLinkInsecure: true /* plain gRPC on loopback */}
}

// hwmInterval is how often the sidecar's high-water mark is read. VmHWM only
// grows, so sampling misses at most the last interval before the exit.
const hwmInterval = 5 * time.Millisecond

// peakRSS follows a process's VmHWM (stepbench.ProcessPeakRSS says why not
// its rusage).
type peakRSS struct {
	mu    sync.Mutex
	bytes int64
}

func (p *peakRSS) watch(pid int, done <-chan struct{}) {
	tick := time.NewTicker(hwmInterval)
	defer tick.Stop()
	for {
		if v, err := stepbench.ProcessPeakRSS(pid); err == nil {
			p.mu.Lock()
			p.bytes = max(p.bytes, v)
			p.mu.Unlock()
		}
		select {
		case <-done:
			return
		case <-tick.C:
		}
	}
}

func (p *peakRSS) load() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bytes
}

// runStep runs a step to its end and checks it succeeded. Each watch is given
// the sidecar's pid and runs until the sidecar exits.
func (b *bench) runStep(ctx context.Context, a *action.Action, watch ...func(pid int, done <-chan struct{})) (*stepproc.Step, error) {
	token, err := b.keys.Mint(a.StepID, time.Hour)
	if err != nil {
		return nil, err
	}
	var sidecarLog testenv.Buffer
	step, err := stepproc.Start(stepproc.Options{Porter: b.porter, Action: a, ATCAddress: b.addr, Token: token,
		Blobstore: b.blob, Root: filepath.Join(b.tmp, "root-"+a.StepID), Stdout: io.Discard, Stderr: io.Discard, SidecarLog: &sidecarLog})
	if err != nil {
		return nil, err
	}
	defer step.Kill()
	var watchers sync.WaitGroup
	for _, w := range watch {
		watchers.Go(func() { w(step.Sidecar.Process.Pid, step.SidecarDone) })
	}
	defer watchers.Wait()
	select {
	case <-step.SidecarDone:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	<-step.EntrypointDone
	if code := step.Entrypoint.ProcessState.ExitCode(); code != 0 {
		return nil, fmt.Errorf("step %s exited %d; sidecar log:\n%s", a.StepID, code, sidecarLog.String())
	}
	return step, nil
}

// writeRandomFile writes incompressible data quickly (a PRNG, not crypto).
func writeRandomFile(path string, size int64) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 1<<20)
	for written := int64(0); written < size; {
		for i := 0; i < len(buf); i += 8 {
			v := rng.Uint64()
			for j := 0; j < 8; j++ {
				buf[i+j] = byte(v >> (8 * j))
			}
		}
		n := min(int64(len(buf)), size-written)
		if _, err := f.Write(buf[:n]); err != nil {
			return err
		}
		written += n
	}
	return f.Close()
}
