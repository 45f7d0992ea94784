package runtime_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/cli"
)

// runStdin runs a client command with stdin from a string: never a terminal,
// so intercept takes its piped path.
func runStdin(ctx context.Context, stdin string, args ...string) (code int, stdout, stderr string) {
	var out, errOut lockedBuffer
	code = cli.Main(ctx, append([]string{"--atc", server.url()}, args...), strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

// restartServer restarts the suite's server with serve --keep-alive.
func restartServer(keepAlive time.Duration) {
	server.stopWith(syscall.SIGTERM)
	server.keepAlive = keepAlive
	server.start()
}

// wsSession is the intercept WebSocket spoken by hand, as a tool other than
// the CLI would.
type wsSession struct{ conn *websocket.Conn }

func dialIntercept(ctx context.Context, build int64, query url.Values) *wsSession {
	u := "ws" + strings.TrimPrefix(server.url(), "http") + api.InterceptPath(build) + "?" + query.Encode()
	conn, resp, err := websocket.DefaultDialer.DialContext(ctx, u, nil)
	if resp != nil && err != nil {
		err = fmt.Errorf("%w: %s", err, resp.Status)
	}
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { _ = conn.Close() })
	return &wsSession{conn: conn}
}

func (s *wsSession) send(msg map[string]any) {
	Expect(s.conn.WriteJSON(msg)).To(Succeed())
}

// readUntil reads output until it contains want, and returns it.
func (s *wsSession) readUntil(want string) string {
	var out strings.Builder
	for !strings.Contains(out.String(), want) {
		chunk, status, exited := s.next(out.String())
		Expect(exited).To(BeFalse(), "exited with %d before printing %q; output %q", status, want, out.String())
		out.WriteString(chunk)
	}
	return out.String()
}

// collect reads output until the exit message and returns it with the status.
func (s *wsSession) collect() (string, int) {
	var out strings.Builder
	for {
		chunk, status, exited := s.next(out.String())
		if exited {
			return out.String(), status
		}
		out.WriteString(chunk)
	}
}

// next reads one message: output, or the exit status.
func (s *wsSession) next(sofar string) (chunk string, status int, exited bool) {
	Expect(s.conn.SetReadDeadline(time.Now().Add(time.Minute))).To(Succeed())
	var msg struct {
		Type    string `json:"type"`
		Stream  string `json:"stream"`
		Data    string `json:"data"`
		Status  *int   `json:"status"`
		Message string `json:"message"`
	}
	Expect(s.conn.ReadJSON(&msg)).To(Succeed(), "output so far: %q", sofar)
	switch msg.Type {
	case "output":
		Expect(msg.Stream).To(Equal("stdout"), "a TTY has one stream")
		data, err := base64.StdEncoding.DecodeString(msg.Data)
		Expect(err).NotTo(HaveOccurred())
		return string(data), 0, false
	case "exit":
		Expect(msg.Status).NotTo(BeNil())
		return "", *msg.Status, true
	}
	Fail(fmt.Sprintf("unexpected message %+v; output so far: %q", msg, sofar))
	return "", 0, false
}

// The server runs as deploy/atc's service account, which has no pods/exec
// or pods/attach (test/e2e/rbac_test.go proves it is forbidden): every
// session here goes through the step sidecar's own gRPC stream.
var _ = Describe("intercept on the real cluster", Ordered, func() {
	BeforeAll(func() {
		// Only these specs keep finished steps around: elsewhere a finished
		// or aborted step's container is expected to end.
		restartServer(10 * time.Minute)
		DeferCleanup(restartServer, time.Duration(0))
	})

	It("opens shells in a finished step's container, piped and with a TTY", func(ctx SpecContext) {
		code, stdout, stderr := run(ctx, "execute", "-c", taskFile(busyboxTask+`run:
  path: sh
  args: ["-c", "echo kept-for-intercept > state.txt; id -u; exit 3"]
`))
		Expect(code).To(Equal(3), stderr)
		uid := strings.TrimSpace(stdout)
		Expect(uid).To(MatchRegexp(`^\d+$`))
		b := latestBuild(ctx)
		id := fmt.Sprint(b.ID)

		By("running a command, stdin piped: the step's directory, user and exit status")
		code, stdout, stderr = runStdin(ctx, "", "intercept", id, "--", "sh", "-c", "cat state.txt; id -u; exit 4")
		Expect(code).To(Equal(4), stderr)
		Expect(stdout).To(Equal("kept-for-intercept\n" + uid + "\n"))

		By("piping a script into the image's shell, by step name")
		code, stdout, stderr = runStdin(ctx, "echo $((6*7)); echo oops >&2; exit 0\n", "intercept", "--step", "one-off", id)
		Expect(code).To(Equal(0), stderr)
		Expect(stdout).To(Equal("42\n"))
		Expect(stderr).To(Equal("oops\n"), "without a TTY stderr stays apart")

		By("speaking the WebSocket API with a TTY")
		tty := dialIntercept(ctx, b.ID, url.Values{"tty": {"true"}, "rows": {"30"}, "cols": {"100"}})
		tty.send(map[string]any{"type": "input", "data": base64.StdEncoding.EncodeToString([]byte("stty size; echo hi-from-$((1+1))-tty\r"))})
		// "hi-from-2-tty": the shell ran the line, the terminal did not just echo it.
		Expect(tty.readUntil("hi-from-2-tty")).To(ContainSubstring("30 100"))
		tty.send(map[string]any{"type": "resize", "rows": 40, "cols": 120})
		tty.send(map[string]any{"type": "input", "data": base64.StdEncoding.EncodeToString([]byte("stty size; exit 0\r"))})
		out, status := tty.collect()
		Expect(status).To(Equal(0), out)
		Expect(out).To(ContainSubstring("40 120"))

		By("closing the WebSocket, which kills the session's process")
		sleeper := dialIntercept(ctx, b.ID, url.Values{"tty": {"false"}, "cmd": {"sh", "-c", "echo started; exec sleep 4711"}})
		Expect(sleeper.conn.SetReadDeadline(time.Now().Add(time.Minute))).To(Succeed())
		var first api.InterceptMessage
		Expect(sleeper.conn.ReadJSON(&first)).To(Succeed())
		Expect(string(first.Data)).To(Equal("started\n"))
		_, ps, _ := runStdin(ctx, "", "intercept", id, "--", "ps")
		Expect(ps).To(ContainSubstring("sleep 4711"), "ps sees the session's process while it runs")
		Expect(sleeper.conn.Close()).To(Succeed())
		Eventually(func() string {
			_, ps, _ := runStdin(ctx, "", "intercept", id, "--", "ps")
			return ps
		}).WithTimeout(30 * time.Second).WithPolling(time.Second).ShouldNot(ContainSubstring("sleep 4711"))
	})

	It("says clearly that a step whose pod is gone cannot be intercepted", func(ctx SpecContext) {
		code, _, stderr := run(ctx, "execute", "-c", taskFile(busyboxTask+`run: {path: "true"}
`))
		Expect(code).To(Equal(0), stderr)
		b := latestBuild(ctx)
		grace := int64(0)
		Expect(admin.CoreV1().Pods(namespace).Delete(ctx, b.Steps[0].Pod, metav1.DeleteOptions{GracePeriodSeconds: &grace})).To(Succeed())
		Eventually(func() bool {
			_, err := admin.CoreV1().Pods(namespace).Get(ctx, b.Steps[0].Pod, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}).WithTimeout(time.Minute).WithPolling(time.Second).Should(BeTrue())

		// The sidecar's stream ends with its pod; the server may take a
		// moment to notice.
		Eventually(func(g Gomega) {
			code, _, stderr := runStdin(ctx, "exit 0\n", "intercept", fmt.Sprint(b.ID))
			g.Expect(code).To(Equal(cli.ExitErrored))
			g.Expect(stderr).To(ContainSubstring("409 Conflict"))
			g.Expect(stderr).To(ContainSubstring(`step "one-off" is not running or no longer interceptible: its pod is gone`))
		}).WithTimeout(30 * time.Second).WithPolling(time.Second).Should(Succeed())

		By("and that a build or step that does not exist is unknown")
		code, _, stderr = runStdin(ctx, "", "intercept", "--step", "nope", fmt.Sprint(b.ID))
		Expect(code).To(Equal(cli.ExitErrored))
		Expect(stderr).To(ContainSubstring(`404 Not Found: build %d has no step "nope"`, b.ID))
		code, _, stderr = runStdin(ctx, "", "intercept", "999999")
		Expect(code).To(Equal(cli.ExitErrored))
		Expect(stderr).To(ContainSubstring("404 Not Found: no such build"))
	})
})
