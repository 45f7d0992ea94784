// Package sidecar is the in-pod coordinator (`porter sidecar`): it links
// the step to the ATC, moves its artifacts, keeps its audit record and
// serves the control socket that `porter entrypoint` (package
// sidecar/entrypoint, the wrapper around the step's process in the main
// container) attaches to, over the local control protocol (package
// sidecar/controlpb).
package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/redact"
	"github.com/porter-ci/porter/pkg/resource"
	"github.com/porter-ci/porter/pkg/sidecar/controlpb"
	"github.com/porter-ci/porter/pkg/sidecar/entrypoint"
)

// Artifact is a stored directory.
type Artifact struct {
	Key    string `json:"key"`
	Size   int64  `json:"size"`
	Digest string `json:"digest"`
}

// Artifacts is what the sidecar needs from the blobstore.
type Artifacts interface {
	// Download extracts the artifact at key into dir, checking its digest when given.
	Download(ctx context.Context, key, digest, dir string) (Artifact, error)
	// Upload stores dir as a new artifact blob (the ATC deduplicates it).
	Upload(ctx context.Context, dir string) (Artifact, error)
	// UploadTo stores dir under a fixed key (task caches).
	UploadTo(ctx context.Context, dir, key string) (Artifact, error)
	// Exists reports whether key is stored.
	Exists(ctx context.Context, key string) (bool, error)
	// PutAudit stores a small audit object, staged for the ATC to seal
	// (auditseal.StagedKey), unless key is taken: then it stores nothing
	// and says so with blobstore.ErrExists.
	PutAudit(ctx context.Context, key string, body []byte, contentType string) error
}

// Config is everything `porter sidecar` needs.
type Config struct {
	Action *action.Action
	ATC    ATCConfig
	// PodName is reported to the ATC and recorded in the audit trail.
	PodName string
	// SocketPath is the control socket the entrypoint attaches to.
	SocketPath string
	// StdinFile holds the process's stdin when the action's is secret
	// (action.StdinSecret): a file of the step's Secret.
	StdinFile string
	Artifacts Artifacts
	// Relogin is the blobstore again with other credentials: a gated
	// step's go-ahead may bring credentials that also read the inputs
	// earlier steps made (nil: the go-ahead's credentials are refused).
	Relogin func(ctx context.Context, c Credentials) (Artifacts, error)
	// Redact are values (the build's credentials) the audit journal shows
	// as ((redacted)), as the ATC's build events do.
	Redact []string
	// JournalDir holds the step's event journal until it is uploaded.
	JournalDir string
	// KillGrace is how long the process group gets between TERM and KILL.
	KillGrace time.Duration
	// OutboxLimit bounds unacknowledged event bytes (default 32 MiB).
	OutboxLimit int
	// TransferRetry bounds how long an input or output transfer is retried (default 2m).
	TransferRetry time.Duration
	// StayUntilTerminated keeps the sidecar after the step until ctx ends:
	// a native sidecar that exited would be restarted by the kubelet, which
	// instead sends TERM once the main container has ended.
	StayUntilTerminated bool
	Log                 *slog.Logger
	// Tracer makes the step's spans (inputs, run, outputs, transfers) as
	// children of the span in Run's context (nil: none).
	Tracer trace.Tracer
}

// Credentials are blobstore credentials (a step's own, scoped).
type Credentials struct{ AccessKey, SecretKey, SessionToken string }

// Result is how the step ended, as recorded in result.json.
type Result = api.StepResult

// StepResult is how a step ended in one word (Result.Result).
type StepResult = api.Outcome

const (
	Succeeded = api.Succeeded
	Failed    = api.Failed
	Errored   = api.Errored
	Aborted   = api.Aborted
)

// resultEvent is a step result as the ATC's events carry it.
func resultEvent(r StepResult) eventspb.Result {
	switch r {
	case Succeeded:
		return eventspb.Result_RESULT_SUCCEEDED
	case Failed:
		return eventspb.Result_RESULT_FAILED
	case Errored:
		return eventspb.Result_RESULT_ERRORED
	case Aborted:
		return eventspb.Result_RESULT_ABORTED
	}
	return eventspb.Result_RESULT_UNSPECIFIED
}

// Transfer is one artifact moved in or out of the step.
type Transfer = api.StepArtifact

// stepError marks an infrastructure failure (ERRORED, not FAILED).
type stepError struct{ err error }

func (e stepError) Error() string { return e.err.Error() }
func (e stepError) Unwrap() error { return e.err }

// run is one execution of the coordinator.
type run struct {
	cfg    Config
	a      *action.Action
	log    *slog.Logger
	outbox *outbox
	ctl    *controlServer
	audit  *auditTrail

	commands      chan *eventspb.ATCMessage
	sessionOutput chan *eventspb.SessionOutput

	mu       sync.Mutex
	aborted  string // reason, once the ATC aborted the step
	released bool
	// failure, when the process never ran, is what the entrypoint is told.
	failure *controlpb.Fail
	abortCh chan struct{}
	relCh   chan struct{}
	// proceed is a gated step's go-ahead, once given (proceedCh closed).
	proceed   *eventspb.Proceed
	proceedCh chan struct{}
	// actionWritten is closed once action.json is stored (or failed to be).
	actionWritten chan struct{}
	// response collects a resource step's stdout (nil for other steps);
	// responseBody is it once checked.
	response     *resource.Stdout
	responseBody []byte
	// phases are the step's moments so far (under mu), for its audit record.
	phases []api.Phase

	// bg ends when Run returns; goroutines counts the goroutines Run
	// waits for before it does.
	bg         context.Context
	goroutines sync.WaitGroup
}

// goroutine runs f in a goroutine Run waits for.
func (r *run) goroutine(f func()) {
	r.goroutines.Add(1)
	go func() {
		defer r.goroutines.Done()
		f()
	}()
}

// Run coordinates the step until it is released (or its keep-alive window
// ends) and returns how it ended.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Action == nil {
		return nil, errors.New("sidecar: no action")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider().Tracer("")
	}
	if cfg.KillGrace == 0 {
		cfg.KillGrace = 10 * time.Second
	}
	if cfg.OutboxLimit == 0 {
		cfg.OutboxLimit = 32 << 20
	}
	if cfg.TransferRetry == 0 {
		cfg.TransferRetry = 2 * time.Minute
	}
	if cfg.JournalDir == "" {
		cfg.JournalDir = os.TempDir()
	}
	a := cfg.Action
	log := cfg.Log.With("step", a.StepID)
	cfg.ATC.Insecure = cfg.ATC.Insecure || a.ATCLinkInsecure
	if err := cfg.ATC.Check(); err != nil {
		return nil, err
	}
	audit, err := newAuditTrail(cfg.JournalDir, a, cfg.PodName, cfg.Artifacts, redact.New(cfg.Redact))
	if err != nil {
		return nil, err
	}
	defer audit.close()

	r := &run{
		cfg: cfg, a: a, log: log, audit: audit,
		outbox:        newOutbox(cfg.OutboxLimit, audit.record),
		ctl:           newControlServer(),
		commands:      make(chan *eventspb.ATCMessage, 16),
		sessionOutput: make(chan *eventspb.SessionOutput, 64),
		abortCh:       make(chan struct{}),
		relCh:         make(chan struct{}),
		proceedCh:     make(chan struct{}),
		actionWritten: make(chan struct{}),
	}
	if script := a.Type.Script(); script != "" {
		r.response = resource.NewStdout(script, resource.MaxResponse)
	}
	stopControl, err := r.ctl.listen(ctx, cfg.SocketPath)
	if err != nil {
		return nil, err
	}
	defer stopControl()

	// Every goroutine of the run lives until bg ends, at the latest, and
	// Run returns only once they all have.
	bg, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	r.bg = bg
	defer r.goroutines.Wait()
	defer stopBackground()
	link := &atcLink{cfg: cfg.ATC, stepID: a.StepID, podName: cfg.PodName, outbox: r.outbox, log: log,
		commands: r.commands, sessionOutput: r.sessionOutput}
	r.goroutine(func() { link.run(bg) })
	r.goroutine(func() { r.dispatch(bg) })
	r.goroutine(func() {
		select {
		case <-r.ctl.ready:
			log.Info("entrypoint attached")
		case <-bg.Done():
		}
	})

	res := r.execute(ctx)
	if res.Error != "" {
		log.Error("step errored", "err", res.Error)
	}
	finishedSeq := r.finish(ctx, res)
	log.Info("step finished; reporting", "result", res.Result, "seq", finishedSeq)

	// Everything up to the finish event must reach the ATC before the pod may go.
	flushCtx, cancelFlush := context.WithTimeout(ctx, flushWindow(a))
	if err := r.outbox.WaitAcked(flushCtx, finishedSeq); err != nil {
		log.Warn("ATC did not acknowledge the step's last events", "err", err)
	} else {
		log.Info("ATC acknowledged the step's end")
	}
	cancelFlush()
	// A person who aborted a step asked for it to stop: it is not kept.
	if res.Result != Aborted {
		r.keepAlive(ctx)
	}
	r.releaseEntrypoint(ctx)
	if cfg.StayUntilTerminated {
		<-ctx.Done()
	}
	return res, nil
}

// flushWindow is how long a finished step waits for the ATC to take its
// last events: at least a minute, longer when the step asked to be kept.
func flushWindow(a *action.Action) time.Duration {
	return max(time.Minute, a.KeepAlive.Duration)
}

func (r *run) emit(ctx context.Context, ev *eventspb.Event) uint64 {
	seq, err := r.outbox.Append(ctx, ev)
	if err != nil {
		r.log.Warn("event dropped", "err", err)
	}
	return seq
}

func (r *run) emitStatus(ctx context.Context, s eventspb.StepStatus, msg string) {
	if name := phaseOf(s); name != "" {
		r.mark(name)
	}
	r.emit(ctx, &eventspb.Event{Payload: &eventspb.Event_Status{Status: &eventspb.StatusChanged{Status: s, Message: msg}}})
}

// phaseOf names the phase a status starts ("": none).
func phaseOf(s eventspb.StepStatus) string {
	switch s {
	case eventspb.StepStatus_STEP_STATUS_INITIALIZING:
		return api.PhaseSidecarStarted
	case eventspb.StepStatus_STEP_STATUS_FETCHING_INPUTS:
		return api.PhaseFetchingInputs
	case eventspb.StepStatus_STEP_STATUS_WAITING:
		return api.PhaseWaitingForTurn
	case eventspb.StepStatus_STEP_STATUS_RUNNING:
		return api.PhaseRunning
	case eventspb.StepStatus_STEP_STATUS_UPLOADING_OUTPUTS:
		return api.PhaseUploadingOutputs
	case eventspb.StepStatus_STEP_STATUS_FINISHED:
		return api.PhaseFinished
	}
	return ""
}

// mark records that the step reached a phase now; a phase reached again
// (inputs fetched after a gated step's go-ahead) keeps its first moment
// and adds the later one.
func (r *run) mark(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.phases = append(r.phases, api.Phase{Name: name, At: time.Now().UTC()})
}

// phasesSoFar is a copy of the step's phases.
func (r *run) phasesSoFar() []api.Phase {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.phases)
}

// usageOf is the container's usage the entrypoint read at the process's
// exit (nil: none could be read).
func usageOf(e *controlpb.Exited) *api.ResourceUsage {
	if e.GetMemoryPeak() <= 0 && e.GetCpuUsageUsec() <= 0 {
		return nil
	}
	return &api.ResourceUsage{MemoryPeakBytes: e.GetMemoryPeak(), CPUSeconds: float64(e.GetCpuUsageUsec()) / 1e6}
}

// dispatch routes the ATC's commands.
func (r *run) dispatch(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case msg := <-r.commands:
			switch m := msg.Msg.(type) {
			case *eventspb.ATCMessage_Abort:
				r.mu.Lock()
				if r.aborted == "" {
					r.aborted = m.Abort.GetReason()
					if r.aborted == "" {
						r.aborted = "aborted"
					}
					close(r.abortCh)
				}
				r.mu.Unlock()
			case *eventspb.ATCMessage_Proceed:
				r.mu.Lock()
				if r.proceed == nil {
					r.proceed = m.Proceed
					close(r.proceedCh)
				}
				r.mu.Unlock()
			case *eventspb.ATCMessage_Release:
				r.mu.Lock()
				if !r.released {
					r.released = true
					close(r.relCh)
				}
				r.mu.Unlock()
			case *eventspb.ATCMessage_SessionOpen:
				r.toEntrypointSession(ctx, m.SessionOpen.GetSessionId(), &controlpb.SidecarCommand{Msg: &controlpb.SidecarCommand_SessionOpen{SessionOpen: m.SessionOpen}})
			case *eventspb.ATCMessage_SessionInput:
				r.toEntrypointSession(ctx, m.SessionInput.GetSessionId(), &controlpb.SidecarCommand{Msg: &controlpb.SidecarCommand_SessionInput{SessionInput: m.SessionInput}})
			case *eventspb.ATCMessage_SessionResize:
				r.toEntrypointSession(ctx, m.SessionResize.GetSessionId(), &controlpb.SidecarCommand{Msg: &controlpb.SidecarCommand_SessionResize{SessionResize: m.SessionResize}})
			case *eventspb.ATCMessage_SessionClose:
				r.toEntrypointSession(ctx, m.SessionClose.GetSessionId(), &controlpb.SidecarCommand{Msg: &controlpb.SidecarCommand_SessionClose{SessionClose: m.SessionClose}})
			}
		}
	}
}

func (r *run) toEntrypointSession(ctx context.Context, id string, cmd *controlpb.SidecarCommand) {
	if err := r.ctl.send(ctx, cmd); err != nil {
		r.sendSessionOutput(ctx, &eventspb.SessionOutput{SessionId: id, Exited: true, ExitStatus: -1, Error: err.Error()})
	}
}

func (r *run) sendSessionOutput(ctx context.Context, out *eventspb.SessionOutput) {
	select {
	case r.sessionOutput <- out:
	case <-ctx.Done():
	}
}

func (r *run) abortReason() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.aborted
}

// execute fetches the inputs, runs the process and stores the outputs.
func (r *run) execute(ctx context.Context) *Result {
	a := r.a
	res := &Result{}
	r.emitStatus(ctx, eventspb.StepStatus_STEP_STATUS_INITIALIZING, "")
	// action.json is stored while the inputs come down and the main
	// container starts, not before: a round trip to the store off the
	// step's start. finish waits for it, so the record is still complete.
	r.goroutine(func() {
		defer close(r.actionWritten)
		if err := r.audit.writeAction(ctx); err != nil {
			r.log.Warn("write action.json", "err", err)
		}
	})

	// Inputs are fetched while the main container starts; a cancelled fetch
	// (abort) stops every transfer.
	fetchCtx, cancelFetch := context.WithCancel(ctx)
	defer cancelFetch()
	r.goroutine(func() {
		select {
		case <-r.abortCh:
			cancelFetch()
		case <-fetchCtx.Done():
		}
	})
	r.emitStatus(ctx, eventspb.StepStatus_STEP_STATUS_FETCHING_INPUTS, fmt.Sprintf("%d inputs, %d caches", len(a.Inputs), len(a.Caches)))
	spanCtx, span := r.cfg.Tracer.Start(fetchCtx, "inputs")
	inputs, caches, err := r.fetchInputs(spanCtx, r.cfg.Artifacts, a.Inputs, a.Caches)
	endSpan(span, err)
	if err == nil && a.Gated {
		var made []Transfer
		made, err = r.awaitTurn(ctx, fetchCtx)
		inputs = append(inputs, made...)
		if ctx.Err() != nil && !r.proceeded() {
			// Its pod stopped before its turn (deleted to make room for a
			// running step): the task declares another at its turn.
			res.Inputs, res.Caches = inputs, caches
			return r.notRun(res, fmt.Sprintf("its pod was stopped before its turn (%v)", context.Cause(ctx)))
		}
	}
	res.Inputs, res.Caches = inputs, caches
	if reason := r.abortReason(); reason != "" {
		if a.Gated && !r.proceeded() {
			return r.notRun(res, reason)
		}
		return r.failBeforeStart(ctx, res, Aborted, reason, 130)
	}
	if err != nil {
		return r.failBeforeStart(ctx, res, Errored, err.Error(), 1)
	}
	r.log.Info("inputs ready", "inputs", len(inputs), "caches", len(caches))
	r.mark(api.PhaseInputsFetched)

	waiting, err := r.waitForEntrypoint(ctx)
	if err != nil {
		return r.failBeforeStart(ctx, res, resultFor(r.abortReason(), Errored), errOr(r.abortReason(), err), 1)
	}
	if a.Idle {
		// Nothing of its own to run: the step is its sessions, for as long
		// as it is kept.
		r.log.Info("idle step: serving sessions")
		r.goroutine(func() { r.forwardSessions(r.bg) })
		res.Result = Succeeded
		return res
	}
	// The milestones are logged at Info: they are few per step, and their
	// timestamps are how a slow step start is taken apart (see docs).
	r.log.Info("starting process", "argv", waiting.GetArgv())
	start := &controlpb.Start{
		Dir:       a.Dir(a.Run.Dir),
		User:      a.Run.User,
		KillGrace: durationpb.New(r.cfg.KillGrace),
	}
	if a.Timeout.Duration > 0 {
		start.Timeout = durationpb.New(a.Timeout.Duration)
	}
	switch {
	case a.Stdin != nil:
		start.Stdin, start.HasStdin = []byte(*a.Stdin), true
	case a.StdinSecret:
		stdin, err := readStdin(r.cfg.StdinFile)
		if err != nil {
			return r.failBeforeStart(ctx, res, Errored, err.Error(), 1)
		}
		start.Stdin, start.HasStdin = stdin, true
	}
	if err := r.ctl.send(ctx, &controlpb.SidecarCommand{Msg: &controlpb.SidecarCommand_Start{Start: start}}); err != nil {
		return r.failBeforeStart(ctx, res, Errored, fmt.Sprintf("start the process: %v", err), 1)
	}
	r.emitStatus(ctx, eventspb.StepStatus_STEP_STATUS_RUNNING, "")

	_, span = r.cfg.Tracer.Start(ctx, "run", trace.WithAttributes(attribute.String("porter.run.path", a.Run.Path)))
	exited, err := r.forwardUntilExit(ctx)
	endSpan(span, err)
	if exited != nil {
		span.SetAttributes(attribute.Int("porter.run.exit_status", int(exited.GetExitStatus())))
	}
	if err != nil {
		res.Result, res.ExitStatus, res.Error = resultFor(r.abortReason(), Errored), -1, errOr(r.abortReason(), err)
		res.EntrypointLost = res.Result == Errored && errors.Is(err, errEntrypointLost)
		return res
	}
	res.ExitStatus, res.TimedOut, res.Signal = exited.GetExitStatus(), exited.GetTimedOut(), exited.GetSignal()
	res.Usage = usageOf(exited)
	switch {
	case exited.GetStartError() != "":
		res.Result, res.Error = Errored, exited.GetStartError()
		if r.response != nil && exited.GetNotFound() {
			res.Error = fmt.Sprintf("the resource type's image has no %s", a.Run.Path)
		}
		return res
	case exited.GetAborted() || r.abortReason() != "":
		res.Result, res.Error = Aborted, errOr(r.abortReason(), errors.New("aborted"))
		return res
	case exited.GetTimedOut():
		res.Result, res.Error = Failed, fmt.Sprintf("timeout %s exceeded", a.Timeout.Duration)
		return res
	case exited.GetOomKilled():
		res.Result, res.OOMKilled, res.Error = Failed, true, entrypoint.OutOfMemoryMessage(exited.GetMemoryLimit())
		return res
	case exited.GetExitStatus() != 0:
		res.Result = Failed
		return res
	}

	if r.response != nil {
		body, err := r.response.Body()
		if err != nil {
			res.Result, res.Error = Errored, err.Error()
			return res
		}
		r.responseBody = body
	}

	r.emitStatus(ctx, eventspb.StepStatus_STEP_STATUS_UPLOADING_OUTPUTS, fmt.Sprintf("%d outputs, %d caches", len(a.Outputs), len(a.Caches)))
	// An abort stops the upload; what was stored is left unreferenced.
	uploadCtx, cancelUpload := context.WithCancel(ctx)
	r.goroutine(func() {
		select {
		case <-r.abortCh:
			cancelUpload()
		case <-uploadCtx.Done():
		}
	})
	spanCtx, span = r.cfg.Tracer.Start(uploadCtx, "outputs")
	outputs, savedCaches, err := r.storeOutputs(spanCtx)
	endSpan(span, err)
	cancelUpload()
	if reason := r.abortReason(); reason != "" {
		res.Result, res.Error = Aborted, reason
		return res
	}
	res.Outputs, res.Caches = outputs, append(res.Caches, savedCaches...)
	if err != nil {
		res.Result, res.Error = Errored, err.Error()
		return res
	}
	r.mark(api.PhaseOutputsUploaded)
	res.Result = Succeeded
	return res
}

// readStdin reads the process's secret stdin.
func readStdin(path string) ([]byte, error) {
	if path == "" {
		return nil, fmt.Errorf("the step's stdin is in its Secret, but %s is not set", action.StdinFileEnvVar)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the step's stdin from its Secret: %w", err)
	}
	return b, nil
}

func resultFor(abortReason string, otherwise StepResult) StepResult {
	if abortReason != "" {
		return Aborted
	}
	return otherwise
}

func errOr(abortReason string, err error) string {
	if abortReason != "" {
		return abortReason
	}
	return err.Error()
}

// awaitTurn holds a gated step (declared ahead of its turn) until the
// server's go-ahead, then fetches the inputs earlier steps made. An abort
// while it waits returns nothing: the step is not to run.
func (r *run) awaitTurn(ctx, fetchCtx context.Context) ([]Transfer, error) {
	r.emitStatus(ctx, eventspb.StepStatus_STEP_STATUS_WAITING, "declared ahead: waiting for its turn")
	r.log.Info("waiting for the go-ahead")
	select {
	case <-r.proceedCh:
	case <-r.abortCh:
		return nil, nil
	case <-ctx.Done():
		return nil, stepError{fmt.Errorf("waiting for the go-ahead: %w", context.Cause(ctx))}
	}
	r.mu.Lock()
	p := r.proceed
	r.mu.Unlock()
	ins, err := turnInputs(r.a.Inputs, p)
	if err != nil {
		return nil, stepError{err}
	}
	r.log.Info("go-ahead", "inputs", len(ins))
	if len(ins) == 0 {
		return nil, nil
	}
	store := r.cfg.Artifacts
	if c := p.GetCredentials(); c != nil {
		if r.cfg.Relogin == nil {
			return nil, stepError{errors.New("the go-ahead brings blobstore credentials, but this sidecar cannot use them")}
		}
		if store, err = r.cfg.Relogin(ctx, Credentials{AccessKey: c.GetAccessKey(), SecretKey: c.GetSecretKey(), SessionToken: c.GetSessionToken()}); err != nil {
			return nil, stepError{err}
		}
	}
	r.emitStatus(ctx, eventspb.StepStatus_STEP_STATUS_FETCHING_INPUTS, fmt.Sprintf("%d inputs made by earlier steps", len(ins)))
	spanCtx, span := r.cfg.Tracer.Start(fetchCtx, "inputs", trace.WithAttributes(attribute.Bool("porter.inputs.made_earlier", true)))
	made, _, err := r.fetchInputs(spanCtx, store, ins, nil)
	endSpan(span, err)
	return made, err
}

// turnInputs are a gated step's inputs that earlier steps made, with the
// keys the go-ahead gives them. An optional input the go-ahead does not
// name was not made: its directory stays empty.
func turnInputs(inputs []action.Input, p *eventspb.Proceed) ([]action.Input, error) {
	given := map[string]*eventspb.ResolvedInput{}
	for _, in := range p.GetInputs() {
		given[in.GetName()] = in
	}
	var out []action.Input
	for _, in := range inputs {
		if in.From == "" {
			continue
		}
		g, ok := given[in.Name]
		if !ok || g.GetKey() == "" {
			if in.Optional {
				continue
			}
			return nil, fmt.Errorf("the go-ahead gives no artifact for input %q (from %q)", in.Name, in.From)
		}
		in.Key, in.Digest = g.GetKey(), g.GetDigest()
		out = append(out, in)
	}
	return out, nil
}

func (r *run) proceeded() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proceed != nil
}

// notRun ends a gated step that was withdrawn before its turn (an earlier
// step failed, the build was aborted): its process never starts, and its
// audit record says why. It shows no error in the build: the step did not
// fail, it never began.
func (r *run) notRun(res *Result, reason string) *Result {
	res.Result, res.Error, res.ExitStatus = Aborted, "not run: "+reason, -1
	r.log.Info("withdrawn before its turn", "reason", reason)
	r.mu.Lock()
	r.failure = &controlpb.Fail{Message: res.Error, ExitStatus: 130}
	r.mu.Unlock()
	return res
}

// failBeforeStart ends a step whose process never ran; the entrypoint is
// told (by releaseEntrypoint) so it exits instead of waiting.
func (r *run) failBeforeStart(ctx context.Context, res *Result, result StepResult, msg string, exit int32) *Result {
	res.Result, res.Error, res.ExitStatus = result, msg, exit
	r.emit(ctx, &eventspb.Event{Payload: &eventspb.Event_Error{Error: &eventspb.Error{Message: msg}}})
	r.mu.Lock()
	r.failure = &controlpb.Fail{Message: msg, ExitStatus: exit}
	r.mu.Unlock()
	return res
}

// waitForEntrypoint waits for the main container's wrapper to attach.
func (r *run) waitForEntrypoint(ctx context.Context) (*controlpb.Waiting, error) {
	for {
		select {
		case msg := <-r.ctl.fromEntrypoint:
			if w := msg.GetWaiting(); w != nil {
				return w, nil
			}
		case <-r.abortCh:
			return nil, errors.New("aborted")
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for the step's entrypoint: %w", ctx.Err())
		}
	}
}

// errEntrypointLost: the step's container stopped under the process, which
// is what an eviction or an OOM kill of the entrypoint looks like from here.
var errEntrypointLost = errors.New("the step's entrypoint went away before the process exited")

// forwardUntilExit turns the process's output into events until it exits.
func (r *run) forwardUntilExit(ctx context.Context) (*controlpb.Exited, error) {
	abort := r.abortCh
	for {
		select {
		case msg := <-r.ctl.fromEntrypoint:
			switch m := msg.Msg.(type) {
			case *controlpb.EntrypointMessage_Output:
				if r.response != nil && m.Output.GetStream() == eventspb.Stream_STREAM_STDOUT {
					r.response.Write(m.Output.GetData())
					continue
				}
				r.emit(ctx, &eventspb.Event{Time: m.Output.GetTime(), Payload: &eventspb.Event_Output{
					Output: &eventspb.Output{Stream: m.Output.GetStream(), Data: m.Output.GetData()}}})
			case *controlpb.EntrypointMessage_SessionOutput:
				r.sendSessionOutput(ctx, m.SessionOutput)
			case *controlpb.EntrypointMessage_Exited:
				e := m.Exited
				r.log.Info("process exited", "exit_status", e.GetExitStatus(), "memory_peak", e.GetMemoryPeak(), "cpu_usage_usec", e.GetCpuUsageUsec())
				r.mark(api.PhaseProcessExited)
				r.emit(ctx, &eventspb.Event{Time: timestamppb.Now(), Payload: &eventspb.Event_ProcessExited{ProcessExited: &eventspb.ProcessExited{
					ExitStatus: e.GetExitStatus(), Signal: e.GetSignal(), TimedOut: e.GetTimedOut(), Aborted: e.GetAborted(),
					OomKilled: e.GetOomKilled(), MemoryLimit: e.GetMemoryLimit(), MemoryPeak: e.GetMemoryPeak(), CpuUsageUsec: e.GetCpuUsageUsec()}}})
				r.goroutine(func() { r.forwardSessions(r.bg) })
				return e, nil
			}
		case <-abort:
			abort = nil
			if err := r.ctl.send(ctx, &controlpb.SidecarCommand{Msg: &controlpb.SidecarCommand_Abort{Abort: &controlpb.Abort{Reason: r.abortReason()}}}); err != nil {
				return nil, fmt.Errorf("abort the process: %w", err)
			}
		case <-r.ctl.detached():
			return nil, errEntrypointLost
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// forwardSessions keeps relaying intercept output after the process
// exited, until Run returns (ctx is the run's background context).
func (r *run) forwardSessions(ctx context.Context) {
	for {
		select {
		case msg := <-r.ctl.fromEntrypoint:
			if s := msg.GetSessionOutput(); s != nil {
				r.sendSessionOutput(ctx, s)
			}
		case <-ctx.Done():
			return
		}
	}
}

// fetchInputs downloads every input and restores every cache, in parallel.
func (r *run) fetchInputs(ctx context.Context, store Artifacts, ins []action.Input, cs []action.Cache) ([]Transfer, []Transfer, error) {
	a := r.a
	inputs := make([]Transfer, len(ins))
	caches := make([]Transfer, len(cs))
	g, gctx := errgroup.WithContext(ctx)
	for i, in := range ins {
		dir := a.Dir(in.Path)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, nil, stepError{fmt.Errorf("create input directory %q: %w", in.Path, err)}
		}
		if in.Key == "" {
			continue // optional and not provided
		}
		g.Go(func() error {
			t, err := r.transfer(gctx, fmt.Sprintf("input %q", in.Name), in.Name, func(ctx context.Context) (Artifact, error) {
				return store.Download(ctx, in.Key, in.Digest, dir)
			})
			if err != nil {
				return err
			}
			inputs[i] = t
			r.emit(ctx, &eventspb.Event{Payload: &eventspb.Event_InputFetched{InputFetched: &eventspb.InputFetched{
				Name: in.Name, Key: t.Key, Size: t.Size, Digest: t.Digest}}})
			return nil
		})
	}
	for i, c := range cs {
		dir := a.Dir(c.Path)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, nil, stepError{fmt.Errorf("create cache directory %q: %w", c.Path, err)}
		}
		g.Go(func() error {
			ok, err := r.cfg.Artifacts.Exists(gctx, c.Key)
			if err != nil {
				return fmt.Errorf("look up cache %q: %w", c.Path, err)
			}
			if !ok {
				return nil // the first run of this step: an empty cache
			}
			t, err := r.transfer(gctx, fmt.Sprintf("restore cache %q", c.Path), c.Path, func(ctx context.Context) (Artifact, error) {
				return r.cfg.Artifacts.Download(ctx, c.Key, "", dir)
			})
			caches[i] = t
			return err
		})
	}
	err := g.Wait()
	return compact(inputs), compact(caches), err
}

// storeOutputs uploads every output and saves every cache, in parallel.
func (r *run) storeOutputs(ctx context.Context) ([]Transfer, []Transfer, error) {
	a := r.a
	outputs := make([]Transfer, len(a.Outputs))
	caches := make([]Transfer, len(a.Caches))
	g, gctx := errgroup.WithContext(ctx)
	for i, out := range a.Outputs {
		g.Go(func() error {
			t, err := r.transfer(gctx, fmt.Sprintf("upload output %q", out.Name), out.Name, func(ctx context.Context) (Artifact, error) {
				return r.cfg.Artifacts.Upload(ctx, a.Dir(out.Path))
			})
			if err != nil {
				return err
			}
			outputs[i] = t
			r.emit(ctx, &eventspb.Event{Payload: &eventspb.Event_OutputUploaded{OutputUploaded: &eventspb.ArtifactUploaded{
				Name: out.Name, Key: t.Key, Size: t.Size, Digest: t.Digest}}})
			return nil
		})
	}
	for i, c := range a.Caches {
		g.Go(func() error {
			t, err := r.transfer(gctx, fmt.Sprintf("save cache %q", c.Path), c.Path, func(ctx context.Context) (Artifact, error) {
				return r.cfg.Artifacts.UploadTo(ctx, a.Dir(c.Path), c.Key)
			})
			if err != nil {
				return err
			}
			caches[i] = t
			r.emit(ctx, &eventspb.Event{Payload: &eventspb.Event_OutputUploaded{OutputUploaded: &eventspb.ArtifactUploaded{
				Name: c.Path, Key: t.Key, Size: t.Size, Digest: t.Digest, Cache: true}}})
			return nil
		})
	}
	err := g.Wait()
	return compact(outputs), compact(caches), err
}

// transfer moves one artifact, named name in the step's record, retrying the
// whole transfer with backoff: the store's own retries cover short blips,
// this covers a store that is away for longer. Errors say what was moved.
func (r *run) transfer(ctx context.Context, what, name string, do func(context.Context) (Artifact, error)) (Transfer, error) {
	ctx, span := r.cfg.Tracer.Start(ctx, "transfer "+what)
	t, err := r.transferRetrying(ctx, what, name, do)
	span.SetAttributes(attribute.Int64("porter.artifact.bytes", t.Size), attribute.Float64("porter.artifact.seconds", t.Seconds))
	endSpan(span, err)
	return t, err
}

// endSpan ends span, marked as failed by err if any.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func (r *run) transferRetrying(ctx context.Context, what, name string, do func(context.Context) (Artifact, error)) (Transfer, error) {
	deadline := time.Now().Add(r.cfg.TransferRetry)
	for attempt := 1; ; attempt++ {
		delay := jitteredDelay(attempt-1, 500*time.Millisecond, 10*time.Second, rand.Float64)
		start := time.Now()
		art, err := do(ctx)
		if err == nil {
			return Transfer{Name: name, Key: art.Key, Size: art.Size, Digest: art.Digest, Seconds: time.Since(start).Seconds()}, nil
		}
		if !retryable(err) || ctx.Err() != nil || time.Now().Add(delay).After(deadline) {
			return Transfer{}, fmt.Errorf("%s: %w", what, err)
		}
		r.log.Warn("transfer failed; retrying", "what", what, "attempt", attempt, "err", err, "in", delay)
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return Transfer{}, fmt.Errorf("%s: %w", what, err)
		}
	}
}

func compact(ts []Transfer) []Transfer {
	out := ts[:0]
	for _, t := range ts {
		if t.Key != "" {
			out = append(out, t)
		}
	}
	return out
}

// finish writes the audit record and reports the end of the step; it returns
// the finish event's sequence number.
func (r *run) finish(ctx context.Context, res *Result) uint64 {
	fin := &eventspb.StepFinished{Result: resultEvent(res.Result), ExitStatus: res.ExitStatus, Error: res.Error,
		OomKilled: res.OOMKilled, EntrypointLost: res.EntrypointLost}
	if res.Result == Succeeded {
		fin.Response = r.responseBody
	}
	for _, o := range res.Outputs {
		fin.Outputs = append(fin.Outputs, &eventspb.ArtifactUploaded{Name: o.Name, Key: o.Key, Size: o.Size, Digest: o.Digest})
	}
	r.emitStatus(ctx, eventspb.StepStatus_STEP_STATUS_FINISHED, string(res.Result))
	select {
	case <-r.actionWritten:
	case <-ctx.Done():
	}
	res.Phases = r.phasesSoFar()
	key, err := r.audit.writeResult(ctx, res)
	if err != nil {
		r.log.Error("write audit record", "err", err)
	}
	fin.AuditKey = key
	return r.emit(ctx, &eventspb.Event{Payload: &eventspb.Event_StepFinished{StepFinished: fin}})
}

// keepAlive holds the finished step for intercept until the ATC releases it
// or the step's keep-alive window ends.
func (r *run) keepAlive(ctx context.Context) {
	window := r.a.KeepAlive.Duration
	if window <= 0 {
		return
	}
	r.log.Info("step finished; staying interceptible", "for", window)
	select {
	case <-r.relCh:
	case <-time.After(window):
	case <-ctx.Done():
	}
}

// releaseEntrypoint lets the wrapper exit with the process's code (or tells
// it the step cannot run) and waits for it to go. An entrypoint that has not
// attached yet is waited for: leaving first would strand it. If its image
// never starts, the ATC deletes the pod, which ends ctx.
func (r *run) releaseEntrypoint(ctx context.Context) {
	select {
	case <-r.ctl.ready:
	case <-ctx.Done():
		return
	}
	r.mu.Lock()
	cmd := &controlpb.SidecarCommand{Msg: &controlpb.SidecarCommand_Release{Release: &controlpb.Release{}}}
	if r.failure != nil {
		cmd = &controlpb.SidecarCommand{Msg: &controlpb.SidecarCommand_Fail{Fail: r.failure}}
	}
	r.mu.Unlock()
	sendCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	gone := r.ctl.detached()
	if err := r.ctl.send(sendCtx, cmd); err != nil {
		return
	}
	select {
	case <-gone:
	case <-sendCtx.Done():
	}
}
