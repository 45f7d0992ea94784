package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atcclient"
	"github.com/porter-ci/porter/pkg/events"
)

// buildResult is how a build ended, as far as its events say.
type buildResult struct {
	Status string
	// ExitStatus is the last finish-task's, nil if no task finished.
	ExitStatus *int
}

// exitCode maps a build's end to fly's exit statuses.
func (r buildResult) exitCode() int {
	switch r.Status {
	case api.StatusSucceeded:
		return ExitSucceeded
	case api.StatusFailed:
		if r.ExitStatus != nil && *r.ExitStatus != 0 {
			return *r.ExitStatus
		}
		return ExitFailed
	case api.StatusAborted:
		return ExitAborted
	}
	return ExitErrored
}

// follow streams a build's events to the person until the build ends: logs
// to stdout or stderr by their origin, errors and step transitions to
// stderr. With abortOnCancel, canceling ctx aborts the build and the stream
// goes on until the build has stopped; otherwise it stops the stream.
func (a *app) follow(ctx context.Context, c *atcclient.Client, id int64, abortOnCancel bool) (buildResult, error) {
	streamCtx := ctx
	if abortOnCancel {
		var cancel context.CancelFunc
		streamCtx, cancel = context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		followed := make(chan struct{})
		defer close(followed)
		go func() {
			select {
			case <-ctx.Done():
				a.abortOnInterrupt(streamCtx, c, id)
			case <-followed:
			}
		}()
	}

	s, err := c.Events(streamCtx, id, "")
	if err != nil {
		return buildResult{}, err
	}
	defer s.Close()
	var res buildResult
	for {
		evID, env, err := s.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return res, err
		}
		ev, err := env.Decode()
		if err != nil {
			// A newer ATC may send what this client does not know.
			a.log.Debug("skipping build event", "id", evID, "event", env.Event, "err", err)
			continue
		}
		a.show(ev, &res)
	}
	if res.Status == "" || (res.Status == api.StatusFailed && res.ExitStatus == nil) {
		// The events did not say it all (an older stream, a build that ended
		// before its first status): the build's resource does.
		bctx, cancel := context.WithTimeout(streamCtx, time.Minute)
		defer cancel()
		b, err := c.Build(bctx, id)
		if err != nil {
			return res, err
		}
		if res.Status == "" {
			res.Status = b.Status
		}
		if res.ExitStatus == nil {
			for _, st := range b.Steps {
				if st.ExitStatus != nil {
					res.ExitStatus = st.ExitStatus
				}
			}
		}
	}
	a.showResult(res)
	return res, nil
}

// abortOnInterrupt asks the ATC to abort the build; the event stream then
// shows it stopping.
func (a *app) abortOnInterrupt(ctx context.Context, c *atcclient.Client, id int64) {
	fmt.Fprintf(a.stderr, "\ninterrupted: aborting build %d\n", id)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.AbortBuild(ctx, id); err != nil {
		a.printError("could not abort", err)
	}
}

// show renders one build event and notes what it says of the result.
func (a *app) show(ev events.Event, res *buildResult) {
	switch e := ev.(type) {
	case events.Log:
		w := a.stdout
		if e.Origin.Source == events.OriginSourceStderr {
			w = a.stderr
		}
		io.WriteString(w, e.Payload)
	case events.Error:
		msg := strings.TrimRight(e.Message, "\n")
		fmt.Fprintln(a.stderr, a.styled(styleRed, msg))
	case events.Status:
		if api.Finished(string(e.Status)) {
			res.Status = string(e.Status)
		}
	case events.SelectedWorker:
		fmt.Fprintf(a.stderr, "selected worker: %s\n", e.WorkerName)
	case events.InitializeTask:
		fmt.Fprintln(a.stderr, a.styled(styleBold, "initializing"))
	case events.StartTask:
		cmd := strings.Join(append([]string{e.Config.Run.Path}, e.Config.Run.Args...), " ")
		fmt.Fprintln(a.stderr, a.styled(styleBold, "running "+cmd))
	case events.FinishTask:
		status := e.ExitStatus
		res.ExitStatus = &status
	}
}

func (a *app) showResult(res buildResult) {
	style := styleRed
	switch res.Status {
	case api.StatusSucceeded:
		style = styleGreen
	case api.StatusAborted:
		style = styleYell
	}
	status := res.Status
	if status == "" {
		status = "unknown"
	}
	fmt.Fprintln(a.stderr, a.styled(style, status))
}
