package entrypoint

import (
	"path/filepath"
	"testing"

	"github.com/porter-ci/porter/pkg/events/eventspb"
)

// A session whose command is not in the image ends saying so in a field
// of its own (a check pod's missing check script); one that exits is no
// such case.
func TestSessionCommandNotFound(t *testing.T) {
	e := NewEntrypointer(EntrypointConfig{}, nil, nil)
	for _, tc := range []struct {
		argv     []string
		notFound bool
	}{
		{[]string{filepath.Join(t.TempDir(), "opt/resource/check")}, true},
		{[]string{"no-such-command-in-path"}, true},
		{[]string{"/bin/sh", "-c", "exit 3"}, false},
	} {
		e.openSession(&eventspb.SessionOpen{SessionId: "s", Command: tc.argv})
		for {
			out := (<-e.send).GetSessionOutput()
			if !out.GetExited() {
				continue
			}
			if out.GetNotFound() != tc.notFound || (tc.notFound && out.GetError() == "") {
				t.Errorf("%v: not found %v, error %q: want not found %v", tc.argv, out.GetNotFound(), out.GetError(), tc.notFound)
			}
			break
		}
	}
}
