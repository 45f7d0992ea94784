package runtime_test

import (
	"context"
	"crypto/rand"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/test/testenv"
)

// The server's lifecycle: how it stops, how it fails, what it refuses. Each
// spec here runs its own server (and this tree's sidecar, which must reach
// it over TLS), driven by the real fly.
var _ = Describe("Server lifecycle", Ordered, func() {
	const uploadLimit = "64Ki"
	var (
		env *testenv.ATCEnv
		srv *testenv.ATC
		fly *testenv.Fly
		cfg testenv.ATCConfig
	)

	BeforeAll(func(ctx SpecContext) {
		var err error
		env, err = testenv.NewATCEnv(ctx, GinkgoT().TempDir())
		if testenv.Unavailable(err) && os.Getenv("CI") == "" {
			Skip(err.Error())
		}
		Expect(err).NotTo(HaveOccurred())
		flyBin, err := testenv.FindFly()
		Expect(err).NotTo(HaveOccurred())
		// This tree's sidecar: it refuses to dial without a CA, so every
		// build here also proves the TLS link works.
		image, removeImage, err := testenv.BuildPorterImage(ctx, GinkgoT().TempDir(), "lifecycle")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(removeImage)
		ns, removeNS, err := env.NewWorkerNamespace(ctx, "porter-lifecycle-")
		DeferCleanup(removeNS)
		Expect(err).NotTo(HaveOccurred())
		dsn, dropDB, err := env.NewDatabase(ctx)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(dropDB)

		pw := rand.Text()
		cfg = testenv.ATCConfig{
			Worker: ns, Database: dsn,
			LocalUsers: []string{"admin:" + pw}, MainTeamUsers: []string{"admin"},
			Args: []string{"--porter-image", image, "--max-artifact-upload", uploadLimit},
		}
		srv, err = env.NewATC(cfg)
		Expect(err).NotTo(HaveOccurred())
		Expect(srv.Start(ctx)).To(Succeed())
		DeferCleanup(func() {
			Expect(srv.Stop()).To(Succeed())
			GinkgoWriter.Printf("server log:\n%s\n", srv.Log())
		})
		fly = testenv.NewFly(flyBin, GinkgoT().TempDir(), "lifecycle")
		fly.Log = GinkgoWriter
		res, err := fly.Login(ctx, srv.URL(), "admin", pw)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), res.String())
	})

	taskFile := func(script string) string {
		path := filepath.Join(GinkgoT().TempDir(), "task.yml")
		Expect(os.WriteFile(path, []byte(`platform: linux
image_resource:
  type: registry-image
  source: {repository: busybox}
inputs: [{name: in, optional: true}]
run:
  path: sh
  args: [-c, '`+script+`']
`), 0o644)).To(Succeed())
		return path
	}

	It("exits within seconds of SIGTERM with a build running, and the next server resumes the build to success", func(ctx SpecContext) {
		task := taskFile(`echo step-started; sleep 15; echo step-finished`)
		p, err := fly.Start(testenv.FlyCmd{Args: []string{"execute", "-c", task}})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(p.Kill)
		Eventually(p.Stdout.String).WithTimeout(2*time.Minute).WithPolling(200*time.Millisecond).
			Should(ContainSubstring("step-started"), "the step never started")
		m := regexp.MustCompile(`executing build (\d+)`).FindStringSubmatch(p.Stdout.String())
		Expect(m).NotTo(BeNil(), p.Stdout.String())
		build := m[1]

		start := time.Now()
		Expect(syscall.Kill(srv.Pid(), syscall.SIGTERM)).To(Succeed())
		waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		code, err := srv.Wait(waitCtx)
		Expect(err).NotTo(HaveOccurred(), "serve still running 5 s after SIGTERM:\n%s", srv.Log())
		GinkgoWriter.Printf("serve exited %s after SIGTERM\n", time.Since(start))
		Expect(code).To(Equal(0), srv.Log())
		Expect(srv.Log()).To(ContainSubstring("build left to resume"))

		Expect(srv.Start(ctx)).To(Succeed())
		res, err := fly.Run(ctx, "watch", "-b", build)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), res.String())
		Expect(res.Stdout).To(ContainSubstring("step-finished"))
		Expect(res.Stdout).To(HaveSuffix("succeeded\n"))
	})

	It("refuses an upload over --max-artifact-upload with 413, naming the limit", func(ctx SpecContext) {
		dir := GinkgoT().TempDir()
		noise := make([]byte, 1<<20) // incompressible: well over 64Ki as sent
		_, _ = rand.Read(noise)
		Expect(os.WriteFile(filepath.Join(dir, "noise"), noise, 0o644)).To(Succeed())
		res, err := fly.Run(ctx, "execute", "-c", taskFile(`ls in`), "-i", "in="+dir)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		Expect(res.Output()).To(ContainSubstring("413"), res.String())
		Expect(res.Output()).To(ContainSubstring("at most "+uploadLimit), res.String())
		Expect(res.Output()).To(ContainSubstring("--max-artifact-upload"), res.String())

		By("an upload under the limit goes through")
		small := GinkgoT().TempDir()
		Expect(os.WriteFile(filepath.Join(small, "hello"), []byte("hi"), 0o644)).To(Succeed())
		res, err = fly.Run(ctx, "execute", "-c", taskFile(`cat in/hello`), "-i", "in="+small)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), res.String())
	})

	It("exits non-zero, naming the address, when its API listener cannot listen", func(ctx SpecContext) {
		other, err := env.NewATC(cfg)
		Expect(err).NotTo(HaveOccurred())
		u, err := url.Parse(other.URL())
		Expect(err).NotTo(HaveOccurred())
		taken, err := net.Listen("tcp", u.Host)
		Expect(err).NotTo(HaveOccurred())
		defer taken.Close()

		Expect(other.Launch()).To(Succeed())
		DeferCleanup(func() { _ = other.Kill() })
		waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		code, err := other.Wait(waitCtx)
		Expect(err).NotTo(HaveOccurred(), other.Log())
		Expect(code).NotTo(Equal(0), other.Log())
		Expect(other.Log()).To(ContainSubstring("listen for the API on " + u.Host))
	})
})
