package blobstore

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"runtime"
	"time"

	"github.com/klauspost/compress/zstd"
)

// ArtifactContentType is the content type of stored artifacts: a tar,
// compressed with zstd or not (see zstdMagic).
const ArtifactContentType = "application/vnd.porter.artifact.tar"

// Bounds of the decoder, whatever the stream asks for: a hostile or corrupt
// artifact cannot make a reader allocate more than this.
const (
	maxDecoderWindow = 32 << 20
	maxDecoderMemory = 256 << 20
)

// Artifact is a directory stored as one tar object, usually compressed
// with zstd (see zstdMagic).
type Artifact struct {
	Key    string
	Size   int64  // bytes of the stored (compressed) stream
	Digest string // "<algorithm>:<hex>" of the stored stream (digest.go)
}

// UploadOptions tune UploadDir.
type UploadOptions struct {
	// PartSize and Concurrency steer the multipart upload (zero: the
	// driver's defaults). Memory is bounded by about PartSize×Concurrency.
	PartSize    int64
	Concurrency int
	// EncoderConcurrency is the number of zstd encoder goroutines; it is at
	// least 2 (zero: GOMAXPROCS, at least 2).
	EncoderConcurrency int
	// LowMemory trades a little compression for encoder buffers of a few
	// MiB (the sidecar, whose memory is the step's).
	LowMemory bool
}

// UploadDir stores dir as one tar object at key, through zstd when its
// content compresses (see zstdMagic), computing the stream's digest (BLAKE3)
// as it goes: tar → zstd → (digest, counter) → Put. Put is
// atomic (a multipart upload is only made visible once complete), so readers
// of key see the previous object or the complete new one, and a failed
// upload leaves nothing new. Uploads to a fresh NewBlobKey are then given
// their content address by Dedup.
func UploadDir(ctx context.Context, store Store, dir, key string, opts UploadOptions) (Artifact, error) {
	encConc := opts.EncoderConcurrency
	if encConc <= 0 {
		encConc = runtime.GOMAXPROCS(0)
	}
	encConc = max(encConc, 2)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := writeArtifact(ctx, pw, dir, encConc, opts.LowMemory)
		pw.CloseWithError(err) // nil closes with EOF
		done <- err
	}()

	algo, h := newArtifactDigest()
	body := &countingReader{r: io.TeeReader(pr, h)}
	start := time.Now()
	info, putErr := store.Put(ctx, key, body, -1, PutOptions{
		ContentType: ArtifactContentType,
		PartSize:    opts.PartSize,
		Concurrency: opts.Concurrency,
	})
	// Stop the writer if Put gave up early, then wait for it either way.
	pr.CloseWithError(errors.New("upload stopped"))
	cancel()
	writeErr := <-done

	if err := errors.Join(writeErr, putErr); err != nil {
		return Artifact{}, fmt.Errorf("upload %s to %q: %w", dir, key, err)
	}
	if info.Size > 0 && info.Size != body.n {
		return Artifact{}, fmt.Errorf("upload %s to %q: stored %d bytes but streamed %d", dir, key, info.Size, body.n)
	}
	a := Artifact{Key: key, Size: body.n, Digest: formatDigest(algo, h)}
	slog.DebugContext(ctx, "artifact uploaded", "dir", dir, "key", key, "digest", a.Digest, "bytes", a.Size, "took", time.Since(start))
	return a, nil
}

// writeArtifact writes dir's tar to w, through zstd when it compresses.
func writeArtifact(ctx context.Context, w io.Writer, dir string, encConc int, lowMem bool) error {
	compress, err := compressible(ctx, dir)
	if err != nil {
		return err
	}
	if !compress {
		return WriteTar(ctx, w, dir)
	}
	zopts := []zstd.EOption{
		zstd.WithEncoderConcurrency(encConc),
		// The fastest level keeps up with the network on 2 cores (1.2× raw
		// PutObject on a 1 GiB file, bench-artifacts) at about the ratio of
		// gzip on source trees; the default level halved upload speed.
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		// Frame checksums are redundant with the digest of the stream.
		zstd.WithEncoderCRC(false),
	}
	if lowMem {
		// Smaller windows and history buffers: a few MiB per encoder
		// instead of tens, for a small ratio cost.
		zopts = append(zopts, zstd.WithLowerEncoderMem(true), zstd.WithWindowSize(1<<20))
	}
	enc, err := zstd.NewWriter(w, zopts...)
	if err != nil {
		return fmt.Errorf("zstd encoder: %w", err)
	}
	if err := WriteTar(ctx, enc, dir); err != nil {
		enc.Close()
		return err
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("zstd: %w", err)
	}
	return nil
}

// deleteQuietly removes an object even when ctx was canceled; a leftover
// is only garbage for GC, so failures are logged, not returned.
func deleteQuietly(ctx context.Context, store Store, key string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := store.Delete(ctx, key); err != nil {
		slog.WarnContext(ctx, "could not delete object", "key", key, "err", err)
	}
}

// DownloadDir streams the artifact at key into dir (which must exist):
// Get → digest → zstd (when compressed) → tar extraction. If wantDigest is not empty and the
// stream's digest differs, it returns an error; the files already extracted
// must then be treated as garbage (the stream is checked as it arrives, to
// keep memory and disk bounded). The stream is digested with wantDigest's
// algorithm ("blake3:" or "sha256:"; any other is refused before anything
// is read), or with BLAKE3 when wantDigest is empty.
func DownloadDir(ctx context.Context, store Store, key, wantDigest, dir string) (Artifact, error) {
	return DownloadDirLimited(ctx, store, key, wantDigest, dir, ExtractLimits{})
}

// DownloadDirLimited is DownloadDir with the given extraction caps
// (ExtractLimited).
func DownloadDirLimited(ctx context.Context, store Store, key, wantDigest, dir string, limits ExtractLimits) (Artifact, error) {
	algo, h, err := downloadHash(wantDigest)
	if err != nil {
		return Artifact{}, fmt.Errorf("download %q into %s: %w", key, dir, err)
	}
	rc, err := openObject(ctx, store, key, h)
	if err != nil {
		return Artifact{}, err
	}
	defer rc.Close()
	body := &countingReader{r: rc}
	a, err := readArtifact(ctx, body, algo, h, dir, limits, wantDigest != "")
	if err != nil {
		return Artifact{}, fmt.Errorf("download %q into %s: %w", key, dir, err)
	}
	a.Key = key
	if wantDigest != "" && a.Digest != wantDigest {
		return Artifact{}, fmt.Errorf("download %q into %s: digest mismatch: want %s, got %s (the extracted files are not trustworthy)", key, dir, wantDigest, a.Digest)
	}
	return a, nil
}

// readArtifact extracts the artifact stream body into dir. digestChecked
// says the caller compares h's digest with a known one: it covers every
// byte of the stream, frame checksums included, so these are not checked
// (the concurrent decoder hashes all its output with xxhash for them, even
// for frames that have none).
func readArtifact(ctx context.Context, body *countingReader, algo string, h hash.Hash, dir string, limits ExtractLimits, digestChecked bool) (Artifact, error) {
	tr, closeTar, err := openTar(body,
		zstd.WithDecoderLowmem(true),
		zstd.WithDecoderConcurrency(2),
		zstd.WithDecoderMaxWindow(maxDecoderWindow),
		zstd.WithDecoderMaxMemory(maxDecoderMemory),
		zstd.IgnoreChecksum(digestChecked),
	)
	if err != nil {
		return Artifact{}, err
	}
	defer closeTar()
	if err := ExtractLimited(ctx, tr, dir, limits); err != nil {
		return Artifact{}, err
	}
	// The digest covers the whole stored stream: read what the tar reader
	// left (its end-of-archive padding, the end of the zstd frame).
	if _, err := io.Copy(io.Discard, tr); err != nil {
		return Artifact{}, fmt.Errorf("read the artifact's end: %w", err)
	}
	if _, err := io.Copy(io.Discard, body); err != nil {
		return Artifact{}, fmt.Errorf("read: %w", err)
	}
	return Artifact{Size: body.n, Digest: formatDigest(algo, h)}, nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// UploadStream stores an already-encoded artifact stream (tar through zstd,
// as a client produces it) at key, with UploadDir's atomicity.
func UploadStream(ctx context.Context, store Store, key string, r io.Reader) (Artifact, error) {
	algo, h := newArtifactDigest()
	body := &countingReader{r: io.TeeReader(r, h)}
	if _, err := store.Put(ctx, key, body, -1, PutOptions{ContentType: ArtifactContentType}); err != nil {
		return Artifact{}, fmt.Errorf("upload artifact stream to %q: %w", key, err)
	}
	return Artifact{Key: key, Size: body.n, Digest: formatDigest(algo, h)}, nil
}
