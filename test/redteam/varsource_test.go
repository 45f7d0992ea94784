package redteam_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("var_sources", func() {
	// The attack (issue 28, 5): a pipeline's var_source of type vault made
	// the server send GETs with a token to any URL, loopback included (the
	// server's own ports, a cloud's metadata service). Now such addresses
	// are refused when the connection is made, unless the operator allows
	// their network (--var-source-allowed-networks).
	It("never make the server connect to loopback for a pipeline, by address or by name", func(ctx SpecContext) {
		var got atomic.Int32
		listener := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got.Add(1)
			http.Error(w, "no", http.StatusForbidden)
		}))
		DeferCleanup(listener.Close)
		port := listener.URL[strings.LastIndex(listener.URL, ":")+1:]
		for _, url := range []string{listener.URL, "http://localhost:" + port} {
			name := "varsource-" + strings.ToLower(rand8())
			cfg := writeFile(fmt.Sprintf(`var_sources:
- name: v
  type: vault
  config: {url: %q, client_token: the-token}
jobs:
- name: j
  plan:
  - task: t
    params: {X: ((v:secret))}
    config:
      platform: linux
      image_resource: {type: registry-image, source: {repository: busybox}}
      run: {path: "true"}
`, url))
			run(ctx, member, "set-pipeline", "-n", "-p", name, "-c", cfg)
			run(ctx, member, "unpause-pipeline", "-p", name)
			DeferCleanup(func(ctx SpecContext) { run(ctx, admin, "destroy-pipeline", "-n", "-p", name) })
			res, err := flyAs[member].Run(ctx, "trigger-job", "-w", "-j", name+"/j")
			Expect(err).NotTo(HaveOccurred())
			Expect(res.ExitCode).NotTo(Equal(0), res.String())
			Expect(res.Output()).To(ContainSubstring("refused: it is a loopback address (allow its network with --var-source-allowed-networks)"), url)
		}
		Expect(got.Load()).To(BeZero(), "the server's GETs reached the loopback listener")
	})
})
