//go:build !unix

package cli

import (
	"log/slog"

	"github.com/porter-ci/porter/pkg/atcclient"
)

// forwardResizes does nothing where there is no SIGWINCH: the session keeps
// the size it was opened with.
func forwardResizes(int, *atcclient.InterceptSession, *slog.Logger) (stop func()) { return func() {} }
