package inpod_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/auditseal"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/stepserver"
	"github.com/porter-ci/porter/pkg/steptoken"
	"github.com/porter-ci/porter/test/stepproc"
	"github.com/porter-ci/porter/test/testenv"
)

// testATC plays the ATC: the real step stream server on a fixed loopback
// address, with an in-memory event store that outlives server restarts (as
// a real ATC's durable store would).
type testATC struct {
	addr string
	sink *stepserver.MemorySink
	keys *steptoken.Keyring

	mu  sync.Mutex
	srv *stepserver.Server
	gs  *grpc.Server
}

func startATC() *testATC {
	key, err := steptoken.NewKey()
	Expect(err).NotTo(HaveOccurred())
	keys, err := steptoken.NewKeyring(key)
	Expect(err).NotTo(HaveOccurred())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	t := &testATC{addr: ln.Addr().String(), sink: stepserver.NewMemorySink(), keys: keys}
	t.serveOn(ln)
	DeferCleanup(t.kill)
	return t
}

func (t *testATC) serveOn(ln net.Listener) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.srv = stepserver.New(t.sink, t.keys, slog.New(slog.NewTextHandler(GinkgoWriter, nil)))
	t.gs = grpc.NewServer()
	t.srv.Register(t.gs)
	go t.gs.Serve(ln)
}

// kill stops the server abruptly, cutting every stream.
func (t *testATC) kill() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gs != nil {
		t.gs.Stop()
		t.gs = nil
	}
}

// restart brings a fresh server up on the same address.
func (t *testATC) restart() {
	var ln net.Listener
	Eventually(func() error {
		var err error
		ln, err = net.Listen("tcp", t.addr)
		return err
	}).WithTimeout(10 * time.Second).Should(Succeed())
	t.serveOn(ln)
}

func (t *testATC) server() *stepserver.Server {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.srv
}

func (t *testATC) token(stepID string) string {
	tok, err := t.keys.Mint(stepID, time.Hour)
	Expect(err).NotTo(HaveOccurred())
	return tok
}

// waitFinished waits for the step's StepFinished event.
func (t *testATC) waitFinished(stepID string, within time.Duration) ([]*eventspb.Event, *eventspb.StepFinished) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	evs, err := t.sink.Wait(ctx, stepID, func(evs []*eventspb.Event) bool { return finishedOf(evs) != nil })
	Expect(err).NotTo(HaveOccurred(), "step %s did not finish; events so far:\n%s", stepID, describe(evs))
	return evs, finishedOf(evs)
}

// waitFor waits until some event matches.
func (t *testATC) waitFor(stepID string, within time.Duration, match func(*eventspb.Event) bool) []*eventspb.Event {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	evs, err := t.sink.Wait(ctx, stepID, func(evs []*eventspb.Event) bool {
		for _, e := range evs {
			if match(e) {
				return true
			}
		}
		return false
	})
	Expect(err).NotTo(HaveOccurred(), "events so far:\n%s", describe(evs))
	return evs
}

func finishedOf(evs []*eventspb.Event) *eventspb.StepFinished {
	for _, e := range evs {
		if f := e.GetStepFinished(); f != nil {
			return f
		}
	}
	return nil
}

func exitedOf(evs []*eventspb.Event) *eventspb.ProcessExited {
	for _, e := range evs {
		if x := e.GetProcessExited(); x != nil {
			return x
		}
	}
	return nil
}

func stdoutOf(evs []*eventspb.Event) string {
	var b strings.Builder
	for _, e := range evs {
		if o := e.GetOutput(); o != nil && o.GetStream() == eventspb.Stream_STREAM_STDOUT {
			b.Write(o.GetData())
		}
	}
	return b.String()
}

func describe(evs []*eventspb.Event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "  %d %v\n", e.GetSeq(), e.GetPayload())
	}
	return b.String()
}

// stepRun is one step run as a pod would run it.
type stepRun struct {
	*stepproc.Step
	action      *action.Action
	sidecarLog  *testenv.Buffer
	entryStdout *testenv.Buffer
	entryStderr *testenv.Buffer
}

type stepOptions struct {
	blob  blobstore.Config
	token string // default: a valid token
}

var stepCounter int

// newAction returns a task action whose work dir is a fresh temp dir.
func newAction(name string, argv ...string) *action.Action {
	stepCounter++
	root := GinkgoT().TempDir()
	return &action.Action{
		StepID:   fmt.Sprintf("%s-%d-%d", name, GinkgoParallelProcess(), stepCounter),
		Build:    action.Build{ID: fmt.Sprintf("b%d", stepCounter), Team: "main"},
		StepName: name,
		Type:     "task",
		Image:    "host",
		Run:      action.Run{Path: argv[0], Args: argv[1:]},
		WorkDir:  filepath.Join(root, "build"),
		// The harness's ATC serves plain gRPC on loopback.
		ATCLinkInsecure: true,
	}
}

// runStep starts both processes of a step.
func runStep(atc *testATC, a *action.Action, opts stepOptions) *stepRun {
	Expect(a.Validate()).To(Succeed())
	token := opts.token
	if token == "" {
		token = atc.token(a.StepID)
	}
	r := &stepRun{action: a, sidecarLog: &testenv.Buffer{Tee: GinkgoWriter}, entryStdout: &testenv.Buffer{Tee: GinkgoWriter}, entryStderr: &testenv.Buffer{Tee: GinkgoWriter}}
	step, err := stepproc.Start(stepproc.Options{
		Porter: porterBin, Action: a, ATCAddress: atc.addr, Token: token, Blobstore: opts.blob,
		Root: GinkgoT().TempDir(), EntrypointEnv: []string{"STEP_ENV=from-container"},
		Stdout: r.entryStdout, Stderr: r.entryStderr, SidecarLog: r.sidecarLog,
	})
	Expect(err).NotTo(HaveOccurred())
	r.Step = step
	DeferCleanup(step.Kill)
	return r
}

// wait waits for both processes to exit and returns the entrypoint's exit code.
func (r *stepRun) wait(within time.Duration) int {
	Eventually(r.EntrypointDone).WithTimeout(within).Should(BeClosed(), "entrypoint still running; stderr:\n%s", r.entryStderr.String())
	Eventually(r.SidecarDone).WithTimeout(within).Should(BeClosed(), "sidecar still running; log:\n%s", r.sidecarLog.String())
	Expect(r.Sidecar.ProcessState.ExitCode()).To(Equal(0), "sidecar log:\n%s", r.sidecarLog.String())
	return r.Entrypoint.ProcessState.ExitCode()
}

// stepRecord seals a step's audit record, as the ATC does once the step
// has ended, and reads its result.json back.
func stepRecord(ctx context.Context, store blobstore.Store, a *action.Action) map[string]any {
	_, err := auditseal.Sealer{Staging: store, Audit: store}.Seal(ctx, a.StepID)
	Expect(err).NotTo(HaveOccurred())
	rc, _, err := store.Get(ctx, blobstore.StepPrefix(a.Build.ID, a.StepID)+blobstore.ResultObject)
	Expect(err).NotTo(HaveOccurred())
	defer rc.Close()
	var rec map[string]any
	Expect(json.NewDecoder(rc).Decode(&rec)).To(Succeed())
	return rec
}
