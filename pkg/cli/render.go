package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/porter-ci/porter/pkg/atcclient"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events"
)

// buildResult is how a build ended, as far as its events say.
type buildResult struct {
	Status concourse.BuildStatus
	// ExitStatus is the last finish-task's, 0 if no task finished.
	ExitStatus int
}

// exitCode maps a build's end to fly's exit statuses: 0 when it
// succeeded; when it failed, the last task's exit status (1 if none); 2
// when it errored and 3 when it was aborted, unless a task's exit status
// says more.
func (r buildResult) exitCode() int {
	switch r.Status {
	case concourse.StatusSucceeded:
		return ExitSucceeded
	case concourse.StatusFailed:
		return nonZeroOr(r.ExitStatus, ExitFailed)
	case concourse.StatusErrored:
		return nonZeroOr(r.ExitStatus, ExitErrored)
	case concourse.StatusAborted:
		return nonZeroOr(r.ExitStatus, ExitAborted)
	}
	return ExitErrored
}

func nonZeroOr(v, otherwise int) int {
	if v != 0 {
		return v
	}
	return otherwise
}

// watch follows a build to its end and exits as fly watch does: the
// build's exit code, or ExitInterrupted when ctx was canceled (the build
// goes on).
func (a *app) watch(ctx context.Context, c *atcclient.Client, id int64) error {
	res, err := a.follow(ctx, c, id, false)
	if err != nil {
		if ctx.Err() != nil {
			return exitStatus(ExitInterrupted)
		}
		return err
	}
	if code := res.exitCode(); code != 0 {
		return exitStatus(code)
	}
	return nil
}

// follow renders a build's events on stdout, as fly's eventstream does,
// until the build ends. With abortOnCancel (execute), canceling ctx aborts
// the build and the stream goes on until the build has stopped; otherwise
// (watch) it stops the stream.
func (a *app) follow(ctx context.Context, c *atcclient.Client, id int64, abortOnCancel bool) (buildResult, error) {
	streamCtx := ctx
	if abortOnCancel {
		var cancel context.CancelFunc
		streamCtx, cancel = context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		stop := context.AfterFunc(ctx, func() { a.abortOnInterrupt(streamCtx, c, id) })
		defer stop()
	}

	s, err := c.BuildEvents(streamCtx, id)
	if err != nil {
		return buildResult{}, err
	}
	defer s.Close()
	var res buildResult
	for res.Status == "" {
		evID, env, err := s.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return res, err
		}
		ev, err := env.Decode()
		if err != nil {
			// A newer server may send what this client does not know.
			a.log.Debug("skipping build event", "id", evID, "event", env.Event, "err", err)
			continue
		}
		a.render(ev, &res)
	}
	if res.Status == "" {
		// The stream ended without a final status (a build that ended
		// before its first event): the build's resource says.
		bctx, cancel := withTimeout(streamCtx)
		defer cancel()
		b, err := c.Build(bctx, id)
		if err != nil {
			return res, err
		}
		if !b.Status.Finished() {
			return res, fmt.Errorf("build %d's event stream ended while it is %s", id, b.Status)
		}
		res.Status = b.Status
		a.renderStatus(b.Status)
	}
	return res, nil
}

// abortOnInterrupt asks the server to abort the build; the event stream
// then shows it stopping.
func (a *app) abortOnInterrupt(stream context.Context, c *atcclient.Client, id int64) {
	fmt.Fprintf(a.stderr, "\naborting...\n")
	ctx, cancel := context.WithTimeout(stream, 30*time.Second)
	defer cancel()
	// The stream ending (the build's end shown) cancels it: an abort cut
	// short by that is no failure to report; one that timed out is.
	if err := c.AbortBuild(ctx, id); err != nil && stream.Err() == nil {
		fmt.Fprintln(a.stderr, "failed to abort:", err)
	}
}

// render writes one build event as fly does, and notes what it says of
// the result.
func (a *app) render(ev events.Event, res *buildResult) {
	switch e := ev.(type) {
	case events.Log:
		io.WriteString(a.stdout, e.Payload)
	case events.SelectedWorker:
		fmt.Fprintf(a.stdout, "%s %s\n", a.styled(styleBold, "selected worker:"), e.WorkerName)
	case events.InitializeTask:
		fmt.Fprintln(a.stdout, a.styled(styleBold, "initializing"))
	case events.StartTask:
		argv := strings.Join(append([]string{e.Config.Run.Path}, e.Config.Run.Args...), " ")
		fmt.Fprintln(a.stdout, a.styled(styleBold, "running "+argv))
	case events.FinishTask:
		res.ExitStatus = e.ExitStatus
	case events.Error:
		fmt.Fprintln(a.stdout, a.styled(styleRed, strings.TrimRight(e.Message, "\n")))
	case events.Status:
		status := concourse.BuildStatus(e.Status)
		if status.Finished() {
			res.Status = status
			a.renderStatus(status)
		}
	}
}

func (a *app) renderStatus(status concourse.BuildStatus) {
	style := styleRed
	switch status {
	case concourse.StatusSucceeded:
		style = styleGreen
	case concourse.StatusAborted:
		style = styleYell
	}
	fmt.Fprintln(a.stdout, a.styled(style, string(status)))
}
