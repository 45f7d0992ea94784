package upload_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/upload"
)

// entry is one tar entry of a test archive.
type entry struct {
	name, link string
	typ        byte
	body       string
	size       int64 // declared size when body is "" (a bomb's)
}

// tarOf writes entries as a tar (Go's writer: two zero blocks at the end).
func tarOf(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body))}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("header %q: %v", e.name, err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gz(t testing.TB, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// bomb is a gzip'd tar of one file of size zeros, made as a stream (the
// zeros are never held); it is about size/1000 bytes.
func bomb(t testing.TB, size int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Mode: 0o644, Size: size}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(tw, zeros{}, size); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(tw.Close(), zw.Close()); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

var tree = []entry{
	{name: "./", typ: tar.TypeDir},
	{name: "src/", typ: tar.TypeDir},
	{name: "src/main.go", typ: tar.TypeReg, body: "package main\n"},
	{name: "src/link", typ: tar.TypeSymlink, link: "main.go"},
	{name: "src/abs-link", typ: tar.TypeSymlink, link: "/etc/passwd"}, // kept as is, like Extract
	{name: "hard", typ: tar.TypeLink, link: "src/main.go"},
	{name: "empty", typ: tar.TypeReg},
}

func TestInflate(t *testing.T) {
	valid := tarOf(t, tree...)
	// GNU tar pads its last record to 10 KiB with zeros.
	padded := append(bytes.Clone(valid), make([]byte, 10240-len(valid)%10240)...)
	unsafe := func(e entry) []byte { return gz(t, tarOf(t, entry{name: "ok", typ: tar.TypeReg, body: "x"}, e)) }

	type want int
	const (
		ok want = iota
		tooBig
		tooMany
		badFormat
	)
	cases := []struct {
		name   string
		body   []byte
		limits upload.Limits
		want   want
		says   string // in the error
	}{
		{name: "a tree as fly sends it", body: gz(t, valid), want: ok},
		{name: "record padding after the end", body: gz(t, padded), want: ok},
		{name: "two gzip members", body: append(gz(t, valid[:1024]), gz(t, valid[1024:])...), want: ok},
		{name: "an empty tar", body: gz(t, tarOf(t)), want: ok},
		{name: "exactly the cap", body: gz(t, valid), limits: upload.Limits{MaxInflated: int64(len(valid))}, want: ok},
		{name: "one byte over the cap", body: gz(t, valid), limits: upload.Limits{MaxInflated: int64(len(valid)) - 1}, want: tooBig, says: "inflates to more than"},
		{name: "a file declared over the cap", body: bomb(t, 4<<20), limits: upload.Limits{MaxInflated: 1 << 20}, want: tooBig, says: "upload inflates to more than 1 MiB (serve --max-artifact-upload-inflated)"},
		{name: "zeros after the end past the cap", body: gz(t, append(bytes.Clone(valid), make([]byte, 1<<20)...)), limits: upload.Limits{MaxInflated: 64 << 10}, want: tooBig},
		{name: "exactly the entries cap", body: gz(t, valid), limits: upload.Limits{MaxEntries: int64(len(tree))}, want: ok},
		{name: "one entry over the cap", body: gz(t, valid), limits: upload.Limits{MaxEntries: int64(len(tree)) - 1}, want: tooMany, says: "more than 6 files, directories and links (serve --max-artifact-upload-entries)"},
		{name: "empty body", body: nil, want: badFormat, says: "not a gzip stream: the body is empty"},
		{name: "garbage", body: []byte(strings.Repeat("not gzip at all ", 100)), want: badFormat, says: "not a gzip stream"},
		{name: "a plain tar", body: valid, want: badFormat, says: "not a gzip stream"},
		{name: "gzip cut short", body: gz(t, valid)[:200], want: badFormat, says: "the body ends before the gzip stream does"},
		{name: "garbage after the gzip stream", body: append(gz(t, valid), "trailing junk"...), want: badFormat, says: "not a gzip stream"},
		{name: "corrupt gzip data", body: corrupt(gz(t, valid)), want: badFormat, says: "not a gzip stream"},
		{name: "gzip of text", body: gz(t, bytes.Repeat([]byte("hello, world\n"), 100)), want: badFormat, says: "not a tar archive"},
		{name: "gzip of a short text", body: gz(t, []byte("hello")), want: badFormat, says: "not a tar archive: it is cut short"},
		{name: "a tar cut in a file", body: gz(t, tarOf(t, entry{name: "f", typ: tar.TypeReg, body: strings.Repeat("x", 1000)})[:512+500]), want: badFormat, says: "not a tar archive: it is cut short"},
		{name: "data after the end", body: gz(t, append(bytes.Clone(valid), "more"...)), want: badFormat, says: "data after the end of the archive"},
		{name: "absolute name", body: unsafe(entry{name: "/etc/cron.d/x", typ: tar.TypeReg, body: "x"}), want: badFormat, says: "absolute"},
		{name: "dot-dot name", body: unsafe(entry{name: "a/../../x", typ: tar.TypeReg, body: "x"}), want: badFormat, says: ".. component"},
		{name: "hard link outside", body: unsafe(entry{name: "h", typ: tar.TypeLink, link: "../../etc/shadow"}), want: badFormat, says: "hard link"},
		{name: "symlink without target", body: unsafe(entry{name: "s", typ: tar.TypeSymlink}), want: badFormat, says: "no target"},
		{name: "device", body: unsafe(entry{name: "dev", typ: tar.TypeChar}), want: badFormat, says: "device file or FIFO"},
		{name: "fifo", body: unsafe(entry{name: "fifo", typ: tar.TypeFifo}), want: badFormat, says: "device file or FIFO"},
		{name: "sparse", body: gz(t, sparseTar(t, "s", 1<<40)), want: badFormat, says: "sparse"},
		// A symlink pointing out is kept as it is; an entry through it is
		// what the sidecar's extraction refuses, so the upload does too.
		{name: "a symlink pointing out", body: unsafe(entry{name: "etc", typ: tar.TypeSymlink, link: "/etc"}), want: ok},
		{name: "a file through a symlink pointing out", body: gz(t, tarOf(t, entry{name: "etc", typ: tar.TypeSymlink, link: "/etc"},
			entry{name: "etc/cron.d/x", typ: tar.TypeReg, body: "x"})), want: badFormat, says: `"etc/cron.d/x" lies under "etc", a symlink of the archive`},
		{name: "a directory through a symlink", body: gz(t, tarOf(t, entry{name: "d", typ: tar.TypeDir}, entry{name: "d/up", typ: tar.TypeSymlink, link: "../.."},
			entry{name: "d/up/x", typ: tar.TypeDir})), want: badFormat, says: "a symlink of the archive"},
		{name: "a hard link through a symlink", body: gz(t, tarOf(t, entry{name: "s", typ: tar.TypeSymlink, link: "/"},
			entry{name: "h", typ: tar.TypeLink, link: "s/etc/shadow"})), want: badFormat, says: "goes through a symlink"},
		{name: "a symlink replaced by a directory", body: gz(t, tarOf(t, entry{name: "s", typ: tar.TypeSymlink, link: "/"},
			entry{name: "s", typ: tar.TypeDir}, entry{name: "s/x", typ: tar.TypeReg, body: "x"})), want: ok},
		{name: "a file under a nested symlink", body: gz(t, tarOf(t, entry{name: "a/b", typ: tar.TypeSymlink, link: "/etc"},
			entry{name: "a/b/c/d", typ: tar.TypeReg, body: "x"})), want: badFormat, says: `"a/b/c/d" lies under "a/b"`},
		{name: "a name that only starts like a symlink", body: gz(t, tarOf(t, entry{name: "a/b", typ: tar.TypeSymlink, link: "/etc"},
			entry{name: "a/bc/d", typ: tar.TypeReg, body: "x"}, entry{name: "a/b.d", typ: tar.TypeReg, body: "x"})), want: ok},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			src := &countReader{r: bytes.NewReader(c.body)}
			stats, err := upload.Inflate(&out, src, c.limits)
			var lim *upload.LimitError
			var ferr *upload.FormatError
			switch c.want {
			case ok:
				if err != nil {
					t.Fatalf("Inflate: %v", err)
				}
				// The output is the tar, byte for byte.
				plain, _ := io.ReadAll(must(gzip.NewReader(bytes.NewReader(c.body))))
				if !bytes.Equal(out.Bytes(), plain) || stats.Inflated != int64(len(plain)) {
					t.Fatalf("wrote %d bytes (stats %d), want the %d inflated", out.Len(), stats.Inflated, len(plain))
				}
			case tooBig, tooMany:
				if !errors.As(err, &lim) || lim.Inflated != (c.want == tooBig) {
					t.Fatalf("err = %v, want a LimitError (inflated: %v)", err, c.want == tooBig)
				}
				if max := c.limits.WithDefaults().MaxInflated; int64(out.Len()) > max {
					t.Fatalf("wrote %d bytes past the cap %d", out.Len(), max)
				}
			case badFormat:
				if !errors.As(err, &ferr) {
					t.Fatalf("err = %v, want a FormatError", err)
				}
			}
			if c.says != "" && (err == nil || !strings.Contains(err.Error(), c.says)) {
				t.Fatalf("err = %v, want it to say %q", err, c.says)
			}
			if c.name == "a file declared over the cap" && out.Len() > 4<<10 {
				t.Fatalf("wrote %d bytes (of %d read) before refusing the header", out.Len(), src.n)
			}
		})
	}
}

// Long names after a symlink cost the upload's check linear time: each
// entry's parents were looked up one path.Dir at a time, so one 320 KB name
// took the server 54 s (a tar's name may be 1 MiB).
func TestInflateLongNamesAfterASymlink(t *testing.T) {
	deep := strings.Repeat("a/", 250_000) // 500 KB, 250,000 parents
	body := gz(t, tarOf(t, entry{name: "s", typ: tar.TypeSymlink, link: "/etc"},
		entry{name: deep + "f", typ: tar.TypeReg, body: "x"}, entry{name: deep + "g", typ: tar.TypeReg, body: "x"},
		entry{name: "s/" + deep + "f", typ: tar.TypeReg, body: "x"}))
	start := time.Now()
	_, err := upload.Inflate(io.Discard, bytes.NewReader(body), upload.Limits{})
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("checking took %s", took)
	}
	if err == nil || !strings.Contains(err.Error(), `lies under "s"`) {
		t.Errorf("err = %.200v, want the entry under s refused", err)
	}
}

// TestInflateUnsafeIsExtractsRule: an entry Extract refuses is refused as
// blobstore.ErrUnsafePath, the same rule.
func TestInflateUnsafeIsExtractsRule(t *testing.T) {
	body := gz(t, tarOf(t, entry{name: "../x", typ: tar.TypeReg, body: "x"}))
	_, err := upload.Inflate(io.Discard, bytes.NewReader(body), upload.Limits{})
	if !errors.Is(err, blobstore.ErrUnsafePath) {
		t.Fatalf("err = %v, want ErrUnsafePath", err)
	}
}

// TestInflateFlyFormat checks what fly really sends on Linux: it pipes
// `tar -czf - --numeric-owner --null -T -` (GNU tar: GNU headers, long
// names, records padded to 10 KiB) of the files git lists.
func TestInflateFlyFormat(t *testing.T) {
	tarBin, err := exec.LookPath("tar")
	if err != nil {
		t.Skip("no tar here")
	}
	dir := t.TempDir()
	long := strings.Repeat("long-directory-name/", 8) + "file"
	files := map[string]string{"README": "hi\n", "src/a.go": "package a\n", long: "deep\n"}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("README", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for _, list := range []string{"README\x00src/a.go\x00link\x00" + long, "."} {
		cmd := exec.Command(tarBin, "-czf", "-", "--numeric-owner", "--null", "-T", "-")
		cmd.Dir, cmd.Stdin = dir, strings.NewReader(list)
		body, err := cmd.Output()
		if err != nil {
			t.Fatalf("tar: %v", err)
		}
		stats, err := upload.Inflate(io.Discard, bytes.NewReader(body), upload.Limits{})
		if err != nil {
			t.Fatalf("fly's archive of %q refused: %v", list, err)
		}
		if stats.Inflated%10240 != 0 || stats.Entries < 4 {
			t.Fatalf("stats %+v: want whole 10 KiB records and every entry", stats)
		}
	}
}

// TestInflateBodyAndWriterErrors: a failing body or writer is reported as
// such, not as the uploader's fault.
func TestInflateBodyAndWriterErrors(t *testing.T) {
	body := gz(t, tarOf(t, tree...))
	gone := errors.New("client went away")
	_, err := upload.Inflate(io.Discard, io.MultiReader(bytes.NewReader(body[:100]), errReader{gone}), upload.Limits{})
	var ferr *upload.FormatError
	if !errors.Is(err, gone) || errors.As(err, &ferr) {
		t.Fatalf("body error: err = %v, want %v and no FormatError", err, gone)
	}
	full := errors.New("store failed")
	_, err = upload.Inflate(failWriter{full}, bytes.NewReader(body), upload.Limits{})
	if !errors.Is(err, full) || errors.As(err, &ferr) {
		t.Fatalf("writer error: err = %v, want %v and no FormatError", err, full)
	}
}

// TestStoreNothingOnFailure: the store's Put never sees a clean end of a
// body that fails a check (an atomic Put then stores nothing), and gets the
// whole artifact when it passes.
func TestStoreNothingOnFailure(t *testing.T) {
	ctx := context.Background()
	for name, c := range map[string]struct {
		body   []byte
		limits upload.Limits
		ok     bool
	}{
		"valid":   {body: gz(t, tarOf(t, tree...)), ok: true},
		"bomb":    {body: bomb(t, 8<<20), limits: upload.Limits{MaxInflated: 4 << 20}},
		"garbage": {body: []byte("garbage")},
		"unsafe":  {body: gz(t, tarOf(t, entry{name: "/abs", typ: tar.TypeReg}))},
		"late":    {body: gz(t, append(tarOf(t, tree...), "junk after the end"...))},
	} {
		t.Run(name, func(t *testing.T) {
			st := &atomicStore{}
			a, err := upload.Store(ctx, st, "artifacts/x.tar.zst", bytes.NewReader(c.body), c.limits)
			if c.ok != (err == nil) {
				t.Fatalf("err = %v, want ok: %v", err, c.ok)
			}
			if !c.ok {
				var lim *upload.LimitError
				var ferr *upload.FormatError
				if !errors.As(err, &lim) && !errors.As(err, &ferr) {
					t.Fatalf("err = %v, want a LimitError or FormatError", err)
				}
				if st.stored != nil {
					t.Fatalf("stored %d bytes of a refused upload", len(st.stored))
				}
				return
			}
			if a.Size != int64(len(st.stored)) {
				t.Fatalf("artifact size %d, stored %d", a.Size, len(st.stored))
			}
			// What was stored is the tar, through zstd: Extract takes it.
			if err := blobstore.Extract(ctx, must(zstdReader(st.stored)), t.TempDir()); err != nil {
				t.Fatalf("extract the stored artifact: %v", err)
			}
		})
	}
}

// atomicStore keeps a Put's body only if it ends cleanly, like the real
// stores (whose atomicity the blobstore conformance suite checks).
type atomicStore struct {
	blobstore.Store
	stored []byte
}

func (s *atomicStore) Put(_ context.Context, key string, body io.Reader, _ int64, _ blobstore.PutOptions) (blobstore.ObjectInfo, error) {
	data, err := io.ReadAll(body)
	if err != nil {
		return blobstore.ObjectInfo{}, err
	}
	s.stored = data
	return blobstore.ObjectInfo{Key: key, Size: int64(len(data))}, nil
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

// sparseTar crafts a PAX (GNU 1.0) sparse file claiming realSize bytes:
// archive/tar's writer refuses sparse records, so the PAX header is written
// as a regular entry whose type byte and checksum are then patched.
func sparseTar(t testing.TB, name string, realSize int64) []byte {
	record := func(k, v string) string {
		for n := len(k) + len(v) + 3; ; {
			r := fmt.Sprintf("%d %s=%s\n", n, k, v)
			if len(r) == n {
				return r
			}
			n = len(r)
		}
	}
	pax := record("GNU.sparse.major", "1") + record("GNU.sparse.minor", "0") +
		record("GNU.sparse.name", name) + record("GNU.sparse.realsize", fmt.Sprint(realSize))
	block := make([]byte, 512)
	copy(block, fmt.Sprintf("1\n%d\n1\n", realSize-1)) // one 1-byte fragment at the end
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range []struct {
		name string
		data []byte
	}{{"PaxHeaders/" + name, []byte(pax)}, {"GNUSparseFile.0/" + name, append(block, 'x')}} {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: tar.TypeReg, Size: int64(len(e.data)), Mode: 0o644, Format: tar.FormatUSTAR}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	b[156] = tar.TypeXHeader
	copy(b[148:156], "        ")
	sum := 0
	for _, c := range b[:512] {
		sum += int(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// corrupt flips bytes in the middle of the deflate data.
func corrupt(b []byte) []byte {
	b = bytes.Clone(b)
	for i := 20; i < len(b)-8 && i < 60; i++ {
		b[i] ^= 0xff
	}
	return b
}

func zstdReader(b []byte) (io.Reader, error) { return zstd.NewReader(bytes.NewReader(b)) }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
