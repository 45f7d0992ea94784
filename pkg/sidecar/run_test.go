package sidecar

import (
	"context"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/sidecar/controlpb"
	"github.com/porter-ci/porter/pkg/sidecar/entrypoint"
)

func ack(seq uint64) *eventspb.ATCMessage {
	return &eventspb.ATCMessage{Msg: &eventspb.ATCMessage_Ack{Ack: &eventspb.Ack{Seq: seq}}}
}

// noArtifacts stores audit objects nowhere; the step moves no artifacts.
type noArtifacts struct{ Artifacts }

func (noArtifacts) PutAudit(context.Context, string, []byte, string) error { return nil }
func (noArtifacts) Exists(context.Context, string) (bool, error)           { return false, nil }

// fakeRunner is the entrypoint's Runner for the sidecar's tests: it starts
// no process, but hands the test a fakeProcess to end.
type fakeRunner struct {
	started chan *fakeProcess
}

func (r *fakeRunner) Start([]string, *controlpb.Start, entrypoint.OutputFunc) (entrypoint.Process, error) {
	p := &fakeProcess{done: make(chan struct{})}
	r.started <- p
	return p, nil
}

// fakeProcess ends when the test says, or on Stop as a process that obeys
// TERM, marking why it was stopped as the real one does.
type fakeProcess struct {
	done   chan struct{}
	once   sync.Once
	exited *controlpb.Exited
}

func (p *fakeProcess) Done() <-chan struct{}     { return p.done }
func (p *fakeProcess) Exited() *controlpb.Exited { <-p.done; return p.exited }
func (p *fakeProcess) exit(e *controlpb.Exited) {
	p.once.Do(func() { p.exited = e; close(p.done) })
}

func (p *fakeProcess) Stop(_ time.Duration, why entrypoint.StopReason) {
	p.exit(&controlpb.Exited{ExitStatus: 143, Signal: "terminated",
		Aborted: why == entrypoint.StopAborted, TimedOut: why == entrypoint.StopTimedOut})
}

// An idle step's sidecar, released by its entrypoint's exit while its
// context is still live, has ended every goroutine it started (the session
// forwarder among them) when Run returns.
func TestRunReturnsOnlyAfterItsGoroutinesEnded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	eventspb.RegisterStepStreamServer(gs, &gateATC{})
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(ln) }()
	defer func() { gs.Stop(); <-served }()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sock := filepath.Join(t.TempDir(), "control.sock")
	ep := entrypoint.NewEntrypointer(entrypoint.EntrypointConfig{Argv: []string{"/bin/idle"}}, entrypoint.SocketWaiter(sock),
		&fakeRunner{started: make(chan *fakeProcess, 1)})
	exit := make(chan int, 1)
	go func() { exit <- ep.Run(ctx) }()

	res, err := Run(ctx, Config{Action: &action.Action{StepID: "s", Idle: true, ATCLinkInsecure: true},
		ATC: ATCConfig{Address: ln.Addr().String(), Token: "t"}, SocketPath: sock, JournalDir: t.TempDir(),
		Artifacts: noArtifacts{}})
	if err != nil || res.Result != Succeeded {
		t.Fatalf("Run = %+v, %v; want succeeded", res, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("Run returned only when its context ended: %v", ctx.Err())
	}
	select {
	case code := <-exit:
		if code != 0 {
			t.Errorf("entrypoint exit %d, want 0", code)
		}
	case <-ctx.Done():
		t.Fatal("the entrypoint was not released")
	}
	gs.Stop()
	<-served
	goleak.VerifyNone(t)
}
