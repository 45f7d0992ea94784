package blobstore_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/porter-ci/porter/pkg/blobstore"
)

// zstdBomb is a zstd-compressed tar holding one file of size zero bytes:
// a few KiB that expand to size.
func zstdBomb(t testing.TB, size int64) []byte {
	t.Helper()
	var out bytes.Buffer
	enc, err := zstd.NewWriter(&out, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(enc)
	if err := tw.WriteHeader(&tar.Header{Name: "bomb", Typeflag: tar.TypeReg, Mode: 0o644, Size: size}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(tw, zeros{}, size); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// diskUsage is the bytes of regular files (each hard-linked file once) and
// the number of entries under dir.
func diskUsage(t testing.TB, dir string) (bytes, entries int64) {
	t.Helper()
	seen := map[uint64]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		entries++
		if d.Type().IsRegular() && !seen[inode(p)] {
			seen[inode(p)] = true
			fi, err := d.Info()
			if err != nil {
				return err
			}
			bytes += fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bytes, entries
}

// memStore serves one object; enough for DownloadDirLimited's pure path
// (the real stores are covered by the conformance suite and the cluster
// spec test/runtime/podhard_test.go).
type memStore struct {
	blobstore.Store
	key  string
	data []byte
}

func (m memStore) Get(_ context.Context, key string) (io.ReadCloser, blobstore.ObjectInfo, error) {
	if key != m.key {
		return nil, blobstore.ObjectInfo{}, blobstore.ErrNotFound
	}
	return io.NopCloser(bytes.NewReader(m.data)), blobstore.ObjectInfo{Key: key, Size: int64(len(m.data))}, nil
}

func TestZstdBombRefused(t *testing.T) {
	const expanded = 1 << 30
	bomb := zstdBomb(t, expanded)
	if len(bomb) > 1<<20 {
		t.Fatalf("bomb is %d bytes compressed, want a bomb", len(bomb))
	}
	limits := blobstore.ExtractLimits{MaxBytes: 16 << 20}
	dir := t.TempDir()
	store := memStore{key: "artifacts/bomb.tar.zst", data: bomb}
	_, err := blobstore.DownloadDirLimited(context.Background(), store, store.key, "", dir, limits)
	if !errors.Is(err, blobstore.ErrExtractLimit) {
		t.Fatalf("bomb of %d compressed bytes: err = %v, want ErrExtractLimit", len(bomb), err)
	}
	for _, want := range []string{"16777216 bytes", "cap on bytes per extraction", `"bomb"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if written, _ := diskUsage(t, dir); written > limits.MaxBytes {
		t.Errorf("%d bytes written before the refusal, cap %d", written, limits.MaxBytes)
	}

	// The same archive under a cap it fits passes.
	dir = t.TempDir()
	if _, err := blobstore.DownloadDirLimited(context.Background(), store, store.key, "", dir, blobstore.ExtractLimits{MaxBytes: expanded}); err != nil {
		t.Fatalf("bomb under a cap of exactly its size: %v", err)
	}
	if written, _ := diskUsage(t, dir); written != expanded {
		t.Errorf("extracted %d bytes, want %d", written, expanded)
	}
}

func TestExtractLimits(t *testing.T) {
	many := func(n int) []byte {
		var entries []tarEntry
		for i := range n {
			entries = append(entries, tarEntry{Name: fmt.Sprintf("d/f%05d", i), Type: tar.TypeReg, Body: "x"})
		}
		return makeTar(entries...)
	}
	for _, tc := range []struct {
		name    string
		archive []byte
		limits  blobstore.ExtractLimits
		refused string // "" = accepted
	}{
		{"files under the cap", many(99), blobstore.ExtractLimits{MaxFiles: 100}, ""},
		{"files at the cap", many(100), blobstore.ExtractLimits{MaxFiles: 100}, ""},
		{"files over the cap", many(101), blobstore.ExtractLimits{MaxFiles: 100}, "more than 100 files and directories"},
		{"directories count", makeTar(tarEntry{Name: "a/", Type: tar.TypeDir, Mode: 0o755}, tarEntry{Name: "a/b/", Type: tar.TypeDir, Mode: 0o755}, tarEntry{Name: "a/b/c/", Type: tar.TypeDir, Mode: 0o755}), blobstore.ExtractLimits{MaxFiles: 2}, "more than 2 files"},
		{"bytes at the cap", makeTar(tarEntry{Name: "a", Type: tar.TypeReg, Body: "12345"}, tarEntry{Name: "b", Type: tar.TypeReg, Body: "12345"}), blobstore.ExtractLimits{MaxBytes: 10}, ""},
		{"bytes over the cap", makeTar(tarEntry{Name: "a", Type: tar.TypeReg, Body: "12345"}, tarEntry{Name: "b", Type: tar.TypeReg, Body: "123456"}), blobstore.ExtractLimits{MaxBytes: 10}, `"b" (6 bytes) takes the artifact over 10 bytes`},
		{"links are entries without bytes", makeTar(tarEntry{Name: "a", Type: tar.TypeReg, Body: "12345"}, tarEntry{Name: "h", Type: tar.TypeLink, Linkname: "a"}, tarEntry{Name: "s", Type: tar.TypeSymlink, Linkname: "a"}), blobstore.ExtractLimits{MaxBytes: 5, MaxFiles: 3}, ""},
		{"defaults", many(10), blobstore.ExtractLimits{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			err := blobstore.ExtractLimited(context.Background(), bytes.NewReader(tc.archive), dir, tc.limits)
			if tc.refused == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, blobstore.ErrExtractLimit) || !strings.Contains(err.Error(), tc.refused) {
				t.Fatalf("err = %v, want ErrExtractLimit saying %q", err, tc.refused)
			}
			written, entries := diskUsage(t, dir)
			if tc.limits.MaxBytes > 0 && written > tc.limits.MaxBytes {
				t.Errorf("%d bytes written, cap %d", written, tc.limits.MaxBytes)
			}
			// Parents missing from the stream are created for the entry.
			if tc.limits.MaxFiles > 0 && entries > tc.limits.MaxFiles+1 {
				t.Errorf("%d entries written, cap %d", entries, tc.limits.MaxFiles)
			}
		})
	}
}

func TestExtractLimitsFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	l, err := blobstore.ExtractLimitsFromEnv(env(map[string]string{blobstore.EnvMaxExtractBytes: "1048576", blobstore.EnvMaxExtractFiles: "10"}))
	if err != nil || l != (blobstore.ExtractLimits{MaxBytes: 1 << 20, MaxFiles: 10}) {
		t.Errorf("ExtractLimitsFromEnv = %+v, %v", l, err)
	}
	if l, err := blobstore.ExtractLimitsFromEnv(env(nil)); err != nil || l != (blobstore.ExtractLimits{}) {
		t.Errorf("unset: %+v, %v; want zero (the defaults)", l, err)
	}
	for _, bad := range []string{"-1", "0", "1GiB", "x"} {
		if _, err := blobstore.ExtractLimitsFromEnv(env(map[string]string{blobstore.EnvMaxExtractBytes: bad})); err == nil || !strings.Contains(err.Error(), blobstore.EnvMaxExtractBytes) {
			t.Errorf("%q: err = %v", bad, err)
		}
	}
}

// FuzzExtractLimited: whatever the archive, a capped extraction never
// writes more than its caps (entries: plus the parents it creates for the
// entry it refuses), and a refusal always names ErrExtractLimit or is
// another error.
//
//	go test ./pkg/blobstore -run '^$' -fuzz FuzzExtractLimited -fuzztime 30s
func FuzzExtractLimited(f *testing.F) {
	f.Add(makeTar(tarEntry{Name: "a", Type: tar.TypeReg, Body: "hello"}, tarEntry{Name: "d/e/f", Type: tar.TypeReg, Body: "world!"}), int64(8), int64(3))
	f.Add(makeTar(tarEntry{Name: "a/", Type: tar.TypeDir, Mode: 0o755}, tarEntry{Name: "a/b", Type: tar.TypeLink, Linkname: "a"}), int64(1), int64(1))
	f.Fuzz(func(t *testing.T, data []byte, maxBytes, maxFiles int64) {
		maxBytes, maxFiles = 1+abs(maxBytes)%4096, 1+abs(maxFiles)%64
		dir := t.TempDir()
		_ = blobstore.ExtractLimited(context.Background(), bytes.NewReader(data), dir, blobstore.ExtractLimits{MaxBytes: maxBytes, MaxFiles: maxFiles})
		written, _ := diskUsage(t, dir)
		if written > maxBytes {
			t.Fatalf("%d bytes written, cap %d", written, maxBytes)
		}
	})
}

func abs(n int64) int64 {
	if n < 0 {
		return -(n + 1)
	}
	return n
}
