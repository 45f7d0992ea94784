package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/pkg/concourse"
)

// restartServer restarts the suite's server with serve --keep-alive.
func restartServer(ctx context.Context, keepAlive time.Duration) {
	GinkgoHelper()
	Expect(server.Stop()).To(Succeed())
	server.Config.KeepAlive = keepAlive
	Expect(server.Start(ctx)).To(Succeed())
}

// hijackSession is Concourse's intercept (hijack) WebSocket spoken by hand,
// as a tool other than the CLI would: a process spec first, then input
// messages one way and output messages the other, JSON text frames all.
type hijackSession struct {
	conn *websocket.Conn
	tty  bool
}

func dialHijack(ctx context.Context, handle string, spec concourse.HijackProcessSpec) *hijackSession {
	GinkgoHelper()
	c := api()
	conn, resp, err := websocket.DefaultDialer.DialContext(ctx, c.HijackURL("", handle), c.AuthHeader())
	if resp != nil && err != nil {
		err = fmt.Errorf("%w: %s", err, resp.Status)
	}
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { _ = conn.Close() })
	Expect(conn.WriteJSON(spec)).To(Succeed())
	return &hijackSession{conn: conn, tty: spec.TTY != nil}
}

func (s *hijackSession) send(in concourse.HijackInput) {
	GinkgoHelper()
	Expect(s.conn.WriteJSON(in)).To(Succeed())
}

func (s *hijackSession) stdin(text string) {
	GinkgoHelper()
	s.send(concourse.HijackInput{Stdin: []byte(text)})
}

// readUntil reads output until it contains want, and returns it.
func (s *hijackSession) readUntil(want string) string {
	GinkgoHelper()
	var out strings.Builder
	for !strings.Contains(out.String(), want) {
		chunk, status, exited := s.next(out.String())
		Expect(exited).To(BeFalse(), "exited with %d before printing %q; output %q", status, want, out.String())
		out.WriteString(chunk)
	}
	return out.String()
}

// collect reads output until the exit status and returns both.
func (s *hijackSession) collect() (string, int) {
	GinkgoHelper()
	var out strings.Builder
	for {
		chunk, status, exited := s.next(out.String())
		if exited {
			return out.String(), status
		}
		out.WriteString(chunk)
	}
}

// next reads one message: stdout, or the exit status.
func (s *hijackSession) next(sofar string) (chunk string, status int, exited bool) {
	GinkgoHelper()
	Expect(s.conn.SetReadDeadline(time.Now().Add(time.Minute))).To(Succeed())
	_, data, err := s.conn.ReadMessage()
	Expect(err).NotTo(HaveOccurred(), "output so far: %q", sofar)
	var msg concourse.HijackOutput
	Expect(json.Unmarshal(data, &msg)).To(Succeed(), string(data))
	Expect(msg.Error).To(BeEmpty(), "output so far: %q", sofar)
	if s.tty {
		Expect(msg.Stderr).To(BeEmpty(), "a TTY has one stream")
	}
	if msg.ExitStatus != nil {
		return string(msg.Stdout), *msg.ExitStatus, true
	}
	return string(msg.Stdout), 0, false
}

// The server runs as deploy/atc's service account, which has no pods/exec
// or pods/attach (test/e2e/rbac_test.go proves it is forbidden): every
// session here goes through the step sidecar's own gRPC stream.
var _ = Describe("intercept on the real cluster", Ordered, func() {
	BeforeAll(func(ctx SpecContext) {
		// Only these specs keep finished steps around: elsewhere a finished
		// or aborted step's container is expected to end.
		restartServer(ctx, 10*time.Minute)
		DeferCleanup(func(ctx SpecContext) { restartServer(ctx, 0) })
	})

	It("opens shells in a finished step's container, piped and with a TTY", func(ctx SpecContext) {
		res := porter(ctx, "execute", "-c", taskFile(busyboxTask+`run:
  path: sh
  args: ["-c", "echo kept-for-intercept > state.txt; id -u; exit 3"]
`))
		Expect(res.Code).To(Equal(3), res.String())
		uid := strings.TrimSpace(taskOutput(res.Stdout))
		Expect(uid).To(MatchRegexp(`^\d+$`))
		id := fmt.Sprint(buildID(res.Stdout))
		container := buildContainer(ctx, buildID(res.Stdout))
		Expect(container.StepName).To(Equal("one-off"))
		Expect(container.Type).To(Equal("task"))
		Expect(container.WorkingDirectory).To(MatchRegexp(`^/tmp/build/[0-9a-f]+$`))

		By("running a command, stdin piped: the step's directory, user and exit status")
		res = porterWith(ctx, cliEnv{}, "intercept", "-b", id, "--", "sh", "-c", "cat state.txt; id -u; exit 4")
		Expect(res.Code).To(Equal(4), res.String())
		Expect(res.Stdout).To(Equal("kept-for-intercept\n" + uid + "\n"))

		By("piping a script into the image's shell (no bash in busybox: sh, as fly does), by step name")
		res = porterWith(ctx, cliEnv{Stdin: "echo $((6*7)); echo oops >&2; exit 0\n"}, "intercept", "-b", id, "-s", "one-off")
		Expect(res.Code).To(Equal(0), res.String())
		Expect(res.Stdout).To(Equal("42\n"))
		Expect(res.Stderr).To(Equal("\rCouldn't find \"bash\" on container, retrying with \"sh\"\n\roops\n"), "without a TTY stderr stays apart")

		By("speaking the WebSocket API with a TTY")
		tty := dialHijack(ctx, container.ID, concourse.HijackProcessSpec{Path: "sh", User: container.User, Dir: container.WorkingDirectory,
			TTY: &concourse.HijackTTYSpec{WindowSize: concourse.HijackWindowSize{Columns: 100, Rows: 30}}})
		tty.stdin("stty size; echo hi-from-$((1+1))-tty\r")
		// "hi-from-2-tty": the shell ran the line, the terminal did not just echo it.
		Expect(tty.readUntil("hi-from-2-tty")).To(ContainSubstring("30 100"))
		tty.send(concourse.HijackInput{TTYSpec: &concourse.HijackTTYSpec{WindowSize: concourse.HijackWindowSize{Columns: 120, Rows: 40}}})
		tty.stdin("stty size; exit 0\r")
		out, status := tty.collect()
		Expect(status).To(Equal(0), out)
		Expect(out).To(ContainSubstring("40 120"))

		By("closing the WebSocket, which kills the session's process")
		sleeper := dialHijack(ctx, container.ID, concourse.HijackProcessSpec{Path: "sh", Args: []string{"-c", "echo started; exec sleep 4711"},
			Dir: container.WorkingDirectory})
		Expect(sleeper.readUntil("started\n")).To(Equal("started\n"))
		ps := porter(ctx, "intercept", "-b", id, "--", "ps")
		Expect(ps.Stdout).To(ContainSubstring("sleep 4711"), "ps sees the session's process while it runs")
		Expect(sleeper.conn.Close()).To(Succeed())
		Eventually(func() string { return porter(ctx, "intercept", "-b", id, "--", "ps").Stdout }).
			WithTimeout(30 * time.Second).WithPolling(time.Second).ShouldNot(ContainSubstring("sleep 4711"))
	})

	It("says clearly that a step whose pod is gone cannot be intercepted", func(ctx SpecContext) {
		res := porter(ctx, "execute", "-c", taskFile(busyboxTask+`run: {path: "true"}
`))
		Expect(res.Code).To(Equal(0), res.String())
		id := buildID(res.Stdout)
		deletePod(ctx, id)

		// The sidecar's stream ends with its pod; the server may take a
		// moment to notice.
		Eventually(func(g Gomega) {
			res := porterWith(ctx, cliEnv{Stdin: "exit 0\n"}, "intercept", "-b", fmt.Sprint(id))
			g.Expect(res.Code).To(Equal(1), res.String())
			g.Expect(res.Stderr).To(ContainSubstring("404 Not Found"))
			g.Expect(res.Stderr).To(ContainSubstring(`step "one-off" of build %d is no longer interceptible: its pod is not running or not connected`, id))
		}).WithTimeout(30 * time.Second).WithPolling(time.Second).Should(Succeed())

		By("and that a build or step that does not exist has no container")
		for _, args := range [][]string{{"-b", fmt.Sprint(id), "-s", "nope"}, {"-b", "999999"}} {
			res = porter(ctx, append([]string{"intercept"}, args...)...)
			Expect(res.Code).To(Equal(1), res.String())
			Expect(res.Stderr).To(ContainSubstring("no containers matched your search parameters!"))
		}
	})
})
