package fly_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"golang.org/x/sync/errgroup"

	"github.com/porter-ci/porter/test/testenv"
)

var _ = Describe("the database", func() {
	It("restarting mid-build loses nothing: the build finishes with every line", func(ctx SpecContext) {
		// A PostgreSQL of this spec's own: restarting the shared one would
		// cut off every suite running alongside.
		pg, err := testenv.StartPrivatePostgres(ctx, GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(pg.Down)
		dsn, _, err := testenv.NewPostgresDatabase(ctx, pg.DSN) // gone with pg
		Expect(err).NotTo(HaveOccurred())
		srv := newServer(ctx, testenv.ATCConfig{Database: dsn})
		f := newFly("restart")
		login(ctx, f, srv, adminUser, s.adminPassword)

		const n = 100 // lines, 10 s of them: the restart falls inside
		p, err := f.Start(testenv.FlyCmd{Args: []string{"execute", "-c",
			shTask(fmt.Sprintf("i=1; while [ $i -le %d ]; do echo line-$i; i=$((i+1)); sleep 0.1; done", n))}})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(p.Kill)
		Eventually(func() string { return p.Stdout.String() }).WithTimeout(time.Minute).Should(ContainSubstring("line-1\n"))
		id := buildID(p.Stdout.String())

		Expect(pg.Restart(ctx)).To(Succeed())
		Expect(p.Stdout.String()).NotTo(ContainSubstring(fmt.Sprintf("line-%d\n", n)), "the build ended before the database was back")

		res, err := p.Wait(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), res.String())
		expectLines := func(res testenv.FlyResult) {
			GinkgoHelper()
			var got []string
			for _, l := range lines(res.Stdout) {
				if strings.HasPrefix(l, "line-") {
					got = append(got, l)
				}
			}
			want := make([]string, n)
			for i := range want {
				want[i] = "line-" + strconv.Itoa(i+1)
			}
			Expect(got).To(Equal(want), res.String())
		}
		expectLines(res)
		Expect(lines(res.Stdout)).To(ContainElement("succeeded"))

		// Stored too: a replay has every line once, and the build is done.
		watched := succeed(ctx, f, "watch", "-b", strconv.Itoa(id))
		expectLines(watched)
		token, err := srv.Login(ctx, adminUser, s.adminPassword)
		Expect(err).NotTo(HaveOccurred())
		Expect(getBuild(ctx, srv, token, id).Status).To(Equal("succeeded"))
		// And the server goes on working.
		succeed(ctx, f, "execute", "-c", shTask("echo after-restart"))
	})

	It("unreachable at start: serve exits non-zero at once, naming the database's address", func(ctx SpecContext) {
		// A port nobody listens on.
		addr, err := testenv.FreeAddr("127.0.0.1")
		Expect(err).NotTo(HaveOccurred())
		srv := prepareServer(ctx, testenv.ATCConfig{
			Database: "postgres://porter:secret@" + addr + "/porter?sslmode=disable",
		})
		start := time.Now()
		Expect(srv.Launch()).To(Succeed())
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		code, err := srv.Wait(wctx)
		Expect(err).NotTo(HaveOccurred(), "serve still runs without its database:\n%s", srv.Log())
		Expect(code).NotTo(Equal(0), srv.Log())
		Expect(time.Since(start)).To(BeNumerically("<", 15*time.Second))
		Expect(srv.Log()).To(ContainSubstring(addr))
		Expect(srv.Log()).NotTo(ContainSubstring("secret"), "the log shows the database password")
	})

	It("two servers share it: concurrent builds through both get distinct numbers and all end; an abort through one reaches the other", func(ctx SpecContext) {
		a := newServer(ctx, testenv.ATCConfig{ServerID: "a", WorkerName: "ha"})
		b := newServer(ctx, testenv.ATCConfig{ServerID: "b", WorkerName: "ha",
			Database: a.Config.Database, Bucket: a.Config.Bucket})
		flies := map[string]*testenv.Fly{"a": newFly("a"), "b": newFly("b")}
		login(ctx, flies["a"], a, adminUser, s.adminPassword)
		login(ctx, flies["b"], b, adminUser, s.adminPassword)

		const builds = 10
		var mu sync.Mutex
		ids := map[int]string{} // build id -> the server it went through
		g, gctx := errgroup.WithContext(ctx)
		for i := range builds {
			via := []string{"a", "b"}[i%2]
			task := shTask("echo via-" + via)
			dir := GinkgoT().TempDir()
			g.Go(func() error {
				res, err := flies[via].Exec(gctx, testenv.FlyCmd{Args: []string{"execute", "-c", task}, Dir: dir})
				if err != nil {
					return err
				}
				if res.ExitCode != 0 || !strings.Contains(res.Stdout, "via-"+via+"\n") {
					return fmt.Errorf("a build through %s did not succeed:\n%s", via, res)
				}
				m := executingBuild.FindStringSubmatch(res.Stdout)
				if m == nil {
					return fmt.Errorf("no build id:\n%s", res)
				}
				id, _ := strconv.Atoi(m[1])
				mu.Lock()
				defer mu.Unlock()
				if other, dup := ids[id]; dup {
					return fmt.Errorf("build %d was created through both %s and %s", id, other, via)
				}
				ids[id] = via
				return nil
			})
		}
		Expect(g.Wait()).To(Succeed())
		Expect(ids).To(HaveLen(builds))

		// A build running on a: its step's sidecar talks to a only, and b
		// says so instead of failing vaguely.
		id := startBuild(ctx, flies["a"], "echo started; sleep 600")
		tokenB, err := b.Login(ctx, adminUser, s.adminPassword)
		Expect(err).NotTo(HaveOccurred())
		var containers []struct{ ID, State string }
		// Its task's container is recorded once its pod is declared (ahead
		// of the image's check, gated, at first: waiting).
		Eventually(ctx, func(g Gomega) {
			code, body := call(ctx, http.MethodGet, fmt.Sprintf("%s/api/v1/teams/main/containers?build_id=%d&type=task", b.URL(), id), tokenB, nil, nil)
			g.Expect(code).To(Equal(http.StatusOK), body)
			g.Expect(json.Unmarshal([]byte(body), &containers)).To(Succeed())
			g.Expect(containers).To(HaveLen(1), body)
			g.Expect(containers[0].State).NotTo(Equal("waiting"), body)
		}).WithTimeout(2 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
		code, body := call(ctx, http.MethodGet, b.URL()+"/api/v1/teams/main/containers/"+containers[0].ID+"/hijack", tokenB, nil, nil)
		Expect(code).To(Equal(http.StatusNotFound), body)
		Expect(body).To(ContainSubstring(`runs through server \"a\"`))

		// Aborted through b, it ends aborted: b asks through the database,
		// a acts on it.
		res := succeed(ctx, flies["b"], "abort-build", "-b", strconv.Itoa(id))
		Expect(res.Stdout).To(Equal("build successfully aborted\n"))
		watched := run(ctx, flies["a"], "watch", "-b", strconv.Itoa(id))
		Expect(watched.ExitCode).To(Equal(3), watched.String())
		Expect(watched.Stdout).To(MatchRegexp(`(?m)^aborted$`))

		// Both servers see all ten, finished, each with its own name.
		for name, srv := range map[string]*testenv.ATC{"a": a, "b": b} {
			token, err := srv.Login(ctx, adminUser, s.adminPassword)
			Expect(err).NotTo(HaveOccurred())
			names := map[string]int{}
			for id := range ids {
				got := getBuild(ctx, srv, token, id)
				Expect(got.Status).To(Equal("succeeded"), "build %d through server %s", id, name)
				Expect(names).NotTo(HaveKey(got.Name), "builds %d and %d are both named %s", id, names[got.Name], got.Name)
				names[got.Name] = id
			}
		}
	})
})
