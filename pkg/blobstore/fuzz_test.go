package blobstore_test

import (
	"archive/tar"
	"bytes"
	"context"
	"testing"

	"github.com/porter-ci/porter/pkg/blobstore"
)

// FuzzExtract: whatever the input, Extract never panics and never creates or
// changes anything outside its target (checked on a sibling directory with a
// victim file, and on the parent directory).
//
//	go test ./pkg/blobstore -run '^$' -fuzz FuzzExtract -fuzztime 1m -fuzzminimizetime 2s
//
// (the default minimization budget, 60s per new input, stalls the run:
// every execution touches the file system)
func FuzzExtract(f *testing.F) {
	// Seeds: every hostile case (with a relative stand-in for the absolute
	// paths, which differ per run), plus benign archives to mutate from.
	stand := sandbox{Outside: "/tmp/porter-fuzz-outside"}
	for _, h := range hostileCases() {
		f.Add(makeTar(h.resolve(stand)...))
	}
	f.Add(makeTar(
		tarEntry{Name: "dir/", Type: tar.TypeDir, Mode: 0o755},
		tarEntry{Name: "dir/file", Type: tar.TypeReg, Body: "hello"},
		tarEntry{Name: "dir/link", Type: tar.TypeSymlink, Linkname: "file"},
		tarEntry{Name: "hard", Type: tar.TypeLink, Linkname: "dir/file"},
	))
	f.Add(makeTar(
		tarEntry{Name: "l", Type: tar.TypeSymlink, Linkname: ".."},
		tarEntry{Name: "l/outside/victim", Type: tar.TypeReg, Body: "pwned"},
	))
	f.Add(makeTar(
		tarEntry{Name: "./a/./b/../c", Type: tar.TypeReg, Body: "x"},
		tarEntry{Name: "x", Type: tar.TypeSymlink, Linkname: "../outside/victim"},
		tarEntry{Name: "y", Type: tar.TypeLink, Linkname: "x"},
		tarEntry{Name: "x", Type: tar.TypeReg, Body: "replace"},
	))
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		sb, err := newSandbox(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		// The error is irrelevant; only what happened on disk is.
		_ = blobstore.Extract(context.Background(), bytes.NewReader(data), sb.Target)
		if bad := sb.escapes(); len(bad) > 0 {
			t.Fatalf("extraction escaped its target: %v", bad)
		}
	})
}
