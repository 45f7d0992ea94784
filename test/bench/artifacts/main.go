// Command artifacts measures artifact upload/download throughput against a
// local MinIO (started by test/testenv) and prints a table of MB/s. It
// compares Porter's artifact format (tar → parallel zstd → parallel multipart)
// with raw minio-go object transfers of the same bytes and with a
// single-stream tar+gzip. It prints figures and never fails on timing.
//
//	go run ./test/bench/artifacts [-big-size 1073741824] [-small-files 10000]
package main

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"
	"github.com/zeebo/blake3"
	"golang.org/x/sync/errgroup"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/test/bench/internal/benchstat"
	"github.com/porter-ci/porter/test/testenv"
)

func main() {
	bigSize := flag.Int64("big-size", 1<<30, "bytes of the one-file data set")
	smallFiles := flag.Int("small-files", 10_000, "files in the many-small-files data set")
	flag.IntVar(&downloadRounds, "download-rounds", 3, "rounds of the interleaved 1-file download comparison (0: none)")
	flag.BoolVar(&viaProxy, "via-docker-proxy", false, "reach MinIO at its published port (through docker-proxy) instead of its bridge address")
	flag.StringVar(&downloadProfile, "cpuprofile", "", "write a CPU profile of Porter's download of the one-file data set here")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *bigSize, *smallFiles); err != nil {
		fmt.Fprintln(os.Stderr, "bench-artifacts:", err)
		os.Exit(1)
	}
}

// downloadRounds is how many rounds compareDownloads runs; bigArtifact
// is the one-file data set's artifact as benchPorter stored it.
var (
	downloadRounds int
	bigArtifact    blobstore.Artifact
)

// downloadProfile is where benchPorter writes a CPU profile of its first
// download ("": none).
var downloadProfile string

// viaProxy: MinIO is reached through docker-proxy (-via-docker-proxy).
var viaProxy bool

type result struct {
	dataset, method, direction string
	bytes, stored              int64
	took                       time.Duration
}

func run(ctx context.Context, bigSize int64, smallFiles int) (err error) {
	tmp, err := os.MkdirTemp("", "porter-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	slog.Info("starting MinIO")
	return testenv.WithMinIOBucket(ctx, func(m *testenv.MinIO, cfg blobstore.Config) error {
		return measure(ctx, tmp, m, cfg, bigSize, smallFiles)
	})
}

func measure(ctx context.Context, tmp string, m *testenv.MinIO, cfg blobstore.Config, bigSize int64, smallFiles int) error {
	if m.BridgeEndpoint != "" && !viaProxy {
		// As a step pod reaches MinIO (a Service: kernel NAT), not through
		// docker-proxy, which would take a fifth of the 2 cores both sides
		// of the comparison share.
		cfg.Endpoint = m.BridgeEndpoint
	}
	slog.Info("MinIO endpoint", "endpoint", cfg.Endpoint)
	store, err := blobstore.NewMinio(cfg)
	if err != nil {
		return err
	}

	sets := []struct{ name, dir string }{
		{fmt.Sprintf("1 file, %s", human(bigSize)), filepath.Join(tmp, "big")},
		{fmt.Sprintf("%d small files", smallFiles), filepath.Join(tmp, "small")},
	}
	slog.Info("generating data", "dir", tmp)
	if err := makeBig(sets[0].dir, bigSize); err != nil {
		return err
	}
	if err := makeSmall(sets[1].dir, smallFiles); err != nil {
		return err
	}

	var results []result
	for i, set := range sets {
		size, files, err := dirSize(set.dir)
		if err != nil {
			return err
		}
		for _, m := range []struct {
			name string
			fn   func(context.Context, *blobstore.MinioStore, string, string, []string, int64) ([]result, error)
		}{
			{"porter UploadDir/DownloadDir", benchPorter},
			{"raw minio-go PutObject/GetObject", benchRaw},
			{"tar+gzip, single stream (stdlib)", benchTarGzip},
		} {
			slog.Info("running", "dataset", set.name, "method", m.name)
			out := filepath.Join(tmp, fmt.Sprintf("out-%d", i))
			rs, err := m.fn(ctx, store, set.dir, out, files, size)
			if err != nil {
				return fmt.Errorf("%s, %s: %w", set.name, m.name, err)
			}
			for _, r := range rs {
				r.dataset, r.method, r.bytes = set.name, m.name, size
				results = append(results, r)
			}
			if err := os.RemoveAll(out); err != nil {
				return err
			}
		}
	}

	fmt.Printf("\nartifact throughput (MB/s of directory content; %d CPUs, GOMAXPROCS %d)\n\n", runtime.NumCPU(), runtime.GOMAXPROCS(0))
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "data set\tmethod\tdirection\tseconds\tMB/s\tstored\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.1f\t%s\t\n", r.dataset, r.method, r.direction,
			r.took.Seconds(), float64(r.bytes)/1e6/r.took.Seconds(), human(r.stored))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	printRatios(results, sets[0].name)
	if err := compareDownloads(ctx, store, tmp, sets[0].dir, bigSize); err != nil {
		return err
	}
	// Whole process, all methods included: shows that 1 GiB moved through
	// bounded buffers.
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		fmt.Printf("\npeak RSS of the benchmark process: %s\n", human(ru.Maxrss<<10))
	}
	return nil
}

func benchPorter(ctx context.Context, s *blobstore.MinioStore, dir, out string, _ []string, _ int64) ([]result, error) {
	start := time.Now()
	// What a step and the ATC do: the blob, then its content address.
	a, err := blobstore.UploadDir(ctx, s, dir, blobstore.NewBlobKey("main", "bench"), blobstore.UploadOptions{})
	if err != nil {
		return nil, err
	}
	if a, err = blobstore.Dedup(ctx, s, "main", a); err != nil {
		return nil, err
	}
	up := time.Since(start)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	if bigArtifact.Key == "" {
		bigArtifact = a // the first data set's
	}
	if downloadProfile != "" {
		f, err := os.Create(downloadProfile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		downloadProfile = ""
		defer pprof.StopCPUProfile()
	}
	start = time.Now()
	if _, err := blobstore.DownloadDir(ctx, s, a.Key, a.Digest, out); err != nil {
		return nil, err
	}
	return []result{{direction: "upload", took: up, stored: a.Size}, {direction: "download", took: time.Since(start), stored: a.Size}}, nil
}

// benchRaw moves every file as its own object (8 at a time), with
// minio-go's defaults otherwise: the floor of what the network path costs.
func benchRaw(ctx context.Context, s *blobstore.MinioStore, dir, out string, files []string, size int64) ([]result, error) {
	const workers = 8
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for _, rel := range files {
		g.Go(func() error {
			f, err := os.Open(filepath.Join(dir, rel))
			if err != nil {
				return err
			}
			defer f.Close()
			fi, err := f.Stat()
			if err != nil {
				return err
			}
			_, err = s.Client.PutObject(gctx, s.Bucket, "raw/"+rel, f, fi.Size(), minio.PutObjectOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	up := time.Since(start)

	start = time.Now()
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for _, rel := range files {
		g.Go(func() error {
			p := filepath.Join(out, rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			return s.Client.FGetObject(gctx, s.Bucket, "raw/"+rel, p, minio.GetObjectOptions{})
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return []result{{direction: "upload", took: up, stored: size}, {direction: "download", took: time.Since(start), stored: size}}, nil
}

// benchTarGzip is the classic one-stream approach: tar → gzip → one
// sequential multipart upload, and back.
func benchTarGzip(ctx context.Context, s *blobstore.MinioStore, dir, out string, _ []string, _ int64) ([]result, error) {
	key := "targz/" + filepath.Base(dir) + ".tar.gz"
	start := time.Now()
	pr, pw := io.Pipe()
	go func() {
		zw := gzip.NewWriter(pw)
		err := blobstore.WriteTar(ctx, zw, dir)
		if cerr := zw.Close(); err == nil {
			err = cerr
		}
		pw.CloseWithError(err)
	}()
	info, err := s.Client.PutObject(ctx, s.Bucket, key, pr, -1, minio.PutObjectOptions{PartSize: uint64(blobstore.DefaultPartSize)})
	pr.Close()
	if err != nil {
		return nil, err
	}
	up := time.Since(start)

	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	start = time.Now()
	obj, err := s.Client.GetObject(ctx, s.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	zr, err := gzip.NewReader(obj)
	if err != nil {
		return nil, err
	}
	if err := blobstore.Extract(ctx, zr, out); err != nil {
		return nil, err
	}
	return []result{{direction: "upload", took: up, stored: info.Size}, {direction: "download", took: time.Since(start), stored: info.Size}}, nil
}

// makeBig writes one file of incompressible bytes from a fast PRNG.
func makeBig(dir string, size int64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "data.bin"))
	if err != nil {
		return err
	}
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 1<<20)
	for written := int64(0); written < size; {
		fill(r, buf)
		n := int(min(int64(len(buf)), size-written))
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			return err
		}
		written += int64(n)
	}
	return f.Close()
}

// makeSmall writes n files of 512 B to 8 KiB of hex text (compressible
// about 2:1, like sources and build outputs) in 100 directories.
func makeSmall(dir string, n int) error {
	r := rand.New(rand.NewPCG(3, 4))
	const hexdigits = "0123456789abcdef"
	buf := make([]byte, 8<<10)
	for i := range n {
		size := 512 + r.IntN(len(buf)-512)
		for j := range size {
			buf[j] = hexdigits[r.IntN(16)]
		}
		p := filepath.Join(dir, fmt.Sprintf("d%02d", i%100), fmt.Sprintf("f%05d.txt", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, buf[:size], 0o644); err != nil {
			return err
		}
	}
	return nil
}

func fill(r *rand.Rand, b []byte) {
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		b[i], b[i+1], b[i+2], b[i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		b[i+4], b[i+5], b[i+6], b[i+7] = byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56)
	}
}

// dirSize returns the bytes of the regular files under dir and their
// relative paths.
func dirSize(dir string) (int64, []string, error) {
	var total int64
	var files []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		total += fi.Size()
		rel, _ := filepath.Rel(dir, p)
		files = append(files, rel)
		return nil
	})
	return total, files, err
}

func human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
}

// printRatios sets Porter's one-file throughput beside raw PutObject/GetObject
// of the same bytes in this run (goals: upload ≥ 0.8× (issue 10), download ≥ 0.8× (issue 21)).
func printRatios(results []result, dataset string) {
	mbps := map[string]float64{}
	for _, r := range results {
		if r.dataset == dataset {
			mbps[r.method+"/"+r.direction] = float64(r.bytes) / 1e6 / r.took.Seconds()
		}
	}
	const porter, raw = "porter UploadDir/DownloadDir", "raw minio-go PutObject/GetObject"
	fmt.Printf("\n%s, porter ÷ raw in this run:\n", dataset)
	for _, d := range []struct{ dir, goal string }{{"upload", "goal ≥ 0.80"}, {"download", "goal ≥ 0.80"}} {
		p, r := mbps[porter+"/"+d.dir], mbps[raw+"/"+d.dir]
		if r > 0 {
			fmt.Printf("  %-8s %.2f× (%.1f vs %.1f MB/s; %s)\n", d.dir, p/r, p, r, d.goal)
		}
	}
}

// singleStream is a store whose objects read as one GET stream: it hides
// their size, so DownloadDir does not fetch ranges in parallel (what it did
// before it could).
type singleStream struct{ blobstore.Store }

func (s singleStream) Get(ctx context.Context, key string) (io.ReadCloser, blobstore.ObjectInfo, error) {
	rc, info, err := s.Store.Get(ctx, key)
	info.Size = -1
	return rc, info, err
}

// verifiedGet downloads an object to path as FGetObject does, and then
// hashes the file (BLAKE3), reading it back from the page cache.
func verifiedGet(ctx context.Context, s *blobstore.MinioStore, key, path string) error {
	if err := s.Client.FGetObject(ctx, s.Bucket, key, path, minio.GetObjectOptions{}); err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := blake3.New()
	_, err = io.CopyBuffer(h, f, make([]byte, 1<<20))
	return err
}

// storeAsZstd stores dir as tar through zstd whatever its content, as
// UploadDir did before it stored incompressible content plain, and returns
// its key and digest.
func storeAsZstd(ctx context.Context, s *blobstore.MinioStore, dir string) (key, digest string, err error) {
	pr, pw := io.Pipe()
	go func() {
		enc, err := zstd.NewWriter(pw, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderCRC(false))
		if err != nil {
			pw.CloseWithError(err)
			return
		}
		err = blobstore.WriteTar(ctx, enc, dir)
		pw.CloseWithError(errors.Join(err, enc.Close()))
	}()
	h := blake3.New()
	key = "baseline/zstd.tar.zst"
	if _, err := s.Client.PutObject(ctx, s.Bucket, key, io.TeeReader(pr, h), -1, minio.PutObjectOptions{PartSize: 16 << 20}); err != nil {
		pr.CloseWithError(err)
		return "", "", fmt.Errorf("store the tar+zstd baseline: %w", err)
	}
	return key, blobstore.DigestBLAKE3 + ":" + hex.EncodeToString(h.Sum(nil)), nil
}

// compareDownloads downloads the one-file data set again, the ways
// taking turns round after round, in an order rotated each round, so that
// a loaded machine weighs on each alike: raw GetObject of the file (also
// hashing it, as a verifying runtime must), Porter's artifact as one GET
// stream, and as parallel ranges (DownloadDir), and the same as tar+zstd,
// the baseline. It prints each way's median MB/s and this process's CPU
// time per download (MinIO's is not in it).
func compareDownloads(ctx context.Context, s *blobstore.MinioStore, tmp, dir string, size int64) error {
	if downloadRounds <= 0 || bigArtifact.Key == "" {
		return nil
	}
	files, err := os.ReadDir(dir)
	if err != nil || len(files) != 1 {
		return fmt.Errorf("the one-file data set: %v (%d files)", err, len(files))
	}
	rawKey := "raw/" + files[0].Name()
	// The baseline: the same directory as tar+zstd, as every artifact was
	// stored before incompressible ones were stored plain.
	zstdKey, zstdDigest, err := storeAsZstd(ctx, s, dir)
	if err != nil {
		return err
	}
	ways := []struct {
		name string
		fn   func(out string) error
	}{
		{"raw minio-go GetObject", func(out string) error {
			return s.Client.FGetObject(ctx, s.Bucket, rawKey, filepath.Join(out, files[0].Name()), minio.GetObjectOptions{})
		}},
		// What a runtime that must trust its inputs pays at least: the raw
		// download, and a BLAKE3 of its bytes.
		{"raw GetObject, then BLAKE3 of the file", func(out string) error {
			return verifiedGet(ctx, s, rawKey, filepath.Join(out, files[0].Name()))
		}},
		{"porter DownloadDir, one GET stream, buffered", func(out string) error {
			_, err := blobstore.DownloadDir(ctx, singleStream{s}, bigArtifact.Key, bigArtifact.Digest, out)
			return err
		}},
		{"porter DownloadDir, parallel ranges", func(out string) error {
			_, err := blobstore.DownloadDir(ctx, s, bigArtifact.Key, bigArtifact.Digest, out)
			return err
		}},
		{"before: stored as tar+zstd, one GET stream", func(out string) error {
			_, err := blobstore.DownloadDir(ctx, singleStream{s}, zstdKey, zstdDigest, out)
			return err
		}},
		{"before: stored as tar+zstd, parallel ranges", func(out string) error {
			_, err := blobstore.DownloadDir(ctx, s, zstdKey, zstdDigest, out)
			return err
		}},
	}
	took := make([][]time.Duration, len(ways))
	cpu := make([][]time.Duration, len(ways))
	for round := range downloadRounds {
		// Each round starts one way further on: a way pays for the
		// writeback of the file before it, so no way always follows the
		// same one.
		for k := range ways {
			i := (round + k) % len(ways)
			w := ways[i]
			out := filepath.Join(tmp, "compare")
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			cpu0 := processCPU()
			start := time.Now()
			if err := w.fn(out); err != nil {
				return fmt.Errorf("%s: %w", w.name, err)
			}
			took[i] = append(took[i], time.Since(start))
			cpu[i] = append(cpu[i], processCPU()-cpu0)
			if err := os.RemoveAll(out); err != nil {
				return err
			}
		}
	}
	fmt.Printf("\n1-file download, %d interleaved rounds (median MB/s; ÷ raw; this process's CPU per download):\n", downloadRounds)
	rawMBps := float64(size) / 1e6 / benchstat.Median(took[0]).Seconds()
	for i, w := range ways {
		mbps := float64(size) / 1e6 / benchstat.Median(took[i]).Seconds()
		fmt.Printf("  %-46s %7.1f MB/s  %.2f×  CPU %.2f s\n", w.name, mbps, mbps/rawMBps, benchstat.Median(cpu[i]).Seconds())
	}
	return nil
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))
}
