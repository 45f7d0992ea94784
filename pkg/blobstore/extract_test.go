package blobstore_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/pkg/blobstore"
)

var _ = Describe("WriteTar and Extract", func() {
	var tmp string
	BeforeEach(func() { tmp = GinkgoT().TempDir() })

	It("round-trips a rich tree exactly", func(ctx SpecContext) {
		src := filepath.Join(tmp, "src")
		buildRichTree(src, 200, 3<<20)
		want, err := snapshot(src)
		Expect(err).NotTo(HaveOccurred())
		var buf bytes.Buffer
		Expect(blobstore.WriteTar(ctx, &buf, src)).To(Succeed())
		dst := filepath.Join(tmp, "dst")
		Expect(os.Mkdir(dst, 0o755)).To(Succeed())
		Expect(blobstore.Extract(ctx, &buf, dst)).To(Succeed())
		Expect(snapshot(dst)).To(Equal(want))
		fi, err := os.Stat(filepath.Join(dst, "readonly"))
		Expect(err).NotTo(HaveOccurred())
		Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o555)), "the read-only dir got its contents first, its mode last")
	})

	It("writes the same bytes for the same tree (content addressing)", func(ctx SpecContext) {
		src := filepath.Join(tmp, "src")
		buildRichTree(src, 100, 1<<20)
		var a, b bytes.Buffer
		Expect(blobstore.WriteTar(ctx, &a, src)).To(Succeed())
		Expect(blobstore.WriteTar(ctx, &b, src)).To(Succeed())
		Expect(a.Len()).To(BeNumerically(">", 1<<20))
		Expect(bytes.Equal(a.Bytes(), b.Bytes())).To(BeTrue())
	})

	It("keeps numeric ownership when running as root", func(ctx SpecContext) {
		if os.Geteuid() != 0 {
			Skip("ownership is only restored as root")
		}
		data := makeTarWith(func(tw *tar.Writer) {
			Expect(tw.WriteHeader(&tar.Header{Name: "owned", Typeflag: tar.TypeReg, Mode: 0o640, Uid: 1234, Gid: 5678, Size: 1})).To(Succeed())
			_, err := tw.Write([]byte("x"))
			Expect(err).NotTo(HaveOccurred())
			Expect(tw.WriteHeader(&tar.Header{Name: "owned-link", Typeflag: tar.TypeSymlink, Linkname: "owned", Uid: 4321, Gid: 8765})).To(Succeed())
		})
		Expect(blobstore.Extract(ctx, bytes.NewReader(data), tmp)).To(Succeed())
		fi, err := os.Lstat(filepath.Join(tmp, "owned"))
		Expect(err).NotTo(HaveOccurred())
		st := fi.Sys().(*syscall.Stat_t)
		Expect([]uint32{st.Uid, st.Gid}).To(Equal([]uint32{1234, 5678}))
		Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o640)))
		fi, err = os.Lstat(filepath.Join(tmp, "owned-link"))
		Expect(err).NotTo(HaveOccurred())
		st = fi.Sys().(*syscall.Stat_t)
		Expect([]uint32{st.Uid, st.Gid}).To(Equal([]uint32{4321, 8765}))
	})

	It("sets directory mtimes after writing their contents", func(ctx SpecContext) {
		dirTime := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
		data := makeTarWith(func(tw *tar.Writer) {
			Expect(tw.WriteHeader(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: dirTime})).To(Succeed())
			Expect(tw.WriteHeader(&tar.Header{Name: "d/sub/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: dirTime.Add(time.Hour)})).To(Succeed())
			Expect(tw.WriteHeader(&tar.Header{Name: "d/sub/f", Typeflag: tar.TypeReg, Mode: 0o644, Size: 0, ModTime: dirTime.Add(2 * time.Hour)})).To(Succeed())
		})
		Expect(blobstore.Extract(ctx, bytes.NewReader(data), tmp)).To(Succeed())
		for p, want := range map[string]time.Time{"d": dirTime, "d/sub": dirTime.Add(time.Hour), "d/sub/f": dirTime.Add(2 * time.Hour)} {
			fi, err := os.Stat(filepath.Join(tmp, p))
			Expect(err).NotTo(HaveOccurred())
			Expect(fi.ModTime().UTC()).To(Equal(want), p)
		}
	})

	It("creates missing parents and replaces an earlier symlink instead of writing through it", func(ctx SpecContext) {
		sb, err := newSandbox(tmp)
		Expect(err).NotTo(HaveOccurred())
		data := makeTar(
			tarEntry{Name: "deep/er/file", Type: tar.TypeReg, Body: "deep"},
			tarEntry{Name: "f", Type: tar.TypeSymlink, Linkname: filepath.Join(sb.Outside, "victim")},
			tarEntry{Name: "f", Type: tar.TypeReg, Body: "replaced"},
		)
		Expect(blobstore.Extract(ctx, bytes.NewReader(data), sb.Target)).To(Succeed())
		Expect(os.ReadFile(filepath.Join(sb.Target, "deep/er/file"))).To(Equal([]byte("deep")))
		fi, err := os.Lstat(filepath.Join(sb.Target, "f"))
		Expect(err).NotTo(HaveOccurred())
		Expect(fi.Mode().IsRegular()).To(BeTrue())
		Expect(os.ReadFile(filepath.Join(sb.Target, "f"))).To(Equal([]byte("replaced")))
		Expect(sb.escapes()).To(BeEmpty())
	})

	It("keeps symlinks pointing outside as symlinks (they are not followed)", func(ctx SpecContext) {
		sb, err := newSandbox(tmp)
		Expect(err).NotTo(HaveOccurred())
		data := makeTar(tarEntry{Name: "out", Type: tar.TypeSymlink, Linkname: "../outside/victim"})
		Expect(blobstore.Extract(ctx, bytes.NewReader(data), sb.Target)).To(Succeed())
		Expect(os.Readlink(filepath.Join(sb.Target, "out"))).To(Equal("../outside/victim"))
		Expect(sb.escapes()).To(BeEmpty())
	})

	It("refuses a hard link onto itself only as a no-op, and links within the target", func(ctx SpecContext) {
		data := makeTar(
			tarEntry{Name: "a", Type: tar.TypeReg, Body: "shared"},
			tarEntry{Name: "sub/b", Type: tar.TypeLink, Linkname: "a"},
			tarEntry{Name: "a", Type: tar.TypeLink, Linkname: "a"},
		)
		Expect(blobstore.Extract(ctx, bytes.NewReader(data), tmp)).To(Succeed())
		Expect(inode(filepath.Join(tmp, "a"))).To(Equal(inode(filepath.Join(tmp, "sub/b"))))
	})

	It("refuses sparse files, whose holes could claim any size", func(ctx SpecContext) {
		const realSize = 256 << 20
		data := sparseTar("s", realSize)
		// The crafted archive really is sparse for archive/tar.
		tr := tar.NewReader(bytes.NewReader(data))
		hdr, err := tr.Next()
		Expect(err).NotTo(HaveOccurred())
		Expect(hdr.Size).To(Equal(int64(realSize)))
		Expect(hdr.PAXRecords).To(HaveKey("GNU.sparse.realsize"))

		err = blobstore.Extract(ctx, bytes.NewReader(data), tmp)
		Expect(err).To(MatchError(blobstore.ErrUnsafePath))
		Expect(err.Error()).To(ContainSubstring("sparse"))
		Expect(dirEntries(tmp)).To(BeEmpty())
	})

	It("fails on a truncated stream", func(ctx SpecContext) {
		data := makeTar(tarEntry{Name: "f", Type: tar.TypeReg, Body: string(randomBytes(1, 10000))})
		err := blobstore.Extract(ctx, bytes.NewReader(data[:5000]), tmp)
		Expect(err).To(MatchError(ContainSubstring("unexpected EOF")))
	})

	It("stops when the context is canceled", func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		data := makeTar(tarEntry{Name: "f", Type: tar.TypeReg, Body: "x"})
		Expect(blobstore.Extract(ctx, bytes.NewReader(data), tmp)).To(MatchError(context.Canceled))
		Expect(dirEntries(tmp)).To(BeEmpty())
	})

	for _, h := range hostileCases() {
		It("refuses "+h.Name, func(ctx SpecContext) {
			sb, err := newSandbox(tmp)
			Expect(err).NotTo(HaveOccurred())
			err = blobstore.Extract(ctx, bytes.NewReader(makeTar(h.resolve(sb)...)), sb.Target)
			Expect(err).To(MatchError(ContainSubstring(h.WantErr)))
			Expect(sb.escapes()).To(BeEmpty())
		})
	}
})

func makeTarWith(write func(tw *tar.Writer), patch ...func([]byte)) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	write(tw)
	Expect(tw.Close()).To(Succeed())
	b := buf.Bytes()
	for _, p := range patch {
		p(b)
	}
	return b
}

// sparseTar crafts a PAX (GNU 1.0) sparse file of realSize bytes holding one
// byte of data: archive/tar's writer refuses to write sparse records, so the
// PAX header is a regular entry with its type byte and checksum patched.
func sparseTar(name string, realSize int64) []byte {
	record := func(k, v string) string {
		n := len(k) + len(v) + 3
		for {
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
	return makeTarWith(func(tw *tar.Writer) {
		Expect(tw.WriteHeader(&tar.Header{Name: "PaxHeaders/" + name, Typeflag: tar.TypeReg, Size: int64(len(pax)), Mode: 0o644, Format: tar.FormatUSTAR})).To(Succeed())
		_, err := tw.Write([]byte(pax))
		Expect(err).NotTo(HaveOccurred())
		Expect(tw.WriteHeader(&tar.Header{Name: "GNUSparseFile.0/" + name, Typeflag: tar.TypeReg, Size: 513, Mode: 0o644, Format: tar.FormatUSTAR})).To(Succeed())
		_, err = tw.Write(append(block, 'x'))
		Expect(err).NotTo(HaveOccurred())
	}, func(b []byte) {
		// First header: make it a PAX extended header.
		b[156] = tar.TypeXHeader
		copy(b[148:156], "        ")
		sum := 0
		for _, c := range b[:512] {
			sum += int(c)
		}
		copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	})
}
