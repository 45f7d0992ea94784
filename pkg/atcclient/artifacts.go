package atcclient

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/blobstore"
)

// UploadContentType is the Content-Type of an artifact upload: a tar stream
// compressed with zstd.
const UploadContentType = "application/zstd"

// Bounds of the download decoder, whatever the stream asks for, so that a
// broken or hostile server cannot make the client allocate without limit.
const (
	maxDecoderWindow = 32 << 20
	maxDecoderMemory = 256 << 20
)

// errUploadStopped closes the upload pipe when the HTTP request is over, so
// that the archiving goroutine stops writing.
var errUploadStopped = errors.New("upload request ended")

// UploadArtifact stores dir on the ATC: POST /api/v1/artifacts with the
// directory streamed as tar → zstd → request body, without a temporary file
// and in bounded memory. progress, if not nil, is called with the number of
// compressed bytes sent so far, from the goroutine that sends them. The
// digest the ATC answers with is checked against the stream sent.
func (c *Client) UploadArtifact(ctx context.Context, dir string, progress func(bytes int64)) (api.ArtifactRef, error) {
	const op = "upload artifact"
	fi, err := os.Stat(dir)
	if err != nil {
		return api.ArtifactRef{}, fmt.Errorf("%s: %w", op, err)
	}
	if !fi.IsDir() {
		return api.ArtifactRef{}, fmt.Errorf("%s: %s is not a directory", op, dir)
	}

	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := writeTarZstd(ctx, pw, dir)
		pw.CloseWithError(err) // nil closes with EOF
		done <- err
	}()

	h := sha256.New()
	body := &progressReader{r: io.TeeReader(pr, h), progress: progress}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url("/api/v1/artifacts"), body)
	if err != nil {
		pr.CloseWithError(errUploadStopped)
		<-done
		return api.ArtifactRef{}, fmt.Errorf("%s: %w", op, err)
	}
	req.ContentLength = -1 // streamed: the size is known only at the end
	req.Header.Set("Content-Type", UploadContentType)
	req.Header.Set("Accept", "application/json")
	resp, doErr := c.http.Do(req)
	// The transport may stop reading early (an error answer, a cut
	// connection): unblock the writer, then wait for it either way.
	pr.CloseWithError(errUploadStopped)
	writeErr := <-done
	if errors.Is(writeErr, errUploadStopped) {
		writeErr = nil // a consequence, not a cause
	}

	if doErr != nil {
		if writeErr != nil {
			// The transport's error wraps the writer's; the writer's says
			// what went wrong locally without the noise.
			return api.ArtifactRef{}, fmt.Errorf("%s: %w", op, writeErr)
		}
		return api.ArtifactRef{}, fmt.Errorf("%s: %w", op, doErr)
	}
	if resp.StatusCode/100 != 2 {
		return api.ArtifactRef{}, statusError(op, resp)
	}
	defer resp.Body.Close()
	if writeErr != nil {
		return api.ArtifactRef{}, fmt.Errorf("%s: %w", op, writeErr)
	}
	var ref api.ArtifactRef
	if err := json.NewDecoder(resp.Body).Decode(&ref); err != nil {
		return api.ArtifactRef{}, fmt.Errorf("%s: decode answer: %w", op, err)
	}
	sent := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if ref.Digest != sent {
		return api.ArtifactRef{}, fmt.Errorf("%s: the ATC stored digest %q but the stream sent was %s", op, ref.Digest, sent)
	}
	if ref.Size != 0 && ref.Size != body.n {
		return api.ArtifactRef{}, fmt.Errorf("%s: the ATC stored %d bytes but %d were sent", op, ref.Size, body.n)
	}
	if ref.Key == "" {
		return api.ArtifactRef{}, fmt.Errorf("%s: the ATC answered without a key", op)
	}
	return ref, nil
}

func writeTarZstd(ctx context.Context, w io.Writer, dir string) error {
	enc, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		return fmt.Errorf("zstd encoder: %w", err)
	}
	if err := blobstore.WriteTar(ctx, enc, dir); err != nil {
		enc.Close()
		return err
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("zstd: %w", err)
	}
	return nil
}

type progressReader struct {
	r        io.Reader
	n        int64
	progress func(int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.n += int64(n)
		if p.progress != nil {
			p.progress(p.n)
		}
	}
	return n, err
}

// artifactPath is the API path of an artifact, each segment of its key
// escaped.
func artifactPath(key string) string {
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return "/api/v1/artifacts/" + strings.Join(segs, "/")
}

// DownloadArtifact fetches an artifact into dir, creating dir if needed:
// GET /api/v1/artifacts/{key} streamed through sha256 and zstd into a safe
// extraction. The files land in a staging directory next to dir first and
// move into dir only once the stream's digest matches ref.Digest, so a
// mismatch leaves dir as it was. Files already in dir are kept unless the
// artifact has the same name; then the artifact's wins.
func (c *Client) DownloadArtifact(ctx context.Context, ref api.ArtifactRef, dir string) error {
	op := fmt.Sprintf("download artifact %s", ref.Key)
	algo, want, ok := strings.Cut(ref.Digest, ":")
	if !ok || algo != "sha256" || len(want) != sha256.Size*2 {
		// Without a digest nothing says the files are the build's.
		return fmt.Errorf("%s: cannot verify digest %q: want sha256:<hex>", op, ref.Digest)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url(artifactPath(ref.Key)), nil)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if resp.StatusCode/100 != 2 {
		return statusError(op, resp)
	}
	defer resp.Body.Close()

	// Same filesystem as dir, so the files can be renamed into it.
	staging, err := os.MkdirTemp(filepath.Dir(abs), "."+filepath.Base(abs)+".download-")
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	defer removeAll(staging)

	var body io.Reader = resp.Body
	if ref.Size > 0 {
		// One byte more than announced is enough to see that it is too long.
		body = io.LimitReader(body, ref.Size+1)
	}
	h := sha256.New()
	counted := &progressReader{r: io.TeeReader(body, h)}
	if err := extractTarZstd(ctx, counted, staging); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	got := hex.EncodeToString(h.Sum(nil))
	if got != want {
		return fmt.Errorf("%s: digest mismatch: want %s, got sha256:%s; %s was left untouched", op, ref.Digest, got, dir)
	}
	if ref.Size > 0 && counted.n != ref.Size {
		return fmt.Errorf("%s: size mismatch: want %d bytes, got %d; %s was left untouched", op, ref.Size, counted.n, dir)
	}
	if err := mergeInto(staging, abs); err != nil {
		return fmt.Errorf("%s: move files into %s: %w", op, dir, err)
	}
	return nil
}

func extractTarZstd(ctx context.Context, r io.Reader, dir string) error {
	dec, err := zstd.NewReader(r,
		zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(maxDecoderWindow),
		zstd.WithDecoderMaxMemory(maxDecoderMemory),
	)
	if err != nil {
		return fmt.Errorf("zstd decoder: %w", err)
	}
	defer dec.Close()
	if err := blobstore.Extract(ctx, dec, dir); err != nil {
		return err
	}
	// The digest covers the whole stream: read what the tar reader left
	// (end-of-archive padding, the end of the zstd frame).
	if _, err := io.Copy(io.Discard, dec); err != nil {
		return fmt.Errorf("zstd: %w", err)
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	return nil
}

// mergeInto moves the entries of src into dst: entries dst lacks are
// renamed into it, directories both have are merged (taking src's mode and
// mtime), and anything else in dst with a name from src is replaced. dst's
// entries are looked at with Lstat, so a symlink in dst is replaced, never
// followed.
func mergeInto(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		s, d := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		sfi, err := os.Lstat(s)
		if err != nil {
			return err
		}
		dfi, err := os.Lstat(d)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return err
		case sfi.IsDir() && dfi.IsDir():
			// Moving entries out of s needs write access to it, which the
			// artifact's mode may not give; s is thrown away afterwards.
			if err := os.Chmod(s, sfi.Mode()|0o700); err != nil {
				return err
			}
			if err := mergeInto(s, d); err != nil {
				return err
			}
			if err := os.Chmod(d, sfi.Mode()); err != nil {
				return err
			}
			if err := os.Chtimes(d, sfi.ModTime(), sfi.ModTime()); err != nil {
				return err
			}
			continue
		default:
			if err := os.RemoveAll(d); err != nil {
				return err
			}
		}
		if err := os.Rename(s, d); err != nil {
			return err
		}
	}
	return nil
}

// removeAll removes a staging tree even where the artifact made directories
// read-only.
func removeAll(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	_ = os.RemoveAll(dir)
}
