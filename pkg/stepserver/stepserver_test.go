package stepserver_test

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/stepserver"
	"github.com/porter-ci/porter/pkg/steptoken"
)

// serve runs a real gRPC server on loopback and returns a client.
func serve(t *testing.T, sink stepserver.Sink, keys *steptoken.Keyring) (eventspb.StepStreamClient, *stepserver.Server) {
	t.Helper()
	srv := stepserver.New(sink, keys, slog.New(slog.DiscardHandler))
	return listen(t, srv), srv
}

// listen serves srv over real gRPC on a loopback port and returns a client.
func listen(t *testing.T, srv *stepserver.Server, opts ...grpc.ServerOption) eventspb.StepStreamClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(opts...)
	srv.Register(gs)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return eventspb.NewStepStreamClient(conn)
}

// connectStep opens a stream for step and waits for the server's answer to
// its hello.
func connectStep(ctx context.Context, t *testing.T, client eventspb.StepStreamClient, keys *steptoken.Keyring, step string) eventspb.StepStream_ConnectClient {
	t.Helper()
	token, _ := keys.Mint(step, time.Hour)
	stream, err := client.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(hello(step, token))
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	return stream
}

func keyring(t *testing.T) *steptoken.Keyring {
	key, _ := steptoken.NewKey()
	k, err := steptoken.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func hello(step, token string) *eventspb.SidecarMessage {
	return &eventspb.SidecarMessage{Msg: &eventspb.SidecarMessage_Hello{Hello: &eventspb.Hello{StepId: step, Token: token, FirstUnackedSeq: 1}}}
}

func event(seq uint64, text string) *eventspb.SidecarMessage {
	return &eventspb.SidecarMessage{Msg: &eventspb.SidecarMessage_Event{Event: &eventspb.Event{Seq: seq,
		Payload: &eventspb.Event_Output{Output: &eventspb.Output{Stream: eventspb.Stream_STREAM_STDOUT, Data: []byte(text)}}}}}
}

func TestRefusesBadTokens(t *testing.T) {
	keys := keyring(t)
	client, _ := serve(t, stepserver.NewMemorySink(), keys)
	other := keyring(t)
	forged, _ := other.Mint("step-a", time.Hour)
	expired, _ := keys.Mint("step-a", -time.Second)
	otherStep, _ := keys.Mint("step-b", time.Hour)
	for name, token := range map[string]string{"forged": forged, "expired": expired, "other step's": otherStep, "empty": ""} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stream, err := client.Connect(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := stream.Send(hello("step-a", token)); err != nil {
				t.Fatal(err)
			}
			_, err = stream.Recv()
			if status.Code(err) != codes.Unauthenticated {
				t.Fatalf("Recv = %v, want Unauthenticated", err)
			}
		})
	}
}

func TestStoresEachEventOnceAndAcks(t *testing.T) {
	keys := keyring(t)
	sink := stepserver.NewMemorySink()
	client, _ := serve(t, sink, keys)
	token, _ := keys.Mint("step-a", time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	connect := func() (eventspb.StepStream_ConnectClient, uint64) {
		stream, err := client.Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(hello("step-a", token)); err != nil {
			t.Fatal(err)
		}
		first, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return stream, first.GetAck().GetSeq()
	}

	stream, resume := connect()
	if resume != 0 {
		t.Fatalf("fresh step resumes at %d", resume)
	}
	for seq := uint64(1); seq <= 3; seq++ {
		if err := stream.Send(event(seq, "x")); err != nil {
			t.Fatal(err)
		}
	}
	var acked uint64
	for acked < 3 {
		msg, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		acked = msg.GetAck().GetSeq()
	}
	stream.CloseSend()

	// A reconnecting sidecar resends 2..4: only 4 is new.
	stream, resume = connect()
	if resume != 3 {
		t.Fatalf("resume point = %d, want 3", resume)
	}
	for seq := uint64(2); seq <= 4; seq++ {
		if err := stream.Send(event(seq, "y")); err != nil {
			t.Fatal(err)
		}
	}
	for acked < 4 {
		msg, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		acked = msg.GetAck().GetSeq()
	}
	evs := sink.Events("step-a")
	if len(evs) != 4 {
		t.Fatalf("stored %d events, want 4", len(evs))
	}
	for i, e := range evs {
		if e.GetSeq() != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.GetSeq())
		}
	}
	if string(evs[2].GetOutput().GetData()) != "x" || string(evs[3].GetOutput().GetData()) != "y" {
		t.Fatal("a resent event replaced the stored one")
	}

	// A gap is a protocol error.
	if err := stream.Send(event(9, "gap")); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := stream.Recv()
		if err != nil {
			if status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("gap: %v, want FailedPrecondition", err)
			}
			break
		}
	}
}

func TestAbortWhileDisconnectedIsDeliveredOnConnect(t *testing.T) {
	keys := keyring(t)
	client, srv := serve(t, stepserver.NewMemorySink(), keys)
	if err := srv.Abort("step-a", "stop"); err != stepserver.ErrNotConnected {
		t.Fatalf("Abort = %v, want ErrNotConnected", err)
	}
	token, _ := keys.Mint("step-a", time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := client.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(hello("step-a", token))
	if _, err := stream.Recv(); err != nil { // the resume point
		t.Fatal(err)
	}
	msg, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if msg.GetAbort().GetReason() != "stop" {
		t.Fatalf("got %v, want the pending abort", msg)
	}
}

func TestASupersededConnectionCannotStoreTwice(t *testing.T) {
	keys := keyring(t)
	sink := stepserver.NewMemorySink()
	client, _ := serve(t, sink, keys)
	token, _ := keys.Mint("step-a", time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	connect := func() eventspb.StepStream_ConnectClient {
		stream, err := client.Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		stream.Send(hello("step-a", token))
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
		return stream
	}
	waitAck := func(stream eventspb.StepStream_ConnectClient, seq uint64) {
		for {
			msg, err := stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if msg.GetAck().GetSeq() >= seq {
				return
			}
		}
	}

	old := connect()
	old.Send(event(1, "a"))
	waitAck(old, 1)
	// The sidecar reconnects while the old stream is half dead.
	fresh := connect()
	fresh.Send(event(2, "b"))
	waitAck(fresh, 2)
	old.Send(event(2, "stale"))
	for {
		_, err := old.Recv()
		if err != nil {
			if status.Code(err) != codes.Aborted {
				t.Fatalf("old stream ended with %v, want Aborted", err)
			}
			break
		}
	}
	evs := sink.Events("step-a")
	if len(evs) != 2 || string(evs[1].GetOutput().GetData()) != "b" {
		t.Fatalf("stored %v", evs)
	}
}

// slowSink holds the appends of step "slow" until release is closed.
type slowSink struct {
	*stepserver.MemorySink
	entered chan struct{} // receives once a "slow" append is held
	release chan struct{}
}

func (s *slowSink) Append(ctx context.Context, stepID string, evs []*eventspb.Event) error {
	if stepID == "slow" {
		select {
		case s.entered <- struct{}{}:
		default:
		}
		select {
		case <-s.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.MemorySink.Append(ctx, stepID, evs)
}

// TestAStepsSlowAppendDoesNotHoldUpOthers: appends are serialised per
// step, not server-wide, so one step waiting on the sink does not stop the
// other steps' events from being stored and acknowledged.
func TestAStepsSlowAppendDoesNotHoldUpOthers(t *testing.T) {
	keys := keyring(t)
	sink := &slowSink{MemorySink: stepserver.NewMemorySink(), entered: make(chan struct{}, 1), release: make(chan struct{})}
	defer close(sink.release)
	client, _ := serve(t, sink, keys)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	connect := func(step string) eventspb.StepStream_ConnectClient { return connectStep(ctx, t, client, keys, step) }

	slow := connect("slow")
	slow.Send(event(1, "held"))
	select {
	case <-sink.entered:
	case <-ctx.Done():
		t.Fatal("the slow step's event never reached the sink")
	}
	fast := connect("fast")
	fast.Send(event(1, "through"))
	for {
		msg, err := fast.Recv()
		if err != nil {
			t.Fatalf("the other step's event was not acknowledged while the slow one was held: %v", err)
		}
		if msg.GetAck().GetSeq() >= 1 {
			break
		}
	}
	if evs := sink.Events("fast"); len(evs) != 1 {
		t.Fatalf("stored %d events of the other step, want 1", len(evs))
	}
}
