package blobstore

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/iotest"
)

// compressible decides by the content that holds most of the bytes.
func TestCompressibleSamplesTheLargestFiles(t *testing.T) {
	seed := uint64(0)
	noise := func(n int) []byte { // different bytes each time
		seed++
		b := make([]byte, n)
		r := rand.New(rand.NewPCG(seed, 2))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	text := func(n int) []byte { return bytes.Repeat([]byte("compile ok\n"), n/11) }
	for _, tc := range []struct {
		name  string
		files map[string][]byte
		want  bool
	}{
		{"a large archive", map[string][]byte{"app.tar.gz": noise(12 << 20), "README": text(4 << 10)}, false},
		{"large logs", map[string][]byte{"build.log": text(12 << 20), "app.tar.gz": noise(1 << 20)}, true},
		{"small, whatever it holds", map[string][]byte{"app.tar.gz": noise(4 << 20)}, true},
		// The largest files, all archives, hold less than half of the
		// bytes: many smaller text files hold the rest, so the samples
		// are not what the tar mostly is.
		{"many text files around the archives sampled", func() map[string][]byte {
			m := map[string][]byte{}
			for i := range maxSampledFiles {
				m[fmt.Sprintf("dist/%02d.tar.gz", i)] = noise(512 << 10)
			}
			for i := range 1000 {
				m[fmt.Sprintf("src/%03d.go", i)] = text(10 << 10)
			}
			return m
		}(), true},
		// One archive holds most of the bytes, but there are too many
		// files to walk to the end.
		{"an archive among more files than are walked", func() map[string][]byte {
			m := map[string][]byte{"app.tar.gz": noise(12 << 20)}
			for i := range maxWalkedFiles {
				m[fmt.Sprintf("src/%02d/%05d.go", i%100, i)] = nil
			}
			return m
		}(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range tc.files {
				p := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := compressible(t.Context(), dir)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("compressible = %v, want %v", got, tc.want)
			}
		})
	}
}

// A plain tar's reads are filled to fillBytes from a stream that gives a
// byte at a time, and keep io.Reader's contract.
func TestFillReaderFillsEachRead(t *testing.T) {
	content := bytes.Repeat([]byte("0123456789abcdef"), (3*fillBytes+100)/16)
	if err := iotest.TestReader(fillReader{iotest.OneByteReader(bytes.NewReader(content))}, content); err != nil {
		t.Fatal(err)
	}
	r := fillReader{iotest.OneByteReader(bytes.NewReader(content))}
	buf := make([]byte, 1<<20)
	var sizes []int
	for {
		n, err := r.Read(buf)
		if n > 0 {
			sizes = append(sizes, n)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	want := []int{fillBytes, fillBytes, fillBytes, len(content) - 3*fillBytes}
	if !slices.Equal(sizes, want) {
		t.Errorf("read sizes %v, want %v", sizes, want)
	}
}
