package runtime_test

// How steps end in the cases people meet and the runtime used to get
// wrong: a process killed for exceeding its memory limit, and an abort
// while the outputs upload. These specs run this tree's sidecar (an image
// of its own), on a server of their own, driven by the real fly.

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"

	"github.com/porter-ci/porter/pkg/atcclient"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/test/testenv"
)

var _ = Describe("how steps end, with this tree's sidecar", Ordered, func() {
	var (
		atc *testenv.ATC
		fly *testenv.Fly
	)

	BeforeAll(func(ctx SpecContext) {
		env, err := testenv.NewATCEnv(ctx, GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		ref, removeImage, err := testenv.BuildPorterImage(ctx, GinkgoT().TempDir(), "behave")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(removeImage)
		ns, removeNS, err := env.NewWorkerNamespace(ctx, "porter-behave-")
		DeferCleanup(removeNS)
		Expect(err).NotTo(HaveOccurred())
		dsn, dropDB, err := env.NewDatabase(ctx)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(dropDB)

		password := rand.Text()
		atc, err = env.NewATC(testenv.ATCConfig{
			Worker: ns, Database: dsn, Bucket: ns.Name,
			LocalUsers: []string{user + ":" + password}, MainTeamUsers: []string{user},
			Args: []string{"--porter-image", ref},
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(atc.Start(ctx)).To(Succeed())
		DeferCleanup(func(context.Context) {
			Expect(atc.Stop()).To(Succeed())
			GinkgoWriter.Printf("server log:\n%s\n", atc.Log())
		})
		flyBin, err := testenv.FindFly()
		Expect(err).NotTo(HaveOccurred())
		fly = testenv.NewFly(flyBin, GinkgoT().TempDir(), "behave")
		fly.Log = GinkgoWriter
		res, err := fly.Login(ctx, atc.URL(), user, password)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), res.String())
	}, NodeTimeout(10*time.Minute))

	// client is an API client with the token fly saved.
	client := func() *atcclient.Client {
		GinkgoHelper()
		data, err := os.ReadFile(filepath.Join(fly.Home, ".flyrc"))
		Expect(err).NotTo(HaveOccurred())
		var rc struct {
			Targets map[string]struct {
				Token struct {
					Value string `json:"value"`
				} `json:"token"`
			} `json:"targets"`
		}
		Expect(yaml.Unmarshal(data, &rc)).To(Succeed())
		c, err := atcclient.New(atcclient.Options{URL: atc.URL(), Token: rc.Targets[fly.Target].Token.Value})
		Expect(err).NotTo(HaveOccurred())
		return c
	}

	// eventsOf reads a build's events to its end.
	eventsOf := func(ctx context.Context, id int64) []events.Event {
		GinkgoHelper()
		return eventsFrom(ctx, client(), id)
	}

	taskFile := func(body string) string {
		GinkgoHelper()
		p := filepath.Join(GinkgoT().TempDir(), "task.yml")
		Expect(os.WriteFile(p, []byte(busyboxTask+body), 0o644)).To(Succeed())
		return p
	}

	buildOf := func(stdout string) int64 {
		GinkgoHelper()
		m := regexp.MustCompile(`executing build (\d+)`).FindStringSubmatch(stdout)
		Expect(m).NotTo(BeNil(), "no 'executing build N' in:\n%s", stdout)
		id, err := strconv.ParseInt(m[1], 10, 64)
		Expect(err).NotTo(HaveOccurred())
		return id
	}

	// expectOOMKilled runs the task through fly and checks that it ends as
	// Concourse ends it: failed, fly exiting 137 after one finish-task event
	// with exit status 137, the build saying out of memory with the limit
	// (matching limit) and nothing about a lost entrypoint.
	expectOOMKilled := func(ctx context.Context, body, limit string) {
		GinkgoHelper()
		res, err := fly.Run(ctx, "execute", "-c", taskFile(body))
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(137), res.String())
		Expect(res.Output()).To(ContainSubstring("out of memory"), res.String())
		Expect(res.Output()).To(MatchRegexp(limit), res.String())
		Expect(res.Output()).NotTo(ContainSubstring("entrypoint went away"), res.String())
		id := buildOf(res.Stdout)

		b, err := client().Build(ctx, id)
		Expect(err).NotTo(HaveOccurred())
		Expect(b.Status).To(Equal(concourse.StatusFailed))
		var exits []int
		var errs []string
		for _, ev := range eventsOf(ctx, id) {
			switch e := ev.(type) {
			case events.FinishTask:
				exits = append(exits, e.ExitStatus)
			case events.Error:
				errs = append(errs, e.Message)
			}
		}
		Expect(exits).To(Equal([]int{137}), "the task's finish-task events")
		Expect(errs).To(ContainElement(And(ContainSubstring("out of memory"), MatchRegexp(limit))))
		Expect(errs).NotTo(ContainElement(ContainSubstring("entrypoint")))
	}

	It("fails a task whose process is killed for exceeding its memory limit with exit status 137, saying out of memory and naming the limit", func(ctx SpecContext) {
		// The kernel kills dd, not the container's first process: the
		// kubelet sees no OOMKilled container, only the step's wrapper can tell.
		expectOOMKilled(ctx, `container_limits: {memory: 64MB}
run:
  path: sh
  args: ["-c", "sleep 1; exec dd if=/dev/zero of=/dev/null bs=300M count=1"]
`, `64Mi|67108864`)
	}, SpecTimeout(4*time.Minute))

	It("fails a task whose whole container the kubelet kills for exceeding its memory limit with exit status 137, saying out of memory and naming the limit", func(ctx SpecContext) {
		// The shell itself holds the memory: the whole step container goes,
		// the step's wrapper with it, and only the kubelet can say why.
		expectOOMKilled(ctx, `container_limits: {memory: 16777216}
run:
  path: sh
  args: ["-c", "x=$(head -c 67108864 /dev/zero | tr '\\0' a)"]
`, `16Mi|16777216`)
	}, SpecTimeout(4*time.Minute))

	It("ends a build aborted during its outputs' upload as aborted, keeping no artifact", func(ctx SpecContext) {
		volumes := func() []concourse.Volume {
			GinkgoHelper()
			res, err := fly.Run(ctx, "volumes", "--json")
			Expect(err).NotTo(HaveOccurred())
			Expect(res.ExitCode).To(Equal(0), res.String())
			var vs []concourse.Volume
			Expect(json.Unmarshal([]byte(res.Stdout), &vs)).To(Succeed(), res.Stdout)
			return vs
		}
		before := volumes()

		// 300 MB of random data: incompressible, so its upload to MinIO
		// takes seconds.
		out := GinkgoT().TempDir()
		p, err := fly.Start(testenv.FlyCmd{Args: []string{"execute", "-o", "big=" + out, "-c", taskFile(`outputs: [{name: big}]
run:
  path: sh
  args: ["-c", "head -c 314572800 /dev/urandom > big/random && echo written"]
`)}})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(p.Kill)
		Eventually(p.Stdout.String).WithContext(ctx).WithTimeout(2 * time.Minute).Should(ContainSubstring("executing build"))
		id := buildOf(p.Stdout.String())

		// The process's end (finish-task, exit 0) is where the upload starts.
		s, err := client().BuildEvents(ctx, id)
		Expect(err).NotTo(HaveOccurred())
		defer s.Close()
		for finished := false; !finished; {
			_, env, err := s.Next()
			Expect(err).NotTo(HaveOccurred(), "the build ended before its task did")
			ev, err := env.Decode()
			Expect(err).NotTo(HaveOccurred())
			if f, ok := ev.(events.FinishTask); ok {
				Expect(f.ExitStatus).To(Equal(0))
				finished = true
			}
		}
		abort, err := fly.Run(ctx, "abort-build", "-b", fmt.Sprint(id))
		Expect(err).NotTo(HaveOccurred())
		Expect(abort.ExitCode).To(Equal(0), abort.String())

		res, err := p.Wait(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Stdout).To(HaveSuffix("aborted\n"), res.String())
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		b, err := client().Build(ctx, id)
		Expect(err).NotTo(HaveOccurred())
		Expect(b.Status).To(Equal(concourse.StatusAborted))
		Expect(filepath.Join(out, "random")).NotTo(BeAnExistingFile(), "nothing was downloaded")
		Expect(volumes()).To(HaveLen(len(before)), "no artifact was kept")
		for _, ev := range eventsOf(ctx, id) {
			if st, ok := ev.(events.Status); ok {
				Expect(st.Status).NotTo(Equal(concourse.StatusSucceeded))
			}
		}
	}, SpecTimeout(6*time.Minute))
})
