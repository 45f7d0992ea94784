package fly_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/test/testenv"
)

var _ = Describe("a build's log cap", func() {
	It("keeps a build's output up to --max-build-log-bytes, says so, drops the rest and lets the step finish", func(ctx context.Context) {
		srv := newServer(ctx, testenv.ATCConfig{Args: []string{"--max-build-log-bytes", "2000"}})
		f := newFly("logcap")
		login(ctx, f, srv, adminUser, s.adminPassword)
		// One stream (stdout): its order is the process's order.
		res := succeed(ctx, f, "execute", "-c",
			shTask(`i=0; while [ $i -lt 500 ]; do echo line-$i; i=$((i+1)); done; echo finished-$i`))
		out := plain(res.Stdout)
		Expect(out).To(ContainSubstring("line-0\n"))
		Expect(out).To(ContainSubstring("[porter] this build's log reached its cap of 2000 bytes (--max-build-log-bytes): further output is not kept; the steps go on\n"))
		Expect(out).NotTo(ContainSubstring("line-499"))
		Expect(out).NotTo(ContainSubstring("finished-500"))
		Expect(out).To(HaveSuffix("succeeded\n"))
	})
})
