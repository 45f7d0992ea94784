package economy_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/test/testenv"
)

var _ = Describe("a worker's share of pods declared ahead", func() {
	It("is never passed, even by builds declaring at the same moment, and every build still succeeds", func(ctx SpecContext) {
		const share = 2
		wns, removeNS, err := env.NewWorkerNamespace(ctx, "porter-aheadshare-")
		DeferCleanup(removeNS)
		Expect(err).NotTo(HaveOccurred())
		dsn, drop, err := env.NewDatabase(ctx)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(drop)
		atc, err := env.NewATC(testenv.ATCConfig{
			Worker: wns, WorkerName: "aheadshare", Database: dsn,
			LocalUsers: []string{"share:share"}, MainTeamUsers: []string{"share"},
			Args: []string{"--lookahead", "4", "--lookahead-per-worker", fmt.Sprint(share)},
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(atc.Start(ctx)).To(Succeed())
		DeferCleanup(func() {
			Expect(atc.Stop()).To(Succeed())
			GinkgoWriter.Printf("server log:\n%s\n", atc.Log())
		})
		f := testenv.NewFly(fly.Bin, GinkgoT().TempDir(), "share")
		f.Log = GinkgoWriter
		res, err := f.Login(ctx, atc.URL(), "share", "share")
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), res.String())

		// Three jobs of a task then five in parallel, triggered together:
		// while the first task runs, each build's window declares the five
		// at once, fifteen in all.
		task := func(indent, name, script string) string {
			return fmt.Sprintf(`%[1]s- task: %[2]s
%[1]s  config:
%[1]s    platform: linux
%[1]s    image_resource: {type: registry-image, source: {repository: busybox}}
%[1]s    run: {path: sh, args: [-c, %[3]q]}
`, indent, name, script)
		}
		var cfg strings.Builder
		cfg.WriteString("jobs:\n")
		for j := range 3 {
			fmt.Fprintf(&cfg, "- name: j%d\n  plan:\n", j)
			cfg.WriteString(task("  ", "first", "sleep 3"))
			cfg.WriteString("  - in_parallel:\n")
			for t := range 5 {
				cfg.WriteString(task("    ", fmt.Sprint("t", t), fmt.Sprintf("echo j%d-t%d-ran", j, t)))
			}
		}
		path := filepath.Join(GinkgoT().TempDir(), "pipeline.yml")
		Expect(os.WriteFile(path, []byte(cfg.String()), 0o644)).To(Succeed())
		for _, args := range [][]string{{"set-pipeline", "-n", "-p", "share", "-c", path}, {"unpause-pipeline", "-p", "share"}} {
			res, err := f.Exec(ctx, testenv.FlyCmd{Args: args})
			Expect(err).NotTo(HaveOccurred())
			Expect(res.ExitCode).To(Equal(0), res.String())
		}

		// The database's own count of the worker's waiting pods, sampled
		// while the builds run.
		conn, err := pgx.Connect(ctx, dsn)
		Expect(err).NotTo(HaveOccurred())
		defer conn.Close(context.WithoutCancel(ctx))
		var peak, samples atomic.Int64
		sampling, stopSampling := context.WithCancel(ctx)
		var sampler sync.WaitGroup
		sampler.Go(func() {
			for sampling.Err() == nil {
				var n int64
				if conn.QueryRow(sampling, "SELECT count(*) FROM containers WHERE worker_name = 'aheadshare' AND state = 'waiting'").Scan(&n) == nil {
					samples.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
		var builds sync.WaitGroup
		outs := make([]testenv.FlyResult, 3)
		errs := make([]error, 3)
		for j := range 3 {
			builds.Go(func() {
				outs[j], errs[j] = f.Exec(ctx, testenv.FlyCmd{Args: []string{"trigger-job", "-j", fmt.Sprintf("share/j%d", j), "-w"}})
			})
		}
		builds.Wait()
		stopSampling()
		sampler.Wait()
		for j := range 3 {
			Expect(errs[j]).NotTo(HaveOccurred())
			Expect(outs[j].ExitCode).To(Equal(0), outs[j].String())
			for t := range 5 {
				Expect(outs[j].Stdout).To(ContainSubstring(fmt.Sprintf("j%d-t%d-ran", j, t)))
			}
		}
		AddReportEntry("waiting pods at peak", fmt.Sprintf("%d of a share of %d (%d samples)", peak.Load(), share, samples.Load()))
		Expect(samples.Load()).To(BeNumerically(">", 10))
		Expect(peak.Load()).To(BeNumerically(">=", 1), "no pod was declared ahead at all")
		Expect(peak.Load()).To(BeNumerically("<=", share), "the worker held more pods declared ahead than its share")
	}, SpecTimeout(5*time.Minute))
})
