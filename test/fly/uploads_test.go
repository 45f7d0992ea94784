package fly_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/pkg/blobstore"
)

// `fly execute -i` bodies are checked to be gzip'd tar as they stream in,
// with caps on what they inflate to (--max-artifact-upload-inflated,
// default 1 GiB) and on their entries: a refused body stores no object and
// no artifact row. (fly execute -i of a normal directory: execute_test.go.)
var _ = Describe("fly execute -i uploads", func() {
	It("refuses a gzip bomb with 413 naming the cap, garbage and unsafe entries with 400, and stores nothing", func(ctx SpecContext) {
		url := s.server.URL() + "/api/v1/teams/main/artifacts"
		store := sharedBucket(ctx)
		conn, err := pgx.Connect(ctx, s.server.Config.Database)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = conn.Close(context.WithoutCancel(ctx)) })
		// stored counts what uploads left: blobs of team main's uploads
		// and artifact rows.
		stored := func() [2]int {
			GinkgoHelper()
			objs, err := store.List(ctx, blobstore.BlobPrefix("main", blobstore.ATCBlobOwner))
			Expect(err).NotTo(HaveOccurred())
			var rows int
			Expect(conn.QueryRow(ctx, `SELECT count(*) FROM artifacts`).Scan(&rows)).To(Succeed())
			return [2]int{len(objs), rows}
		}
		post := func(body io.Reader) (int, string) {
			GinkgoHelper()
			return call(ctx, http.MethodPost, url, s.adminToken, body, http.Header{"Content-Type": {"application/octet-stream"}})
		}

		By("a valid upload is stored: one blob, one row (the counting works)")
		before := stored()
		code, body := post(bytes.NewReader(tgz(tarEntry{name: "hello", body: rand.Text()})))
		Expect(code).To(Equal(http.StatusCreated), body)
		after := stored()
		Expect(after).To(Equal([2]int{before[0] + 1, before[1] + 1}), "blobs and artifact rows")

		By("a tar of one file of 1 GiB + 1 zeros, a few MB gzip'd, streamed as made")
		sent := &countingReader{r: bombStream(1<<30 + 1)}
		code, body = post(sent)
		Expect(code).To(Equal(http.StatusRequestEntityTooLarge), body)
		Expect(body).To(ContainSubstring("upload inflates to more than 1 GiB (serve --max-artifact-upload-inflated)"))
		// Refused at the file's header, not after inflating it.
		Expect(sent.n).To(BeNumerically("<", 16<<20), "bytes sent before the answer")
		Expect(stored()).To(Equal(after), "the bomb stored no blob and no row")

		By("garbage, a gzip'd non-tar and an entry leaving its directory: 400 naming the problem")
		for _, c := range []struct {
			body []byte
			says string
		}{
			{[]byte("this is not a gzip stream at all"), "not a gzip stream: gzip: invalid header"},
			{gzipOf(bytes.Repeat([]byte("plain text, not a tar\n"), 100)), "not a tar archive"},
			{tgz(tarEntry{name: "ok", body: "x"}, tarEntry{name: "../../escape", body: "x"}), `tar entry refused: unsafe tar entry: \"../../escape\" has a .. component`},
		} {
			code, body := post(bytes.NewReader(c.body))
			Expect(code).To(Equal(http.StatusBadRequest), body)
			Expect(body).To(ContainSubstring(c.says))
		}
		Expect(stored()).To(Equal(after), "refused bodies stored no blob and no row")
	})
})

type tarEntry struct{ name, body string }

// tgz is a gzip'd tar of regular files.
func tgz(entries ...tarEntry) []byte {
	GinkgoHelper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		Expect(tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(e.body))})).To(Succeed())
		_, err := io.WriteString(tw, e.body)
		Expect(err).NotTo(HaveOccurred())
	}
	Expect(tw.Close()).To(Succeed())
	return gzipOf(buf.Bytes())
}

func gzipOf(b []byte) []byte {
	GinkgoHelper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write(b)
	Expect(err).NotTo(HaveOccurred())
	Expect(zw.Close()).To(Succeed())
	return buf.Bytes()
}

// bombStream is a gzip'd tar of one file of size zeros, made as it is read
// (nothing of that size is ever held or written to disk); it stops when
// the reader is closed.
func bombStream(size int64) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		zw := gzip.NewWriter(pw)
		tw := tar.NewWriter(zw)
		err := tw.WriteHeader(&tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Mode: 0o644, Size: size})
		if err == nil {
			_, err = io.CopyN(tw, zeroReader{}, size)
		}
		pw.CloseWithError(errors.Join(err, tw.Close(), zw.Close()))
	}()
	return pr
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

type countingReader struct {
	r io.ReadCloser
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countingReader) Close() error { return c.r.Close() }
