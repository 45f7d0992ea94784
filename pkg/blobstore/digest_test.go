package blobstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/zeebo/blake3"

	"github.com/porter-ci/porter/pkg/blobstore"
)

// bucketStore is a bucket in memory, enough for uploads, ranged downloads
// and Dedup; it counts Gets so a test can tell nothing was read.
type bucketStore struct {
	blobstore.Store // Copy: unused
	mu              sync.Mutex
	objs            map[string][]byte
	gets            atomic.Int64
}

func newBucketStore() *bucketStore { return &bucketStore{objs: map[string][]byte{}} }

func (s *bucketStore) Put(_ context.Context, key string, body io.Reader, _ int64, _ blobstore.PutOptions) (blobstore.ObjectInfo, error) {
	b, err := io.ReadAll(body)
	if err != nil {
		return blobstore.ObjectInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objs[key] = b
	return blobstore.ObjectInfo{Key: key, Size: int64(len(b))}, nil
}

func (s *bucketStore) object(key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.objs[key]
	if !ok {
		return nil, fmt.Errorf("%q: %w", key, blobstore.ErrNotFound)
	}
	return b, nil
}

func (s *bucketStore) Get(_ context.Context, key string) (io.ReadCloser, blobstore.ObjectInfo, error) {
	s.gets.Add(1)
	b, err := s.object(key)
	if err != nil {
		return nil, blobstore.ObjectInfo{}, err
	}
	return io.NopCloser(bytes.NewReader(b)), blobstore.ObjectInfo{Key: key, Size: int64(len(b))}, nil
}

func (s *bucketStore) GetRange(_ context.Context, key string, off, n int64) (io.ReadCloser, error) {
	s.gets.Add(1)
	b, err := s.object(key)
	if err != nil {
		return nil, err
	}
	if off < 0 || n <= 0 || off+n > int64(len(b)) {
		return nil, fmt.Errorf("%q bytes %d+%d: out of range", key, off, n)
	}
	return io.NopCloser(bytes.NewReader(b[off : off+n])), nil
}

func (s *bucketStore) Stat(_ context.Context, key string) (blobstore.ObjectInfo, error) {
	b, err := s.object(key)
	if err != nil {
		return blobstore.ObjectInfo{}, err
	}
	return blobstore.ObjectInfo{Key: key, Size: int64(len(b))}, nil
}

func (s *bucketStore) Delete(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.objs, key)
	return nil
}

func (s *bucketStore) List(_ context.Context, prefix string) ([]blobstore.ObjectInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []blobstore.ObjectInfo
	for k, b := range s.objs {
		if strings.HasPrefix(k, prefix) {
			out = append(out, blobstore.ObjectInfo{Key: k, Size: int64(len(b))})
		}
	}
	slices.SortFunc(out, func(a, b blobstore.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

func blake3Digest(b []byte) string {
	sum := blake3.Sum256(b)
	return "blake3:" + hex.EncodeToString(sum[:])
}

func sha256Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// uploadTree uploads a small tree and a file of bigSize random bytes (above
// 16 MiB the download reads the object as parallel ranges).
func uploadTree(t *testing.T, store blobstore.Store, bigSize int) (string, blobstore.Artifact) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src")
	if err := os.MkdirAll(filepath.Join(src, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "sub", "small"), []byte("small file\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "big"), randomBytes(7, bigSize), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := blobstore.UploadDir(t.Context(), store, src, blobstore.NewBlobKey("main", "step"), blobstore.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return src, a
}

// download extracts key into a fresh directory and, on success, checks
// that it holds the tree at src.
func download(t *testing.T, store blobstore.Store, key, wantDigest, src string) (blobstore.Artifact, error) {
	t.Helper()
	dst := t.TempDir()
	a, err := blobstore.DownloadDir(t.Context(), store, key, wantDigest, dst)
	if err != nil {
		return a, err
	}
	want, err := snapshot(src)
	if err != nil {
		t.Fatal(err)
	}
	got, err := snapshot(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !equalTrees(got, want) {
		t.Errorf("downloaded tree differs:\n got %v\nwant %v", got, want)
	}
	return a, nil
}

func equalTrees(a, b map[string]entry) bool {
	if len(a) != len(b) {
		return false
	}
	for k, e := range a {
		f, ok := b[k]
		if !ok || e.Type != f.Type || e.Mode != f.Mode || e.Size != f.Size || e.SHA != f.SHA || e.Link != f.Link || !e.MTime.Equal(f.MTime) {
			return false
		}
	}
	return true
}

var blake3Pattern = regexp.MustCompile(`^blake3:[0-9a-f]{64}$`)

// New artifacts get BLAKE3 digests of their stored bytes, which downloads
// check, as one stream and as parallel ranges.
func TestArtifactBLAKE3RoundTrip(t *testing.T) {
	for _, size := range []int{1 << 10, 20 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			store := newBucketStore()
			src, a := uploadTree(t, store, size)
			stored, err := store.object(a.Key)
			if err != nil {
				t.Fatal(err)
			}
			if !blake3Pattern.MatchString(a.Digest) || a.Digest != blake3Digest(stored) {
				t.Fatalf("digest %s, want the BLAKE3 of the stored bytes, %s", a.Digest, blake3Digest(stored))
			}
			got, err := download(t, store, a.Key, a.Digest, src)
			if err != nil {
				t.Fatal(err)
			}
			if got != a {
				t.Errorf("download gave %+v, want %+v", got, a)
			}
			// No digest to check: the stream is still digested, with BLAKE3.
			if got, err := download(t, store, a.Key, "", src); err != nil || got.Digest != a.Digest {
				t.Errorf("download without a digest: %+v, %v; want digest %s", got, err, a.Digest)
			}
		})
	}
}

// Artifacts stored with SHA-256 digests (before BLAKE3) still download,
// checked with SHA-256.
func TestArtifactSHA256StillVerified(t *testing.T) {
	for _, size := range []int{1 << 10, 20 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			store := newBucketStore()
			src, a := uploadTree(t, store, size)
			stored, err := store.object(a.Key)
			if err != nil {
				t.Fatal(err)
			}
			old := sha256Digest(stored)
			got, err := download(t, store, a.Key, old, src)
			if err != nil {
				t.Fatalf("download with the SHA-256 digest: %v", err)
			}
			if got.Digest != old {
				t.Errorf("download gave digest %s, want %s", got.Digest, old)
			}
			wrong := "sha256:" + strings.Repeat("0", 64)
			if _, err := download(t, store, a.Key, wrong, src); err == nil || !strings.Contains(err.Error(), "digest mismatch") || !strings.Contains(err.Error(), old) {
				t.Errorf("download with a wrong SHA-256 digest: err %v, want a mismatch naming %s", err, old)
			}
		})
	}
}

// A digest that does not match, or a stored byte changed, fails the
// download, for either algorithm.
func TestArtifactDigestMismatch(t *testing.T) {
	for _, size := range []int{1 << 10, 20 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			store := newBucketStore()
			src, a := uploadTree(t, store, size)
			wrong := "blake3:" + strings.Repeat("0", 64)
			_, err := download(t, store, a.Key, wrong, src)
			if err == nil || !strings.Contains(err.Error(), "digest mismatch") || !strings.Contains(err.Error(), a.Digest) {
				t.Errorf("download with a wrong digest: err %v, want a mismatch naming %s", err, a.Digest)
			}

			stored, err := store.object(a.Key)
			if err != nil {
				t.Fatal(err)
			}
			old := sha256Digest(stored)
			// A byte of the big file's content (stored raw: it is
			// incompressible), so the stream still decodes.
			corrupt := bytes.Clone(stored)
			corrupt[len(corrupt)/2] ^= 0x01
			store.objs[a.Key] = corrupt
			for _, d := range []string{a.Digest, old} {
				if _, err := blobstore.DownloadDir(t.Context(), store, a.Key, d, t.TempDir()); err == nil {
					t.Errorf("corrupted artifact downloaded, checked against %s", d)
				}
			}
		})
	}
}

// A digest of an unknown algorithm, or not 32 bytes of hex, is refused
// before anything is read.
func TestArtifactDigestRefused(t *testing.T) {
	store := newBucketStore()
	_, a := uploadTree(t, store, 1<<10)
	_, sum, _ := strings.Cut(a.Digest, ":")
	for digest, want := range map[string]string{
		"md5:" + sum:                     `unknown digest algorithm "md5"`,
		"sha512:" + sum:                  `unknown digest algorithm "sha512"`,
		sum:                              "not <algorithm>:<hex>",
		"blake3:" + sum[:62]:             "64 lower-case hex digits",
		"blake3:" + strings.ToUpper(sum): "64 lower-case hex digits",
	} {
		before := store.gets.Load()
		_, err := blobstore.DownloadDir(t.Context(), store, a.Key, digest, t.TempDir())
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("digest %q: err %v, want one saying %q", digest, err, want)
		}
		if n := store.gets.Load() - before; n != 0 {
			t.Errorf("digest %q: %d reads before the refusal", digest, n)
		}
	}
}

// A stream with zstd frame checksums (as fly execute's uploads store them)
// downloads with and without a digest; without one, a changed checksum is
// still caught by zstd.
func TestArtifactFrameChecksums(t *testing.T) {
	stream := zstdBytes(makeTar(tarEntry{Name: "f", Type: '0', Body: "content"}))
	store := newBucketStore()
	a, err := blobstore.UploadStream(t.Context(), store, "blobs/main/_atc/x.tar.zst", bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest != blake3Digest(stream) {
		t.Fatalf("UploadStream digest %s, want the BLAKE3 of the stream, %s", a.Digest, blake3Digest(stream))
	}
	for _, d := range []string{a.Digest, ""} {
		dst := t.TempDir()
		if _, err := blobstore.DownloadDir(t.Context(), store, a.Key, d, dst); err != nil {
			t.Fatalf("digest %q: %v", d, err)
		}
		if b, err := os.ReadFile(filepath.Join(dst, "f")); err != nil || string(b) != "content" {
			t.Errorf("digest %q: extracted %q, %v", d, b, err)
		}
	}
	bad := bytes.Clone(stream)
	bad[len(bad)-1] ^= 0x01 // the last byte of the frame's checksum
	store.objs[a.Key] = bad
	if _, err := blobstore.DownloadDir(t.Context(), store, a.Key, "", t.TempDir()); err == nil {
		t.Error("a changed frame checksum passed a download without a digest")
	}
	if _, err := blobstore.DownloadDir(t.Context(), store, a.Key, a.Digest, t.TempDir()); err == nil || !strings.Contains(err.Error(), "digest mismatch") {
		t.Errorf("a changed frame checksum with a digest: err %v, want a digest mismatch", err)
	}
}

// Manifests of both algorithms: SHA-256 keys as before, BLAKE3 keys apart
// from them even for the same hex.
func TestManifestKeys(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	old := blobstore.ManifestKey("main", "sha256:"+sum)
	if old != "artifacts/main/"+sum+".json" {
		t.Errorf("SHA-256 manifest key %q changed", old)
	}
	k := blobstore.ManifestKey("main", "blake3:"+sum)
	if k == old || !blobstore.IsManifestKey(k) || !strings.HasPrefix(k, "artifacts/main/") {
		t.Errorf("BLAKE3 manifest key %q: want a manifest key of team main apart from %q", k, old)
	}
}

// Dedup gives BLAKE3 artifacts their content address like SHA-256 ones,
// and refuses digests it cannot name a manifest by.
func TestDedupDigests(t *testing.T) {
	ctx := t.Context()
	store := newBucketStore()
	src, a1 := uploadTree(t, store, 1<<10)
	d1, err := blobstore.Dedup(ctx, store, "main", a1)
	if err != nil || d1 != a1 {
		t.Fatalf("first upload: %+v, %v; want it kept", d1, err)
	}
	a2, err := blobstore.UploadDir(ctx, store, src, blobstore.NewBlobKey("main", "step-2"), blobstore.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d2, err := blobstore.Dedup(ctx, store, "main", a2)
	if err != nil || d2 != a1 {
		t.Fatalf("second upload: %+v, %v; want the first", d2, err)
	}
	if _, err := store.Stat(ctx, a2.Key); err == nil {
		t.Error("the duplicate blob was kept")
	}

	// An artifact stored before BLAKE3 keeps its SHA-256 manifest.
	stored, err := store.object(a1.Key)
	if err != nil {
		t.Fatal(err)
	}
	old := blobstore.Artifact{Key: a1.Key, Size: a1.Size, Digest: sha256Digest(stored)}
	if d, err := blobstore.Dedup(ctx, store, "main", old); err != nil || d != old {
		t.Fatalf("SHA-256 artifact: %+v, %v; want it kept", d, err)
	}
	m, err := blobstore.ReadManifest(ctx, store, blobstore.ManifestKey("main", old.Digest))
	if err != nil || m.Digest != old.Digest || m.Key != a1.Key {
		t.Errorf("SHA-256 manifest: %+v, %v", m, err)
	}
	ms, _ := store.List(ctx, "artifacts/main/")
	if len(ms) != 2 {
		t.Errorf("manifests %v, want one per digest", ms)
	}

	for _, d := range []string{"md5:" + strings.Repeat("0", 32), "blake3:../../x", ""} {
		if _, err := blobstore.Dedup(ctx, store, "main", blobstore.Artifact{Key: a1.Key, Size: a1.Size, Digest: d}); err == nil {
			t.Errorf("Dedup took digest %q", d)
		}
	}
}
