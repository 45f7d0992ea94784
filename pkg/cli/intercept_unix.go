//go:build unix

package cli

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/porter-ci/porter/pkg/atcclient"
)

// forwardResizes sends the terminal's size to the session whenever the
// window changes (SIGWINCH), until the returned function is called.
func forwardResizes(fd int, sess *atcclient.InterceptSession, log *slog.Logger) (stop func()) {
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-winch:
				cols, rows, err := term.GetSize(fd)
				if err != nil || rows <= 0 || cols <= 0 {
					continue
				}
				if err := sess.Resize(uint32(rows), uint32(cols)); err != nil {
					log.Debug("intercept: resize", "err", err)
					return
				}
			}
		}
	}()
	return func() {
		signal.Stop(winch)
		close(done)
	}
}
