package upload_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/upload"
)

// FuzzInflate: whatever the body, Inflate does not panic, writes no more
// than the cap, and passes only a gzip'd tar whose every entry Extract's
// rules allow, writing exactly its inflated bytes.
//
//	go test ./pkg/upload -run '^$' -fuzz FuzzInflate -fuzztime 1m
func FuzzInflate(f *testing.F) {
	f.Add(gz(f, tarOf(f, tree...)))
	f.Add(gz(f, tarOf(f, entry{name: "../x", typ: tar.TypeReg, body: "x"})))
	f.Add(gz(f, sparseTar(f, "s", 1<<40)))
	f.Add(gz(f, tarOf(f, entry{name: "etc", typ: tar.TypeSymlink, link: "/etc"}, entry{name: "etc/cron.d/x", typ: tar.TypeReg, body: "x"})))
	f.Add(bomb(f, 1<<20))
	f.Add(gz(f, []byte("hello")))
	f.Add([]byte("garbage"))
	f.Add([]byte{})
	limits := upload.Limits{MaxInflated: 256 << 10, MaxEntries: 50}

	f.Fuzz(func(t *testing.T, body []byte) {
		var out bytes.Buffer
		stats, err := upload.Inflate(&out, bytes.NewReader(body), limits)
		if int64(out.Len()) > limits.MaxInflated {
			t.Fatalf("wrote %d bytes, cap %d", out.Len(), limits.MaxInflated)
		}
		var lim *upload.LimitError
		var ferr *upload.FormatError
		if err != nil {
			if !errors.As(err, &lim) && !errors.As(err, &ferr) {
				t.Fatalf("a body's fault reported as neither a LimitError nor a FormatError: %v", err)
			}
			return
		}
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("passed a body gzip refuses: %v", err)
		}
		plain, err := io.ReadAll(zr)
		if err != nil || !bytes.Equal(plain, out.Bytes()) || stats.Inflated != int64(len(plain)) {
			t.Fatalf("passed, but wrote %d bytes (stats %d) for %d inflated (gzip: %v)", out.Len(), stats.Inflated, len(plain), err)
		}
		tr := tar.NewReader(bytes.NewReader(plain))
		var n int64
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("passed a body the tar reader refuses: %v", err)
			}
			if err := blobstore.CheckEntry(hdr); err != nil {
				t.Fatalf("passed an entry Extract refuses: %v", err)
			}
			n++
		}
		if n != stats.Entries || n > limits.MaxEntries {
			t.Fatalf("%d entries, stats %d, cap %d", n, stats.Entries, limits.MaxEntries)
		}
		// What passed is what the sidecar extracts: it may still fail there
		// (a hard link to a file it lacks), but never as unsafe, which the
		// upload would have refused.
		err = blobstore.Extract(context.Background(), bytes.NewReader(plain), t.TempDir())
		if errors.Is(err, blobstore.ErrUnsafePath) || (err != nil && strings.Contains(err.Error(), "escapes from parent")) {
			t.Fatalf("passed a tar the extraction refuses as unsafe: %v", err)
		}
	})
}
