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
	"google.golang.org/protobuf/proto"

	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/stepserver"
)

// serveLimited runs a real gRPC server with the limits' options.
func serveLimited(t *testing.T, limits stepserver.Limits) eventspb.StepStreamClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := stepserver.New(stepserver.NewMemorySink(), keyring(t), slog.New(slog.DiscardHandler)).WithLimits(limits)
	gs := grpc.NewServer(srv.ServerOptions()...)
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

func TestSilentClientIsDisconnectedAfterHelloDeadline(t *testing.T) {
	const deadline = 300 * time.Millisecond
	client := serveLimited(t, stepserver.Limits{Hello: deadline})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	stream, err := client.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv() // says nothing, waits to be told
	took := time.Since(start)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Recv = %v, want DeadlineExceeded", err)
	}
	if took < deadline || took > deadline+2*time.Second {
		t.Fatalf("disconnected after %s, want about %s", took, deadline)
	}
}

func TestSlowHelloWithinDeadlineIsServed(t *testing.T) {
	keys := keyring(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := stepserver.New(stepserver.NewMemorySink(), keys, slog.New(slog.DiscardHandler)).WithLimits(stepserver.Limits{Hello: 2 * time.Second})
	gs := grpc.NewServer(srv.ServerOptions()...)
	srv.Register(gs)
	go gs.Serve(ln)
	defer gs.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := eventspb.NewStepStreamClient(conn).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	token, _ := keys.Mint("step-a", time.Hour)
	if err := stream.Send(hello("step-a", token)); err != nil {
		t.Fatal(err)
	}
	msg, err := stream.Recv()
	if err != nil || msg.GetAck() == nil {
		t.Fatalf("Recv = %v, %v; want the resume point", msg, err)
	}
}

func TestStreamsPerStepAreBounded(t *testing.T) {
	keys := keyring(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := stepserver.New(stepserver.NewMemorySink(), keys, slog.New(slog.DiscardHandler)).WithLimits(stepserver.Limits{StreamsPerStep: 2})
	gs := grpc.NewServer(srv.ServerOptions()...)
	srv.Register(gs)
	go gs.Serve(ln)
	defer gs.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := eventspb.NewStepStreamClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	token, _ := keys.Mint("step-a", time.Hour)
	open := func() (eventspb.StepStream_ConnectClient, error) {
		stream, err := client.Connect(ctx)
		if err != nil {
			return nil, err
		}
		if err := stream.Send(hello("step-a", token)); err != nil {
			return nil, err
		}
		_, err = stream.Recv()
		return stream, err
	}
	var held []eventspb.StepStream_ConnectClient
	for i := range 2 {
		stream, err := open()
		if err != nil {
			t.Fatalf("stream %d: %v", i+1, err)
		}
		held = append(held, stream)
	}
	if _, err := open(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third stream: %v, want ResourceExhausted", err)
	}
	// A closed stream frees its place.
	held[0].CloseSend()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := open()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after closing a stream: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// unsyncedSink stores events at once but makes none durable until release
// is closed.
type unsyncedSink struct {
	*stepserver.MemorySink
	release chan struct{}
}

func (u *unsyncedSink) Sync(ctx context.Context, _ string, _ uint64) error {
	select {
	case <-u.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestUnsyncedBytesAreBounded: while the sink makes nothing durable, each
// stream takes no more than its share of Limits.Unsynced, whatever the
// others do, then everything once the sink catches up.
func TestUnsyncedBytesAreBounded(t *testing.T) {
	keys := keyring(t)
	sink := &unsyncedSink{MemorySink: stepserver.NewMemorySink(), release: make(chan struct{})}
	payload := string(make([]byte, 10_000))
	size := proto.Size(event(1, payload).GetEvent()) // the same for seq 1..127
	const fit = 5                                    // events within a stream's share, of two streams
	srv := stepserver.New(sink, keys, slog.New(slog.DiscardHandler)).WithLimits(stepserver.Limits{Unsynced: int64(2 * (fit*size + size/2))})
	client := listen(t, srv, srv.ServerOptions()...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	open := func(step string) eventspb.StepStream_ConnectClient { return connectStep(ctx, t, client, keys, step) }

	a, b := open("a"), open("b")
	const sent = 20
	for seq := uint64(1); seq <= sent; seq++ {
		if err := a.Send(event(seq, payload)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sink.Wait(ctx, "a", func(evs []*eventspb.Event) bool { return len(evs) >= fit }); err != nil {
		t.Fatalf("the first events were not stored: %v", err)
	}
	// The other stream has its own share, however far the first is over.
	if err := b.Send(event(1, payload)); err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Wait(ctx, "b", func(evs []*eventspb.Event) bool { return len(evs) == 1 }); err != nil {
		t.Fatalf("the other stream's event was not stored: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(sink.Events("a")); n != fit {
		t.Fatalf("took %d events (%d bytes each) of a stream with nothing durable, want %d within its share", n, size, fit)
	}

	close(sink.release)
	waitAck := func(stream eventspb.StepStream_ConnectClient, seq uint64) {
		for {
			msg, err := stream.Recv()
			if err != nil {
				t.Fatalf("waiting for ack %d: %v", seq, err)
			}
			if msg.GetAck().GetSeq() >= seq {
				return
			}
		}
	}
	waitAck(a, sent)
	waitAck(b, 1)
	if n := len(sink.Events("a")); n != sent {
		t.Fatalf("stored %d events once durable, want %d", n, sent)
	}
}
