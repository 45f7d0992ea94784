package fly_test

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/creack/pty"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/test/testenv"
)

// The shared server keeps finished steps interceptible (--keep-alive), so
// these specs reach into builds that have ended.
var _ = Describe("fly intercept", Ordered, ContinueOnFailure, func() {
	var id string

	BeforeAll(func(ctx SpecContext) {
		res := succeed(ctx, s.adminFly, "execute", "-c", shTask("echo intercept-me > marker.txt"))
		id = strconv.Itoa(buildID(res.Stdout))
	})

	It("runs a command in a finished step (-b, -s) and exits with its status", func(ctx SpecContext) {
		res := run(ctx, s.adminFly, "intercept", "-b", id, "-s", "one-off", "--", "sh", "-c", "cat marker.txt; echo to-stderr >&2; exit 3")
		Expect(res.ExitCode).To(Equal(3), res.String())
		Expect(res.Stdout).To(Equal("intercept-me\n"))
		Expect(res.Stderr).To(Equal("to-stderr\n"))
	})

	It("says a command the step's image lacks is not found, and exits non-zero", func(ctx SpecContext) {
		res := run(ctx, s.adminFly, "hijack", "-b", id, "-s", "one-off", "--", "nosuchcmd")
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		Expect(res.Output()).To(ContainSubstring("nosuchcmd"), res.String())
		Expect(res.Output()).To(ContainSubstring("not found"), res.String())
	})

	It("answers to hijack too, and feeds it stdin", func(ctx SpecContext) {
		res := runCmd(ctx, s.adminFly, testenv.FlyCmd{
			Args:  []string{"hijack", "-b", id, "--", "sh"},
			Stdin: strings.NewReader("echo from-stdin\ncat marker.txt\nexit 0\n"),
		})
		Expect(res.ExitCode).To(Equal(0), res.String())
		Expect(res.Stdout).To(Equal("from-stdin\nintercept-me\n"))
	})

	It("opens a shell with a TTY of the terminal's size", func(ctx SpecContext) {
		cmd := s.adminFly.Command(ctx, testenv.FlyCmd{Args: []string{"intercept", "-b", id, "-s", "one-off"}, Env: []string{"TERM=xterm"}})
		term, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 100})
		Expect(err).NotTo(HaveOccurred())
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		DeferCleanup(func() {
			_ = cmd.Process.Kill() // by its pid; a no-op once it has exited
			term.Close()
		})
		var screen testenv.Buffer
		screen.Tee = GinkgoWriter
		// A terminal answers busybox's cursor position query (ESC [6n) at
		// each prompt; unanswered, the line editor may take keystrokes
		// typed meanwhile for the answer.
		go func() {
			buf := make([]byte, 4096)
			for {
				n, err := term.Read(buf)
				if n > 0 {
					_, _ = screen.Write(buf[:n])
					if bytes.Contains(buf[:n], []byte("\x1b[6n")) {
						_, _ = io.WriteString(term, "\x1b[1;1R")
					}
				}
				if err != nil {
					return
				}
			}
		}()

		// fly asks for bash first, then falls back to sh (busybox has no
		// bash); keystrokes before the shell is up would be lost, so knock
		// until it answers.
		Eventually(func() string {
			_, _ = io.WriteString(term, "echo ready-$((20+22))\r")
			return screen.String()
		}).WithTimeout(time.Minute).WithPolling(time.Second).Should(ContainSubstring("ready-42"))
		Expect(screen.String()).To(ContainSubstring(`retrying with "sh"`))
		// The next line goes to a fresh prompt, after the last knock's.
		Eventually(func() string {
			out := screen.String()
			return out[strings.LastIndex(out, "ready-42"):]
		}).WithTimeout(10 * time.Second).Should(ContainSubstring("# "))
		time.Sleep(500 * time.Millisecond)

		_, err = io.WriteString(term, "stty size; tty; cat marker.txt; exit 5\r")
		Expect(err).NotTo(HaveOccurred())
		var waitErr error
		Eventually(exited).WithTimeout(time.Minute).Should(Receive(&waitErr))
		Expect(cmd.ProcessState.ExitCode()).To(Equal(5), screen.String())
		out := strings.ReplaceAll(screen.String(), "\r", "")
		Expect(out).To(ContainSubstring("\n40 100\n"))
		Expect(out).To(MatchRegexp(`\n/dev/pts/\d+\n`))
		Expect(out).To(ContainSubstring("\nintercept-me\n"))
	})
})
