package hijack

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events/eventspb"
)

// SessionOpen maps the client's process spec onto the sidecar's SessionOpen.
//
// Path and Args become the command; an empty path asks for the image's shell
// (the sidecar's default). fly itself never sends an empty path: it sends
// "bash" and retries with "sh" when told the executable is not found. Env is
// added to the step's environment, as Concourse adds it to the container's.
//
// Dir, User and Privileged are ignored. A session always runs where the
// step's process runs: as the step's user, in its working directory, with
// the container's (unprivileged) security context, all fixed in the pod
// spec when the pod was created. fly sends Dir and User back as the
// container listing reported them and always sets Privileged, so refusing
// them would refuse every fly.
func SessionOpen(spec concourse.HijackProcessSpec) (*eventspb.SessionOpen, error) {
	if spec.Path == "" && len(spec.Args) > 0 {
		return nil, errors.New("process spec: args without a path")
	}
	open := &eventspb.SessionOpen{}
	if spec.Path != "" {
		open.Command = append([]string{spec.Path}, spec.Args...)
	}
	for _, kv := range spec.Env {
		if name, _, ok := strings.Cut(kv, "="); !ok || name == "" {
			return nil, fmt.Errorf("process spec: environment entry %q is not NAME=value", kv)
		}
	}
	open.Env = slices.Clone(spec.Env)
	if spec.TTY != nil {
		// A zero size leaves the sidecar's default (80x24).
		open.Tty = true
		open.Rows = uint32(spec.TTY.WindowSize.Rows)
		open.Cols = uint32(spec.TTY.WindowSize.Columns)
	}
	return open, nil
}
