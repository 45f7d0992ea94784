//go:build unix

package cli

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/porter-ci/porter/pkg/concourse"
)

// forwardResizes sends the terminal's size on the returned channel
// whenever the window changes (SIGWINCH), until stop is called.
func forwardResizes(fd int) (sizes <-chan concourse.HijackWindowSize, stop func()) {
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	out := make(chan concourse.HijackWindowSize, 1)
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
				select {
				case out <- concourse.HijackWindowSize{Columns: uint16(cols), Rows: uint16(rows)}:
				case <-done:
					return
				}
			}
		}
	}()
	return out, func() {
		signal.Stop(winch)
		close(done)
	}
}
