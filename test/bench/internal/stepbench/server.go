// Package stepbench runs the ATC's sidecar endpoint for the benchmarks: the
// real stepserver.Server with the ATC's real sink (atc.LogSink: build logs
// in the blobstore) and token verifier (steptoken), served over gRPC+TLS
// the way the ATC serves it, in a child process of its own so that its
// memory and CPU can be told from the simulated sidecars'.
//
// A benchmark's main calls MaybeServe first: the child is the benchmark's
// own binary run again with the subcommand "serve".
package stepbench

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/porter-ci/porter/pkg/atc"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/resource"
	"github.com/porter-ci/porter/pkg/stepserver"
	"github.com/porter-ci/porter/pkg/steptoken"
)

// serveCommand is the child's subcommand.
const serveCommand = "serve"

// Sink names what the child stores events in.
const (
	// SinkATC is the ATC's own sink: build logs committed to the blobstore.
	SinkATC = "atc"
	// SinkDiscard acknowledges events without storing them: the cost of
	// gRPC, TLS and the stepserver alone, a baseline.
	SinkDiscard = "discard"
)

// Options configure the server child.
type Options struct {
	// Dir holds the CA, the server's certificate and the token key.
	Dir string
	// Blob is the blobstore the ATC sink writes build logs to.
	Blob blobstore.Config
	// Sink is SinkATC or SinkDiscard.
	Sink string
	// Steps is the number of steps, named StepID(0..Steps-1); each
	// StepsPerBuild of them share a build (and its log).
	Steps, StepsPerBuild int
	// MaxBuildLogBytes is --max-build-log-bytes (0: no cap).
	MaxBuildLogBytes int64
	// Limits are the stepserver's (zero: its defaults).
	Limits stepserver.Limits
	// CPUProfile and MemProfile, when set, are where the child writes its
	// CPU profile (from start to stop) and its heap profile (on
	// HeapProfile, with the mutex, block and goroutine profiles next to it).
	CPUProfile, MemProfile string
	// Stats, when set, is how often the child prints its rates (events,
	// syncs, chunk writes) and heap on Stderr.
	Stats time.Duration
	// Stderr receives the child's log (nil: discarded).
	Stderr io.Writer
}

// StepID names step i.
func StepID(i int) string { return fmt.Sprintf("bench-step-%05d", i) }

// Server is the running child.
type Server struct {
	Addr  string
	CAPEM []byte
	// Keys mints tokens the child accepts.
	Keys *steptoken.Keyring

	cmd   *exec.Cmd
	stdin io.WriteCloser
	// replies are the child's answers on its stdout, a line each.
	replies chan string
}

// Usage is what the child used over its life.
type Usage struct {
	PeakRSS      int64 // bytes (the child's own VmHWM as it ended)
	User, System time.Duration
}

// Start writes a CA, a server certificate and a token key under opts.Dir
// and starts the child, which listens on a free loopback port.
func Start(ctx context.Context, opts Options) (*Server, error) {
	caPEM, err := writeCerts(opts.Dir)
	if err != nil {
		return nil, err
	}
	key, err := steptoken.NewKey()
	if err != nil {
		return nil, err
	}
	keys, err := steptoken.NewKeyring(key)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(opts.Dir, "step-token.key"), key, 0o600); err != nil {
		return nil, fmt.Errorf("write step token key: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the benchmark's binary: %w", err)
	}
	args := []string{serveCommand, "-dir", opts.Dir, "-sink", opts.Sink,
		"-steps", strconv.Itoa(opts.Steps), "-steps-per-build", strconv.Itoa(max(opts.StepsPerBuild, 1)),
		"-max-build-log-bytes", strconv.FormatInt(opts.MaxBuildLogBytes, 10),
		"-streams-per-conn", strconv.FormatUint(uint64(opts.Limits.StreamsPerConn), 10),
		"-streams-per-step", strconv.Itoa(opts.Limits.StreamsPerStep),
		"-cpuprofile", opts.CPUProfile, "-memprofile", opts.MemProfile, "-stats", opts.Stats.String()}
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Env = append(os.Environ(),
		blobstore.EnvDriver+"="+opts.Blob.Driver, blobstore.EnvEndpoint+"="+opts.Blob.Endpoint,
		blobstore.EnvBucket+"="+opts.Blob.Bucket, blobstore.EnvRegion+"="+opts.Blob.Region,
		blobstore.EnvAccessKey+"="+opts.Blob.AccessKey, blobstore.EnvSecretKey+"="+opts.Blob.SecretKey,
		blobstore.EnvSecure+"="+strconv.FormatBool(opts.Blob.Secure))
	cmd.Stderr = opts.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the server child: %w", err)
	}
	s := &Server{CAPEM: caPEM, Keys: keys, cmd: cmd, stdin: stdin}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if addr, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
			s.Addr = addr
			break
		}
	}
	if s.Addr == "" {
		stdin.Close()
		_ = cmd.Wait()
		return nil, fmt.Errorf("the server child exited before listening: %v", cmd.ProcessState)
	}
	s.replies = make(chan string)
	go func() {
		for sc.Scan() {
			s.replies <- sc.Text()
		}
		close(s.replies)
	}()
	return s, nil
}

// Pid is the child's process ID.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// PeakRSS is the child's peak resident set so far (VmHWM), in bytes.
func (s *Server) PeakRSS() (int64, error) { return ProcessPeakRSS(s.Pid()) }

// RSS is the child's resident set now (VmRSS), in bytes.
func (s *Server) RSS() (int64, error) { return procStatus(s.Pid(), "VmRSS") }

// ProcessPeakRSS is a live process's peak resident set (VmHWM), in bytes.
// It is the figure to use for a child: the ru_maxrss that wait4 reports
// for one carries its parent's peak, because Go starts children with vfork
// and the kernel keeps the old address space's high-water mark at exec.
func ProcessPeakRSS(pid int) (int64, error) { return procStatus(pid, "VmHWM") }

func procStatus(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read process %d's status: %w", pid, err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse %s %q: %w", field, v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// Stop asks the child to finish every build (durably) and exit, and
// returns what it used.
func (s *Server) Stop() (Usage, error) {
	s.stdin.Close()
	// The child's last line is its own peak; its stdout ends as it exits,
	// and is read to the end before Wait closes it.
	var u Usage
	for line := range s.replies {
		if v, ok := strings.CutPrefix(line, "peak-rss "); ok {
			u.PeakRSS, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	err := s.cmd.Wait()
	st := s.cmd.ProcessState
	if st == nil {
		return Usage{}, fmt.Errorf("wait for the server child: %w", err)
	}
	if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
		u.User, u.System = time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
	}
	if err != nil {
		return u, fmt.Errorf("the server child: %w", err)
	}
	return u, nil
}

// HeapProfile asks the child to write its heap profile (Options.MemProfile)
// now, as of its last garbage collection.
func (s *Server) HeapProfile() error {
	if _, err := io.WriteString(s.stdin, "heap\n"); err != nil {
		return fmt.Errorf("ask the server child for a heap profile: %w", err)
	}
	return nil
}

// Events is how many events the child's sink has taken so far.
func (s *Server) Events() (int64, error) {
	if _, err := io.WriteString(s.stdin, "count\n"); err != nil {
		return 0, fmt.Errorf("ask the server child for its count: %w", err)
	}
	line, ok := <-s.replies
	if !ok {
		return 0, errors.New("the server child exited")
	}
	n, err := strconv.ParseInt(strings.TrimPrefix(line, "events "), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the server child's count %q: %w", line, err)
	}
	return n, nil
}

// Kill ends the child at once (after a failure).
func (s *Server) Kill() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// Dial opens one connection the way a sidecar does (pkg/sidecar dialATC):
// TLS with the ATC's CA, the sidecar's keepalive.
func (s *Server) Dial() (*grpc.ClientConn, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.CAPEM) {
		return nil, errors.New("no certificate in the server child's CA")
	}
	creds := credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	conn, err := grpc.NewClient(s.Addr, grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 20 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}))
	if err != nil {
		return nil, fmt.Errorf("dial the server child at %s: %w", s.Addr, err)
	}
	return conn, nil
}

// writeCerts makes a CA and a server certificate for 127.0.0.1 the way the
// ATC does (pkg/atc/tls.go: ECDSA P-256) and returns the CA's PEM.
func writeCerts(dir string) ([]byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "porter bench CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, IsCA: true, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("parse CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate server key: %w", err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create server certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode server key: %w", err)
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	files := map[string][]byte{
		"ca.crt":     caPEM,
		"server.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"server.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", name, err)
		}
	}
	return caPEM, nil
}

// MaybeServe runs the child and exits if the binary was started as one.
func MaybeServe() {
	if len(os.Args) < 2 || os.Args[1] != serveCommand {
		return
	}
	if err := serve(os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "server child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serve is the child: it serves until its stdin closes, then finishes
// every build and exits.
func serve(args []string) (err error) {
	fs := flag.NewFlagSet(serveCommand, flag.ContinueOnError)
	dir := fs.String("dir", "", "directory with ca.crt, server.crt, server.key, step-token.key")
	sinkName := fs.String("sink", SinkATC, "atc or discard")
	steps := fs.Int("steps", 1, "steps")
	perBuild := fs.Int("steps-per-build", 1, "steps per build")
	maxLog := fs.Int64("max-build-log-bytes", 1<<30, "--max-build-log-bytes")
	perConn := fs.Uint("streams-per-conn", 0, "HTTP/2 streams per connection (0: default)")
	perStep := fs.Int("streams-per-step", 0, "streams per step (0: default)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile here")
	memProfile := fs.String("memprofile", "", "write a heap profile here when asked")
	statsEvery := fs.Duration("stats", 0, "print the server's rates this often (0: never)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		runtime.SetMutexProfileFraction(100)
		runtime.SetBlockProfileRate(int(time.Millisecond))
	}
	key, err := os.ReadFile(filepath.Join(*dir, "step-token.key"))
	if err != nil {
		return fmt.Errorf("read step token key: %w", err)
	}
	keys, err := steptoken.NewKeyring(key)
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(*dir, "server.crt"), filepath.Join(*dir, "server.key"))
	if err != nil {
		return fmt.Errorf("load server certificate: %w", err)
	}

	var stats counters
	var sink stepserver.Sink
	var finish func() error
	switch *sinkName {
	case SinkDiscard:
		sink, finish = discardSink{}, func() error { return nil }
	case SinkATC:
		cfg, err := blobstore.ConfigFromEnv()
		if err != nil {
			return err
		}
		store, err := blobstore.Open(ctx, cfg)
		if err != nil {
			return fmt.Errorf("open blobstore: %w", err)
		}
		ls, err := atc.NewLogSink(countingStore{store, &stats}, *maxLog, log)
		if err != nil {
			return err
		}
		builds := (*steps + *perBuild - 1) / *perBuild
		for b := range builds {
			var ids []string
			for i := b * *perBuild; i < min(*steps, (b+1)**perBuild); i++ {
				ids = append(ids, StepID(i))
			}
			if err := ls.StartBuild(ctx, int64(b+1), ids...); err != nil {
				return err
			}
		}
		defer ls.Close()
		sink = ls
		finish = func() error {
			var errs []error
			for b := range builds {
				errs = append(errs, ls.FinishBuild(ctx, int64(b+1), concourse.StatusSucceeded))
			}
			return errors.Join(errs...)
		}
	default:
		return fmt.Errorf("unknown sink %q", *sinkName)
	}

	sink = countingSink{sink, &stats}
	if *statsEvery > 0 {
		rctx, stop := context.WithCancel(ctx)
		defer stop()
		go stats.report(rctx, *statsEvery)
	}
	// As atc.Server.Run serves sidecars.
	srv := stepserver.New(sink, keys, log).WithLimits(stepserver.Limits{StreamsPerConn: uint32(*perConn), StreamsPerStep: *perStep})
	opts := append(srv.ServerOptions(),
		grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})),
		grpc.MaxRecvMsgSize(resource.MaxResponse+1<<20))
	gs := grpc.NewServer(opts...)
	srv.Register(gs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- gs.Serve(ln) }()
	fmt.Printf("listening %s\n", ln.Addr())

	// The parent asks for a heap profile with a line "heap" and for the
	// number of events taken with "count", and closes stdin to stop the
	// child; a signal stops it too.
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
wait:
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				break wait
			}
			switch {
			case line == "heap" && *memProfile != "":
				if err := writeProfiles(*memProfile); err != nil {
					return err
				}
			case line == "count":
				fmt.Printf("events %d\n", stats.events.Load())
			}
		case <-sigs:
			break wait
		}
	}
	gs.Stop()
	start := time.Now()
	err = finish()
	fmt.Fprintf(os.Stderr, "server child: finished every build in %s\n", time.Since(start).Round(time.Millisecond))
	if peak, perr := ProcessPeakRSS(os.Getpid()); perr == nil {
		fmt.Printf("peak-rss %d\n", peak)
	}
	if serr := <-served; serr != nil && !errors.Is(serr, grpc.ErrServerStopped) {
		err = errors.Join(err, serr)
	}
	return err
}

// writeProfiles writes the heap profile to path, and the mutex, block and
// goroutine profiles next to it.
func writeProfiles(path string) error {
	var errs []error
	for _, name := range []string{"heap", "mutex", "block", "goroutine"} {
		p := path
		if name != "heap" {
			p = strings.TrimSuffix(path, ".heap.pprof") + "." + name + ".pprof"
		}
		f, err := os.Create(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, pprof.Lookup(name).WriteTo(f, 0), f.Close())
	}
	return errors.Join(errs...)
}

// discardSink acknowledges every event and keeps none.
type discardSink struct{}

func (discardSink) LastSeq(context.Context, string) (uint64, error)         { return 0, nil }
func (discardSink) Append(context.Context, string, []*eventspb.Event) error { return nil }
func (discardSink) Sync(context.Context, string, uint64) error              { return nil }

// CPUTime is the CPU time (user and system) the child has used so far.
func (s *Server) CPUTime() (time.Duration, error) { return ProcessCPU(s.Pid()) }

// ProcessCPU is the CPU time (user and system) process pid has used so far.
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read process %d's CPU time: %w", pid, err)
	}
	// The command name, in parentheses, may hold spaces: count from after it.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	// utime and stime are fields 14 and 15, in clock ticks (USER_HZ, 100 on Linux).
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}
