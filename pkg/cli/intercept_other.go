//go:build !unix

package cli

import "github.com/porter-ci/porter/pkg/concourse"

// forwardResizes does nothing where there is no SIGWINCH: the session keeps
// the size it was opened with.
func forwardResizes(int) (<-chan concourse.HijackWindowSize, func()) { return nil, func() {} }
