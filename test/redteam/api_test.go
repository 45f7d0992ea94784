package redteam_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// send is call with a body of unknown length (sent chunked) when chunked.
func send(ctx context.Context, method, path, token, contentType string, body io.Reader, chunked bool, host string) (int, string) {
	GinkgoHelper()
	if chunked {
		body = io.MultiReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, server.URL()+path, body)
	Expect(err).NotTo(HaveOccurred())
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// The smaller holes of issue 28 (5), each against the real server.
var _ = Describe("the API's edges", func() {
	It("pages builds to the largest id instead of overflowing (it answered 500)", func(ctx SpecContext) {
		for _, path := range []string{"/api/v1/builds?to=9223372036854775807", "/api/v1/teams/main/builds?to=9223372036854775807&limit=5",
			"/api/v1/builds?from=9223372036854775807", "/api/v1/builds?since=9223372036854775807"} {
			code, body := call(ctx, "GET", path, token(ctx, member), "")
			Expect(code).To(Equal(http.StatusOK), "%s: %s", path, body)
		}
		// And a resource's versions, the other id-paged list.
		paged := "paged-" + strings.ToLower(rand8())
		shellyPipeline(ctx, paged, "x")
		for _, q := range []string{"to", "from"} {
			code, body := call(ctx, "GET", "/api/v1/teams/main/pipelines/"+paged+"/resources/r/versions?"+q+"=9223372036854775807", token(ctx, member), "")
			Expect(code).To(Equal(http.StatusOK), "versions %s=max: %s", q, body)
		}
		code, body := call(ctx, "GET", "/api/v1/builds?to=99999999999999999999", token(ctx, member), "")
		Expect(code).To(Equal(http.StatusBadRequest), body)
		Expect(body).To(ContainSubstring("to="))
	})

	It("answers a worker name nobody has and another team's worker alike, and a shared one's change with 403", func(ctx SpecContext) {
		tok := token(ctx, outsider)
		code, body := call(ctx, "PUT", "/api/v1/workers/no-such-worker/land", tok, "")
		Expect(code).To(Equal(http.StatusNotFound), body)
		// The shared worker is listed to everyone: its existence is no secret.
		code, body = call(ctx, "PUT", "/api/v1/workers/"+workerName+"/land", tok, "")
		Expect(code).To(Equal(http.StatusForbidden), body)
	})

	It("answers 413, not 400, to a pipeline config over the limit sent chunked", func(ctx SpecContext) {
		big := strings.Repeat("#", 5<<20)
		for _, chunked := range []bool{false, true} {
			code, body := send(ctx, "PUT", "/api/v1/teams/main/pipelines/too-big/config", token(ctx, member), "application/x-yaml", strings.NewReader(big), chunked, "")
			Expect(code).To(Equal(http.StatusRequestEntityTooLarge), "chunked=%v: %s", chunked, body)
		}
		res, err := flyAs[member].Run(ctx, "pipelines")
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Stdout).NotTo(ContainSubstring("too-big"))
	})

	It("refuses at upload an artifact with an entry under its own symlink pointing out, naming both", func(ctx SpecContext) {
		var tarball bytes.Buffer
		gz := gzip.NewWriter(&tarball)
		tw := tar.NewWriter(gz)
		Expect(tw.WriteHeader(&tar.Header{Name: "etc", Typeflag: tar.TypeSymlink, Linkname: "/etc", Mode: 0o777})).To(Succeed())
		Expect(tw.WriteHeader(&tar.Header{Name: "etc/cron.d/x", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})).To(Succeed())
		_, err := tw.Write([]byte("x"))
		Expect(err).NotTo(HaveOccurred())
		Expect(tw.Close()).To(Succeed())
		Expect(gz.Close()).To(Succeed())
		code, body := send(ctx, "POST", "/api/v1/teams/main/artifacts", token(ctx, member), "application/octet-stream", &tarball, false, "")
		Expect(code).To(Equal(http.StatusBadRequest), body)
		Expect(body).To(And(ContainSubstring(`etc/cron.d/x`), ContainSubstring(`lies under`), ContainSubstring(`a symlink of the archive`)))
	})

	It("serves the web UI only under the server's own names (DNS rebinding)", func(ctx SpecContext) {
		for _, path := range []string{"/", "/teams/main/pipelines/p", "/builds/1"} {
			code, body := send(ctx, "GET", path, "", "", nil, false, "rebind.attacker.example")
			Expect(code).To(Equal(http.StatusBadRequest), "%s: %s", path, body)
			Expect(body).To(ContainSubstring("is not this server"))
			code, body = send(ctx, "GET", path, "", "", nil, false, "")
			Expect(code).To(Equal(http.StatusOK), "%s with the server's own address: %s", path, body)
		}
	})
})
