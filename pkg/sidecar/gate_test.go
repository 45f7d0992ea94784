package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/sidecar/controlpb"
	"github.com/porter-ci/porter/pkg/sidecar/entrypoint"
)

// gateATC takes a step's stream and acknowledges every event at once;
// when the step says it waits for its turn, it answers with its one
// command (a go-ahead or an abort), or calls noAnswer. It keeps the
// events it saw.
type gateATC struct {
	eventspb.UnimplementedStepStreamServer
	answer   *eventspb.ATCMessage
	noAnswer func()

	mu     sync.Mutex
	events []*eventspb.Event
}

func (g *gateATC) Connect(stream grpc.BidiStreamingServer[eventspb.SidecarMessage, eventspb.ATCMessage]) error {
	if _, err := stream.Recv(); err != nil { // hello
		return err
	}
	if err := stream.Send(ack(0)); err != nil {
		return err
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			return nil
		}
		ev := msg.GetEvent()
		if ev == nil {
			continue
		}
		g.mu.Lock()
		g.events = append(g.events, ev)
		g.mu.Unlock()
		if err := stream.Send(ack(ev.GetSeq())); err != nil {
			return err
		}
		if ev.GetStatus().GetStatus() == eventspb.StepStatus_STEP_STATUS_WAITING {
			if g.answer == nil {
				g.noAnswer()
				continue
			}
			if err := stream.Send(g.answer); err != nil {
				return err
			}
		}
	}
}

func (g *gateATC) seen() []*eventspb.Event {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.events)
}

// recordedArtifacts downloads nothing but notes which keys were asked
// for, and with which credentials; it keeps the audit objects.
type recordedArtifacts struct {
	noArtifacts
	creds string

	mu        *sync.Mutex
	downloads *[]string
	audit     map[string][]byte
}

func (a recordedArtifacts) Download(_ context.Context, key, digest, _ string) (Artifact, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	*a.downloads = append(*a.downloads, a.creds+":"+key)
	return Artifact{Key: key, Digest: digest, Size: 1}, nil
}

func (a recordedArtifacts) PutAudit(_ context.Context, key string, body []byte, _ string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.audit[key] = body
	return nil
}

type gateRun struct {
	res       *Result
	atc       *gateATC
	started   chan *fakeProcess
	exit      chan int
	downloads func() []string
	result    func() map[string]any
}

// runGated runs a gated step whose ATC answers its waiting with answer
// (nil: its pod is stopped instead, as the kubelet's SIGTERM would); the
// step's process, if it starts, exits 0 at once.
func runGated(t *testing.T, a *action.Action, answer *eventspb.ATCMessage) gateRun {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	ctx, stop := context.WithCancelCause(tctx)
	atc := &gateATC{answer: answer, noAnswer: func() { stop(errors.New("terminated signal received")) }}
	gs := grpc.NewServer()
	eventspb.RegisterStepStreamServer(gs, atc)
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(ln) }()
	t.Cleanup(func() { gs.Stop(); <-served })

	sock := filepath.Join(t.TempDir(), "control.sock")
	// The process ends as soon as it starts, having used what the
	// entrypoint read from its cgroup; started says it did.
	spy := make(chan *fakeProcess, 1)
	started := make(chan *fakeProcess, 1)
	forwarded := make(chan struct{})
	go func() {
		defer close(forwarded)
		for p := range spy {
			started <- p
			p.exit(&controlpb.Exited{ExitStatus: 0, MemoryPeak: 5 << 20, CpuUsageUsec: 1500})
		}
	}()
	t.Cleanup(func() { close(spy); <-forwarded })
	runner := &fakeRunner{started: spy}
	ep := entrypoint.NewEntrypointer(entrypoint.EntrypointConfig{Argv: []string{"/bin/true"}}, entrypoint.SocketWaiter(sock), runner)
	exit := make(chan int, 1)
	// Without an answer the pod is stopped, its step container with it:
	// no entrypoint runs.
	if answer != nil {
		go func() { exit <- ep.Run(ctx) }()
	}

	var mu sync.Mutex
	var downloads []string
	audit := map[string][]byte{}
	store := recordedArtifacts{creds: "pod", mu: &mu, downloads: &downloads, audit: audit}
	res, err := Run(ctx, Config{Action: a, ATC: ATCConfig{Address: ln.Addr().String(), Token: "t"}, SocketPath: sock,
		JournalDir: t.TempDir(), Artifacts: store,
		Relogin: func(_ context.Context, c Credentials) (Artifacts, error) {
			again := store
			again.creds = c.AccessKey
			return again, nil
		}})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return gateRun{res: res, atc: atc, started: started, exit: exit,
		downloads: func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(downloads) },
		result: func() map[string]any {
			mu.Lock()
			defer mu.Unlock()
			for k, body := range audit {
				if strings.HasSuffix(k, "result.json") {
					var r map[string]any
					if err := json.Unmarshal(body, &r); err != nil {
						t.Fatalf("result.json: %v", err)
					}
					return r
				}
			}
			t.Fatalf("no result.json among the audit objects %v", slices.Collect(mapKeys(audit)))
			return nil
		}}
}

func mapKeys(m map[string][]byte) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func gatedAction() *action.Action {
	return &action.Action{StepID: "gated-1", Build: action.Build{ID: "1", Team: "main"}, StepName: "t", Type: action.KindTask,
		Run: action.Run{Path: "/bin/true"}, WorkDir: "/tmp/build/x", ATCLinkInsecure: true, Gated: true,
		Inputs: []action.Input{
			{Name: "src", Path: "src", Key: "artifacts/src"},
			{Name: "made", Path: "made", From: "made"},
			{Name: "never", Path: "never", From: "never", Optional: true},
		}}
}

// A gated step fetches the inputs it knows, says it waits, and starts only
// with the go-ahead, fetching then what the go-ahead names with the
// go-ahead's credentials.
func TestGatedStepStartsWithTheGoAhead(t *testing.T) {
	proceed := &eventspb.ATCMessage{Msg: &eventspb.ATCMessage_Proceed{Proceed: &eventspb.Proceed{
		Inputs:      []*eventspb.ResolvedInput{{Name: "made", Key: "artifacts/made", Digest: "blake3:00"}},
		Credentials: &eventspb.BlobstoreCredentials{AccessKey: "turn", SecretKey: "s"},
	}}}
	run := runGated(t, gatedAction(), proceed)
	if run.res.Result != Succeeded {
		t.Fatalf("result %+v, want succeeded", run.res)
	}
	if got, want := run.downloads(), []string{"pod:artifacts/src", "turn:artifacts/made"}; !slices.Equal(got, want) {
		t.Errorf("downloads %v, want %v (the known input first with the pod's credentials, the made one after the go-ahead with its)", got, want)
	}
	var statuses []eventspb.StepStatus
	for _, ev := range run.atc.seen() {
		if s := ev.GetStatus(); s != nil {
			statuses = append(statuses, s.GetStatus())
		}
	}
	waiting := slices.Index(statuses, eventspb.StepStatus_STEP_STATUS_WAITING)
	running := slices.Index(statuses, eventspb.StepStatus_STEP_STATUS_RUNNING)
	if waiting < 0 || running < waiting {
		t.Errorf("statuses %v: want waiting, then running", statuses)
	}
	var keys []string
	for _, in := range run.res.Inputs {
		keys = append(keys, in.Key)
	}
	slices.Sort(keys)
	if want := []string{"artifacts/made", "artifacts/src"}; !slices.Equal(keys, want) {
		t.Errorf("result's inputs %v, want %v", keys, want)
	}
}

// The audit record of a step that ran holds its moments, in the order it
// passed them, and what its container used.
func TestResultRecordsPhasesAndUsage(t *testing.T) {
	proceed := &eventspb.ATCMessage{Msg: &eventspb.ATCMessage_Proceed{Proceed: &eventspb.Proceed{
		Inputs:      []*eventspb.ResolvedInput{{Name: "made", Key: "artifacts/made", Digest: "blake3:00"}},
		Credentials: &eventspb.BlobstoreCredentials{AccessKey: "turn", SecretKey: "s"},
	}}}
	run := runGated(t, gatedAction(), proceed)
	if run.res.Result != Succeeded {
		t.Fatalf("result %+v, want succeeded", run.res)
	}
	body, err := json.Marshal(run.result())
	if err != nil {
		t.Fatal(err)
	}
	var rec api.StepRecord
	if err := json.Unmarshal(body, &rec); err != nil {
		t.Fatal(err)
	}
	var names []string
	for i, p := range rec.Phases {
		names = append(names, p.Name)
		if i > 0 && p.At.Before(rec.Phases[i-1].At) {
			t.Errorf("phase %s at %s is before %s at %s", p.Name, p.At, rec.Phases[i-1].Name, rec.Phases[i-1].At)
		}
	}
	want := []string{api.PhaseSidecarStarted, api.PhaseFetchingInputs, api.PhaseWaitingForTurn, api.PhaseFetchingInputs,
		api.PhaseInputsFetched, api.PhaseRunning, api.PhaseProcessExited, api.PhaseUploadingOutputs, api.PhaseOutputsUploaded, api.PhaseFinished}
	if !slices.Equal(names, want) {
		t.Errorf("phases %v, want %v", names, want)
	}
	if u := rec.Usage; u == nil || u.MemoryPeakBytes != 5<<20 || u.CPUSeconds != 0.0015 {
		t.Errorf("usage %+v, want 5 MiB peak and 0.0015 s of CPU", u)
	}
}

// A gated step withdrawn before its turn never starts its process, shows
// no error, and its audit record says why it did not run.
func TestGatedStepAbortedBeforeItsTurnDoesNotRun(t *testing.T) {
	abort := &eventspb.ATCMessage{Msg: &eventspb.ATCMessage_Abort{Abort: &eventspb.Abort{Reason: "an earlier step failed"}}}
	run := runGated(t, gatedAction(), abort)
	if run.res.Result != Aborted || run.res.Error != "not run: an earlier step failed" {
		t.Fatalf("result %+v, want aborted, not run", run.res)
	}
	select {
	case <-run.started:
		t.Fatal("the process started")
	default:
	}
	if got := run.downloads(); slices.Contains(got, "turn:artifacts/made") || slices.Contains(got, "pod:artifacts/made") {
		t.Errorf("downloads %v: the input made by an earlier step was fetched", got)
	}
	for _, ev := range run.atc.seen() {
		if e := ev.GetError(); e != nil {
			t.Errorf("error event %q: a step that never began shows no error", e.GetMessage())
		}
	}
	if r := run.result(); r["result"] != "ABORTED" || r["error"] != "not run: an earlier step failed" {
		t.Errorf("result.json %v: want ABORTED, not run: an earlier step failed", r)
	}
	select {
	case code := <-run.exit:
		if code == 0 {
			t.Errorf("entrypoint exit 0 for a step that did not run")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the entrypoint was not released")
	}
}

// A gated pod stopped before its turn (deleted to make room for a running
// step) records that it did not run, and shows no error in the build.
func TestGatedStepStoppedBeforeItsTurnDoesNotRun(t *testing.T) {
	run := runGated(t, gatedAction(), nil)
	if run.res.Result != Aborted || !strings.HasPrefix(run.res.Error, "not run: its pod was stopped before its turn") {
		t.Fatalf("result %+v, want aborted, not run", run.res)
	}
	select {
	case <-run.started:
		t.Fatal("the process started")
	default:
	}
	for _, ev := range run.atc.seen() {
		if e := ev.GetError(); e != nil {
			t.Errorf("error event %q: a step that never began shows no error", e.GetMessage())
		}
	}
}

// The go-ahead must give every input it is to give: one it leaves out
// errors the step rather than running it without.
func TestGatedStepErrorsWhenTheGoAheadLacksAnInput(t *testing.T) {
	proceed := &eventspb.ATCMessage{Msg: &eventspb.ATCMessage_Proceed{Proceed: &eventspb.Proceed{}}}
	run := runGated(t, gatedAction(), proceed)
	if run.res.Result != Errored || !strings.Contains(run.res.Error, `no artifact for input "made"`) {
		t.Fatalf("result %+v, want errored naming the input", run.res)
	}
	select {
	case <-run.started:
		t.Fatal("the process started")
	default:
	}
}
