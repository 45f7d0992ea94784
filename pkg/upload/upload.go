// Package upload checks the directories `fly execute -i` uploads (a tar
// stream through gzip) while they stream in, and stores them as artifacts.
// A body that is not a gzip'd tar, holds an entry Extract would refuse, or
// inflates past a cap fails its read before the end of the stream, so the
// blobstore's Put, which only makes an object visible once its body ends
// cleanly, stores nothing.
package upload

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"

	"github.com/porter-ci/porter/pkg/blobstore"
)

// Flags of the ATC that set Limits; errors name them.
const (
	FlagMaxInflated = "max-artifact-upload-inflated"
	FlagMaxEntries  = "max-artifact-upload-entries"
)

// Defaults of Limits. 1 GiB of tar is several times a large source tree
// (fly sends only the files git tracks, .git excluded, unless
// --include-ignored), and bounds what one upload costs the ATC (inflating
// and recompressing) and a step (extracting) to seconds. 500,000 entries is
// above any tree that fits in 1 GiB in practice (the Linux kernel is about
// 90,000 files), and half of what 1 GiB of bare 512-byte headers could hold.
const (
	DefaultMaxInflated int64 = 1 << 30
	DefaultMaxEntries  int64 = 500_000
)

// Limits cap one upload. A zero field means its default.
type Limits struct {
	// MaxInflated is the most bytes of tar (headers, file contents,
	// padding) the gzip stream may inflate to.
	MaxInflated int64
	// MaxEntries is the most tar entries: files, directories and links.
	MaxEntries int64
}

// WithDefaults fills the zero fields with the defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxInflated <= 0 {
		l.MaxInflated = DefaultMaxInflated
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultMaxEntries
	}
	return l
}

// LimitError is an upload over one of the Limits (HTTP 413).
type LimitError struct {
	Inflated bool // the cap on inflated bytes; else the one on entries
	Limit    int64
}

func (e *LimitError) Error() string {
	if e.Inflated {
		return fmt.Sprintf("upload inflates to more than %s (serve --%s)", sizeString(e.Limit), FlagMaxInflated)
	}
	return fmt.Sprintf("upload holds more than %d files, directories and links (serve --%s)", e.Limit, FlagMaxEntries)
}

// FormatError is a body that is not a gzip'd tar this server stores
// (HTTP 400). It wraps the underlying error (blobstore.ErrUnsafePath for a
// refused entry).
type FormatError struct {
	Problem string // what the body is not, e.g. "not a gzip stream"
	Err     error
}

func (e *FormatError) Error() string { return fmt.Sprintf("%s: %v", e.Problem, e.Err) }
func (e *FormatError) Unwrap() error { return e.Err }

// Stats describe a checked upload.
type Stats struct {
	Inflated int64 // bytes of tar
	Entries  int64
}

// Inflate reads a gzip'd tar from r and writes the tar (inflated, byte for
// byte) to w, checking it as it goes: every entry with
// blobstore.EntryChecker (CheckEntry, and nothing under a symlink of the
// archive), the entries and inflated bytes against limits, and
// whatever follows the end-of-archive marker to be zero padding. It
// returns a *LimitError or *FormatError when the body is at fault; an
// error reading r comes back as it is, one writing w wrapped. A file whose
// header declares more bytes than the cap leaves is refused at its header.
//
// w takes at most the bytes up to the header that fails a check (never
// more than the cap), and the failure is known before Inflate returns: a
// caller piping w into a store ends the pipe with it, never cleanly.
func Inflate(w io.Writer, r io.Reader, limits Limits) (Stats, error) {
	limits = limits.WithDefaults()
	body := &errReader{r: r}
	gz, err := gzip.NewReader(body)
	if err != nil {
		return Stats{}, classify(body, nil, nil, err, "")
	}
	in := &inflated{r: gz, limit: limits.MaxInflated}
	out := &errWriter{w: w}
	tr := tar.NewReader(io.TeeReader(in, out))
	buf := make([]byte, 256<<10)
	var entries int64
	var check blobstore.EntryChecker
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Stats{}, classify(body, in, out, err, "not a tar archive")
		}
		entries++
		if entries > limits.MaxEntries {
			return Stats{}, &LimitError{Limit: limits.MaxEntries}
		}
		if err := check.Check(hdr); err != nil {
			return Stats{}, &FormatError{Problem: "tar entry refused", Err: err}
		}
		if (hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeRegA) && hdr.Size > limits.MaxInflated-in.n {
			// A bomb stops at its first header, not after a GiB of zeros.
			return Stats{}, &LimitError{Inflated: true, Limit: limits.MaxInflated}
		}
		// Read the contents here (through the tee) with a large buffer;
		// tar.Reader would skip them in small reads.
		for {
			_, err := tr.Read(buf)
			if err == io.EOF {
				break
			}
			if err != nil {
				return Stats{}, classify(body, in, out, err, "not a tar archive")
			}
		}
	}
	// After the end-of-archive marker: record padding (GNU tar fills its
	// last 10 KiB record), which must be zeros, then the gzip trailer.
	for {
		n, err := in.Read(buf)
		if bytes.ContainsFunc(buf[:n], func(r rune) bool { return r != 0 }) {
			return Stats{}, &FormatError{Problem: "not a tar archive", Err: errors.New("data after the end of the archive")}
		}
		if _, werr := out.Write(buf[:n]); werr != nil {
			return Stats{}, classify(body, in, out, werr, "")
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return Stats{}, classify(body, in, out, err, "not a tar archive")
		}
	}
	return Stats{Inflated: in.n, Entries: entries}, nil
}

// classify names the failure of one of Inflate's layers: a cap first, then
// the body's own read error (a client gone, a body over
// --max-artifact-upload), then the writer's, then gzip's, and only then
// the tar reader's (problem; "" means err is not the body's fault).
func classify(body *errReader, in *inflated, out *errWriter, err error, problem string) error {
	switch {
	case in != nil && in.over != nil:
		return in.over
	case body.err != nil:
		// As it is: the caller's reader knows best what went wrong (a
		// body over its limit says which).
		return body.err
	case out != nil && out.err != nil:
		return fmt.Errorf("store the upload: %w", out.err)
	case in == nil || in.err != nil:
		// gzip.NewReader's failure, or the inflating reader's.
		switch {
		case in == nil && errors.Is(err, io.EOF):
			err = errors.New("the body is empty")
		case errors.Is(err, io.ErrUnexpectedEOF):
			err = errors.New("the body ends before the gzip stream does")
		}
		return &FormatError{Problem: "not a gzip stream", Err: err}
	case problem == "":
		return err
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return &FormatError{Problem: problem, Err: errors.New("it is cut short (in a header or a file)")}
	}
	return &FormatError{Problem: problem, Err: err}
}

// errReader remembers the first error of r other than io.EOF.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}

// errWriter remembers the first error of w.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

// inflated counts gzip's output and fails a read that would cross limit;
// it remembers gzip's errors (err) apart from its own (over).
type inflated struct {
	r     io.Reader
	limit int64
	n     int64
	err   error
	over  *LimitError
}

func (c *inflated) Read(p []byte) (int, error) {
	if c.over != nil {
		return 0, c.over
	}
	// Never hand out bytes past the cap: ask for one more than it leaves,
	// so that a stream of exactly limit bytes still passes.
	if room := c.limit - c.n + 1; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.limit {
		c.over = &LimitError{Inflated: true, Limit: c.limit}
		return 0, c.over
	}
	if err != nil && err != io.EOF {
		c.err = err
	}
	return n, err
}

// errStopped ends the pipe into the store when the store gave up early.
var errStopped = errors.New("upload stopped")

// Store stores a gzip'd tar body at key as an artifact (tar through zstd),
// checking it with Inflate as it streams: a body that fails a check, or
// breaks off, stores nothing (blobstore.UploadStream is atomic: the object
// only appears when its body reaches a clean end, which only a body that
// passed every check does).
func Store(ctx context.Context, store blobstore.Store, key string, body io.Reader, limits Limits) (blobstore.Artifact, error) {
	pr, pw := io.Pipe()
	checked := make(chan error, 1)
	go func() {
		err := recompress(pw, body, limits)
		checked <- err
		pw.CloseWithError(err) // nil: EOF, the store commits
	}()
	a, err := blobstore.UploadStream(ctx, store, key, pr)
	pr.CloseWithError(errStopped)
	switch cerr := <-checked; {
	case cerr == nil:
		return a, err
	case err != nil && errors.Is(cerr, errStopped):
		// The store failed first; the check only saw the pipe close.
		return blobstore.Artifact{}, err
	default:
		// The check names the cause; the store's error only echoes it.
		return blobstore.Artifact{}, cerr
	}
}

// recompress writes body, checked, to pw as tar through zstd.
func recompress(pw *io.PipeWriter, body io.Reader, limits Limits) error {
	enc, err := zstd.NewWriter(pw, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		return fmt.Errorf("zstd encoder: %w", err)
	}
	if _, err := Inflate(enc, body, limits); err != nil {
		// Fail the store's read before Close flushes the end of the frame.
		pw.CloseWithError(err)
		enc.Close()
		return err
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("zstd: %w", err)
	}
	return nil
}

// sizeString writes n in the largest binary unit that divides it.
func sizeString(n int64) string {
	for _, u := range []struct {
		size int64
		name string
	}{{1 << 40, "TiB"}, {1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d %s", n/u.size, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}
