package stepbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/porter-ci/porter/pkg/events/eventspb"
)

// Sidecar is one simulated sidecar: a connection and a stream of its own,
// speaking what pkg/sidecar's atcLink speaks (hello with the step's token,
// the ATC's resume point, then one message per event, acknowledged
// cumulatively once durable), without a process or an outbox behind it.
type Sidecar struct {
	StepID string

	conn   *grpc.ClientConn
	stream grpc.BidiStreamingClient[eventspb.SidecarMessage, eventspb.ATCMessage]
	cancel context.CancelFunc
	recv   chan struct{} // closed when the receiver ends

	nextSeq uint64 // the sender's alone

	mu sync.Mutex
	// The measured window: only events sent in [from, to) have their ack
	// latency kept, only acks received in it are counted.
	from, to  time.Time
	pending   []sentEvent // unacknowledged, in order
	acked     uint64
	changed   chan struct{} // closed and replaced on every ack
	recvErr   error
	latencies []time.Duration
	ackedIn   int // events acknowledged within the window
}

type sentEvent struct {
	seq uint64
	at  time.Time
}

// Connect opens step i's stream on conn (the caller's: one per sidecar, or
// shared) and waits for the ATC's resume point.
func Connect(ctx context.Context, srv *Server, conn *grpc.ClientConn, i int) (*Sidecar, error) {
	stepID := StepID(i)
	token, err := srv.Keys.Mint(stepID, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stream, err := eventspb.NewStepStreamClient(conn).Connect(sctx, grpc.WaitForReady(true))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("step %s: open stream: %w", stepID, err)
	}
	hello := &eventspb.Hello{StepId: stepID, Token: token, FirstUnackedSeq: 1, PodName: "bench-" + stepID, PorterVersion: "bench"}
	if err := stream.Send(&eventspb.SidecarMessage{Msg: &eventspb.SidecarMessage_Hello{Hello: hello}}); err != nil {
		cancel()
		return nil, fmt.Errorf("step %s: send hello: %w", stepID, err)
	}
	first, err := stream.Recv()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("step %s: wait for the resume point: %w", stepID, err)
	}
	if first.GetAck() == nil {
		cancel()
		return nil, fmt.Errorf("step %s: first message is %T, want an ack", stepID, first.Msg)
	}
	c := &Sidecar{StepID: stepID, conn: conn, stream: stream, cancel: cancel, recv: make(chan struct{}),
		nextSeq: first.GetAck().GetSeq() + 1, acked: first.GetAck().GetSeq(), changed: make(chan struct{})}
	go c.receive()
	return c, nil
}

func (c *Sidecar) receive() {
	defer close(c.recv)
	for {
		msg, err := c.stream.Recv()
		if err != nil {
			c.mu.Lock()
			c.recvErr = err
			close(c.changed)
			c.changed = make(chan struct{})
			c.mu.Unlock()
			return
		}
		a := msg.GetAck()
		if a == nil {
			continue // commands: none are given in a benchmark
		}
		now := time.Now()
		c.mu.Lock()
		inWindow := !now.Before(c.from) && now.Before(c.to)
		n := 0
		for n < len(c.pending) && c.pending[n].seq <= a.GetSeq() {
			at := c.pending[n].at
			if !at.Before(c.from) && at.Before(c.to) {
				c.latencies = append(c.latencies, now.Sub(at))
			}
			n++
		}
		if inWindow {
			c.ackedIn += n
		}
		c.pending = c.pending[n:]
		c.acked = max(c.acked, a.GetSeq())
		close(c.changed)
		c.changed = make(chan struct{})
		c.mu.Unlock()
	}
}

// SetWindow sets the measured window: ack latencies are kept for events
// sent within [from, to), and acks received within it are counted.
func (c *Sidecar) SetWindow(from, to time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.from, c.to = from, to
}

// Send numbers and sends one output event; only one goroutine may send.
func (c *Sidecar) Send(data []byte) (uint64, error) {
	seq := c.nextSeq
	c.nextSeq++
	now := time.Now()
	c.mu.Lock()
	c.pending = append(c.pending, sentEvent{seq: seq, at: now})
	c.mu.Unlock()
	ev := &eventspb.Event{Seq: seq, Time: timestamppb.New(now), Payload: &eventspb.Event_Output{
		Output: &eventspb.Output{Stream: eventspb.Stream_STREAM_STDOUT, Data: data}}}
	if err := c.stream.Send(&eventspb.SidecarMessage{Msg: &eventspb.SidecarMessage_Event{Event: ev}}); err != nil {
		return 0, fmt.Errorf("step %s: send event %d: %w", c.StepID, seq, err)
	}
	return seq, nil
}

// Unacked is how many sent events await their acknowledgement, and a
// channel closed at the next acknowledgement.
func (c *Sidecar) Unacked() (int, <-chan struct{}, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending), c.changed, c.recvErr
}

// WaitAcked blocks until seq is acknowledged.
func (c *Sidecar) WaitAcked(ctx context.Context, seq uint64) error {
	for {
		c.mu.Lock()
		done, ch, err := c.acked >= seq, c.changed, c.recvErr
		c.mu.Unlock()
		if done {
			return nil
		}
		if err != nil {
			return fmt.Errorf("step %s: stream ended before event %d was acknowledged: %w", c.StepID, seq, err)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// WaitAllAcked blocks until every event sent is acknowledged; call it
// once the sender is done.
func (c *Sidecar) WaitAllAcked(ctx context.Context) error {
	return c.WaitAcked(ctx, c.nextSeq-1)
}

// Results are the ack latencies of the events sent within the window and
// the number of events acknowledged within it.
func (c *Sidecar) Results() ([]time.Duration, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.latencies, c.ackedIn
}

// Close ends the stream (as a sidecar whose step is over); the connection
// is the caller's.
func (c *Sidecar) Close() error {
	err := c.stream.CloseSend()
	c.cancel()
	<-c.recv
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.recvErr != nil && !isCanceled(c.recvErr) {
		err = errors.Join(err, c.recvErr)
	}
	return err
}

// isCanceled tells a stream ended by its own side or by the server's
// normal end from a failure.
func isCanceled(err error) bool {
	return errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled
}
