// Package stepserver is the ATC's end of the sidecar stream: it authenticates
// each step pod's sidecar, stores the step's events exactly once and in order
// (acknowledging only what is stored), and carries commands (abort, release,
// intercept sessions) back to the pod over the same stream.
package stepserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/porter-ci/porter/pkg/events/eventspb"
)

// Sink stores a step's events durably. Appending and making durable are
// separate so a sink can commit in groups while the stream keeps flowing:
// events are acknowledged to the sidecar only after Sync.
type Sink interface {
	// LastSeq is the highest sequence number durably stored for the step
	// (0 if none); anything appended before is made durable first.
	LastSeq(ctx context.Context, stepID string) (uint64, error)
	// Append takes events whose sequence numbers follow the last appended
	// one without gaps.
	Append(ctx context.Context, stepID string, events []*eventspb.Event) error
	// Sync returns once every event of the step up to seq is durable.
	Sync(ctx context.Context, stepID string, seq uint64) error
}

// Verifier checks a sidecar's token for a step.
type Verifier interface {
	Verify(token, stepID string) error
}

// Server implements eventspb.StepStreamServer.
type Server struct {
	eventspb.UnimplementedStepStreamServer

	sink   Sink
	verify Verifier
	log    *slog.Logger
	limits Limits

	// receiving counts the connected streams, which share Limits.Unsynced.
	receiving atomic.Int64

	mu    sync.Mutex
	steps map[string]*step
}

// Limits bound what one client can hold on the server.
type Limits struct {
	// Hello is how long a stream may go without saying which step it is
	// (its hello) before it is closed; it also bounds a connection's TLS
	// and HTTP/2 handshake.
	Hello time.Duration
	// StreamsPerStep is how many streams one step may hold at once: one,
	// plus reconnects racing a half-dead stream.
	StreamsPerStep int
	// StreamsPerConn is HTTP/2's MaxConcurrentStreams.
	StreamsPerConn uint32
	// Unsynced bounds the bytes of events (as received) that the server
	// has taken from its streams and the sink has not yet made durable:
	// each stream may hold its share (at least unsyncedLeast, or one
	// event) and stops reading past it until the sink catches up, so that
	// HTTP/2 flow control leaves the rest in the sidecar's outbox, which
	// pushes back on its process. Without it a slow blobstore let a
	// thousand sidecars fill the server's memory with up to an outbox
	// (32 MiB) each. The default is one outbox's worth: a single stream is
	// not held back, and the sink's memory for a thousand (several times
	// the bytes, for short lines) stays a few hundred MiB. A share, not a
	// pool: a stream waits for its own events to be durable, which keeps
	// each step's events in batches (a pool handed out an event at a time
	// made a thousand steps' chunks a few events each).
	Unsynced int64
}

// unsyncedLeast is the smallest share of Limits.Unsynced a stream gets.
const unsyncedLeast = 16 << 10

// DefaultLimits are the limits New uses for zero fields.
var DefaultLimits = Limits{Hello: 10 * time.Second, StreamsPerStep: 4, StreamsPerConn: 16, Unsynced: 32 << 20}

func (l Limits) withDefaults() Limits {
	if l.Hello <= 0 {
		l.Hello = DefaultLimits.Hello
	}
	if l.StreamsPerStep <= 0 {
		l.StreamsPerStep = DefaultLimits.StreamsPerStep
	}
	if l.StreamsPerConn == 0 {
		l.StreamsPerConn = DefaultLimits.StreamsPerConn
	}
	if l.Unsynced <= 0 {
		l.Unsynced = DefaultLimits.Unsynced
	}
	return l
}

// ServerOptions are the gRPC server options that enforce the limits and
// the keepalive policy sidecars follow (pings every 20 s): a client that
// pings more often, or a connection that never opens a stream, is cut off.
func (s *Server) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(s.limits.Hello),
		grpc.MaxConcurrentStreams(s.limits.StreamsPerConn),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// A sidecar always holds a stream; a connection without one for
		// this long is not a sidecar at work.
		// Pinging finds connections that died without a word, so that their
		// streams stop counting against StreamsPerStep.
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 6 * s.limits.Hello, Time: 30 * time.Second, Timeout: 10 * time.Second}),
	}
}

// step is what the server knows of one step across its connections.
type step struct {
	// conn is the live connection's outbox, nil while disconnected.
	conn chan *eventspb.ATCMessage
	// connID tells a stale connection from the current one.
	connID uint64
	// appendMu serialises the step's appends, and a new connection's taking
	// over from an old one, so that a superseded connection that is still
	// delivering cannot append an event twice. It is the step's own: held
	// while the sink works, a server-wide lock made every stream wait for
	// every other (1,000 streams spent their time queueing on it).
	appendMu sync.Mutex
	// appended is the last sequence number given to the sink (appendMu).
	// It lives here, not in a connection, for the same reason.
	appended uint64
	// streams is how many streams of the step are open (Limits.StreamsPerStep).
	streams int
	// pending commands survive a disconnect and are sent on the next connect.
	aborted  *eventspb.Abort
	released bool
	proceed  *eventspb.Proceed
	sessions map[string]*Session
}

// New returns a server storing events in sink and checking tokens with
// verify, within DefaultLimits.
func New(sink Sink, verify Verifier, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	return &Server{sink: sink, verify: verify, log: log, limits: DefaultLimits, steps: map[string]*step{}}
}

// WithLimits sets the server's limits (zero fields: DefaultLimits'); call
// it before serving.
func (s *Server) WithLimits(l Limits) *Server {
	s.limits = l.withDefaults()
	return s
}

// Register adds the service to a gRPC server.
func (s *Server) Register(g *grpc.Server) { eventspb.RegisterStepStreamServer(g, s) }

// ErrNotConnected means the step's sidecar has no live stream.
var ErrNotConnected = errors.New("step's sidecar is not connected")

func (s *Server) stepLocked(id string) *step {
	st, ok := s.steps[id]
	if !ok {
		st = &step{sessions: map[string]*Session{}}
		s.steps[id] = st
	}
	return st
}

// Connected reports whether the step's sidecar has a live stream.
func (s *Server) Connected(stepID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.steps[stepID]
	return ok && st.conn != nil
}

// ConnectedCount is the number of sidecars with a live stream.
func (s *Server) ConnectedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, st := range s.steps {
		if st.conn != nil {
			n++
		}
	}
	return n
}

// Abort asks the step to stop. It is delivered now if the sidecar is
// connected, otherwise as soon as it connects; ErrNotConnected tells the
// caller it may have to fall back to deleting the pod.
func (s *Server) Abort(stepID, reason string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stepLocked(stepID)
	st.aborted = &eventspb.Abort{Reason: reason}
	return s.sendLocked(st, &eventspb.ATCMessage{Msg: &eventspb.ATCMessage_Abort{Abort: st.aborted}})
}

// Release ends the step's keep-alive window.
func (s *Server) Release(stepID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stepLocked(stepID)
	st.released = true
	return s.sendLocked(st, &eventspb.ATCMessage{Msg: &eventspb.ATCMessage_Release{Release: &eventspb.Release{}}})
}

// Proceed gives a step declared ahead of its turn the go-ahead. Like an
// abort, it is delivered now if the sidecar is connected, otherwise as
// soon as it connects (ErrNotConnected says which).
func (s *Server) Proceed(stepID string, p *eventspb.Proceed) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stepLocked(stepID)
	st.proceed = p
	return s.sendLocked(st, &eventspb.ATCMessage{Msg: &eventspb.ATCMessage_Proceed{Proceed: p}})
}

// Forget drops what the server remembers of a finished step.
func (s *Server) Forget(stepID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.steps, stepID)
}

func (s *Server) sendLocked(st *step, msg *eventspb.ATCMessage) error {
	if st.conn == nil {
		return ErrNotConnected
	}
	select {
	case st.conn <- msg:
		return nil
	default:
		return fmt.Errorf("step's outbox is full")
	}
}

// Connect serves one sidecar connection.
func (s *Server) Connect(stream eventspb.StepStream_ConnectServer) error {
	ctx := stream.Context()
	first, err := s.recvHello(ctx, stream)
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if hello == nil {
		return status.Error(codes.InvalidArgument, "first message must be hello")
	}
	stepID := hello.GetStepId()
	if err := s.verify.Verify(hello.GetToken(), stepID); err != nil {
		s.log.Warn("refused sidecar", "step", stepID, "pod", hello.GetPodName(), "err", err)
		return status.Errorf(codes.Unauthenticated, "step %q: %v", stepID, err)
	}
	st, connID, out, last, err := s.takeOver(ctx, stepID, hello)
	if err != nil {
		return err
	}
	s.log.Info("sidecar connected", "step", stepID, "pod", hello.GetPodName(), "stored", last, "resend_from", hello.GetFirstUnackedSeq())
	// Counted before the resume point goes out: the sidecar's first event
	// finds its share already made.
	s.receiving.Add(1)
	defer s.receiving.Add(-1)

	defer func() {
		s.mu.Lock()
		// st, not s.steps[stepID]: Forget may have dropped it meanwhile.
		st.streams--
		if cur, ok := s.steps[stepID]; ok && cur.connID == connID {
			cur.conn = nil
			// The sessions' processes may live on in the pod, but nothing
			// carries their output any more: end them for the person.
			for id, sess := range cur.sessions {
				sess.end("the step's sidecar disconnected")
				delete(cur.sessions, id)
			}
		}
		s.mu.Unlock()
	}()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sendErr := make(chan error, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				sendErr <- nil
				return
			case msg := <-out:
				if err := stream.Send(msg); err != nil {
					sendErr <- err
					cancel()
					return
				}
			}
		}
	}()

	recvErr := s.receive(ctx, stream, st, stepID, connID, out)
	cancel()
	if err := <-sendErr; err != nil && recvErr == nil {
		recvErr = err
	}
	s.log.Info("sidecar disconnected", "step", stepID, "err", recvErr)
	return recvErr
}

// takeOver makes a new connection the step's current one: it reads the
// resume point and queues it, and any commands given while the step was
// disconnected, on the connection's outbox.
func (s *Server) takeOver(ctx context.Context, stepID string, hello *eventspb.Hello) (st *step, connID uint64, out chan *eventspb.ATCMessage, last uint64, err error) {
	s.mu.Lock()
	st = s.stepLocked(stepID)
	s.mu.Unlock()
	// The step's appends wait while it changes hands: an event an older
	// connection is storing is either in the resume point read here, or
	// refused to that connection as superseded; never stored twice.
	st.appendMu.Lock()
	defer st.appendMu.Unlock()
	last, err = s.sink.LastSeq(ctx, stepID)
	if err != nil {
		return nil, 0, nil, 0, status.Errorf(codes.Unavailable, "read stored events of step %q: %v", stepID, err)
	}

	out = make(chan *eventspb.ATCMessage, 256)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.steps[stepID] != st {
		return nil, 0, nil, 0, status.Errorf(codes.Unavailable, "step %q was forgotten while its sidecar connected", stepID)
	}
	if st.streams >= s.limits.StreamsPerStep {
		s.log.Warn("refused sidecar: too many streams", "step", stepID, "pod", hello.GetPodName(), "limit", s.limits.StreamsPerStep)
		return nil, 0, nil, 0, status.Errorf(codes.ResourceExhausted, "step %q already holds %d streams (the limit)", stepID, s.limits.StreamsPerStep)
	}
	st.streams++
	st.connID++
	st.conn = out
	st.appended = last
	// The resume point comes first; commands given while disconnected follow it.
	out <- ack(last)
	if st.proceed != nil {
		out <- &eventspb.ATCMessage{Msg: &eventspb.ATCMessage_Proceed{Proceed: st.proceed}}
	}
	if st.aborted != nil {
		out <- &eventspb.ATCMessage{Msg: &eventspb.ATCMessage_Abort{Abort: st.aborted}}
	}
	if st.released {
		out <- &eventspb.ATCMessage{Msg: &eventspb.ATCMessage_Release{Release: &eventspb.Release{}}}
	}
	return st, st.connID, out, last, nil
}

// recvHello waits for the stream's first message for at most
// Limits.Hello: a client that does not say who it is holds nothing for long.
// Returning ends the stream, which ends the Recv below.
func (s *Server) recvHello(ctx context.Context, stream eventspb.StepStream_ConnectServer) (*eventspb.SidecarMessage, error) {
	type received struct {
		msg *eventspb.SidecarMessage
		err error
	}
	got := make(chan received, 1)
	go func() {
		msg, err := stream.Recv()
		got <- received{msg, err}
	}()
	timer := time.NewTimer(s.limits.Hello)
	defer timer.Stop()
	select {
	case r := <-got:
		return r.msg, r.err
	case <-timer.C:
		return nil, status.Errorf(codes.DeadlineExceeded, "no hello within %s", s.limits.Hello)
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

func ack(seq uint64) *eventspb.ATCMessage {
	return &eventspb.ATCMessage{Msg: &eventspb.ATCMessage_Ack{Ack: &eventspb.Ack{Seq: seq}}}
}

// receive stores events in order, skipping ones already stored, and routes
// session output to its session. Acknowledgements trail behind, sent by
// acker once the sink says the events are durable.
func (s *Server) receive(ctx context.Context, stream eventspb.StepStream_ConnectServer, st *step, stepID string, connID uint64, out chan<- *eventspb.ATCMessage) error {
	appended := make(chan uint64, 1)
	ackErr := make(chan error, 1)
	held := heldBytes{freed: make(chan struct{})}
	// A failing acker also ends a wait for the stream's share. The acker
	// ends with receive, which waits for it.
	actx, stopWaiting := context.WithCancel(ctx)
	ackerCtx, stopAcker := context.WithCancel(ctx)
	ackerDone := make(chan struct{})
	defer func() { stopAcker(); <-ackerDone; stopWaiting() }()
	go func() {
		defer close(ackerDone)
		ackErr <- s.acker(ackerCtx, stepID, appended, out, &held)
		stopWaiting()
	}()
	for {
		msg, err := stream.Recv()
		if err != nil {
			if status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		switch m := msg.Msg.(type) {
		case *eventspb.SidecarMessage_Event:
			size := int64(proto.Size(m.Event))
			if err := held.wait(actx, size, s.unsyncedShare()); err != nil {
				select {
				case err := <-ackErr:
					return err
				default:
					return nil // the stream ended
				}
			}
			seq, stored, err := s.append(ctx, st, stepID, connID, m.Event)
			if err != nil {
				return err
			}
			if !stored {
				continue // a resend of something already stored
			}
			held.add(seq, size)
			// Only the newest matters to the acker: replace an unread value.
			select {
			case <-appended:
			default:
			}
			appended <- seq
		case *eventspb.SidecarMessage_SessionOutput:
			s.deliverSession(stepID, m.SessionOutput)
		case *eventspb.SidecarMessage_Hello:
			return status.Error(codes.InvalidArgument, "hello sent twice")
		}
		select {
		case err := <-ackErr:
			return err
		default:
		}
	}
}

// unsyncedShare is one stream's share of Limits.Unsynced.
func (s *Server) unsyncedShare() int64 {
	return max(s.limits.Unsynced/max(s.receiving.Load(), 1), unsyncedLeast)
}

// heldBytes are a stream's events appended and not yet durable.
type heldBytes struct {
	mu     sync.Mutex
	events []heldEvent // in sequence order
	total  int64
	freed  chan struct{} // closed and replaced when events become durable
}

type heldEvent struct {
	seq  uint64
	size int64
}

func (h *heldBytes) add(seq uint64, size int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, heldEvent{seq, size})
	h.total += size
}

// durable forgets the events up to seq.
func (h *heldBytes) durable(seq uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for n < len(h.events) && h.events[n].seq <= seq {
		h.total -= h.events[n].size
		n++
	}
	if n == 0 {
		return
	}
	h.events = h.events[n:]
	close(h.freed)
	h.freed = make(chan struct{})
}

// wait blocks until an event of size fits in share beside those held (or
// none is held: an event larger than the share goes alone).
func (h *heldBytes) wait(ctx context.Context, size, share int64) error {
	for {
		h.mu.Lock()
		fits, freed := h.total == 0 || h.total+size <= share, h.freed
		h.mu.Unlock()
		if fits {
			return nil
		}
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// append gives one event to the sink unless it is stored already. Each
// step's appends are serialised (step.appendMu), so two connections of one
// step (a reconnect racing a half-dead stream) cannot store an event twice.
func (s *Server) append(ctx context.Context, st *step, stepID string, connID uint64, ev *eventspb.Event) (uint64, bool, error) {
	st.appendMu.Lock()
	defer st.appendMu.Unlock()
	s.mu.Lock()
	current := s.steps[stepID] == st && st.connID == connID
	s.mu.Unlock()
	switch {
	case !current:
		return 0, false, status.Errorf(codes.Aborted, "step %q: superseded by a newer connection", stepID)
	case ev.GetSeq() <= st.appended:
		return 0, false, nil
	case ev.GetSeq() != st.appended+1:
		return 0, false, status.Errorf(codes.FailedPrecondition, "step %q: event %d does not follow stored event %d", stepID, ev.GetSeq(), st.appended)
	}
	if err := s.sink.Append(ctx, stepID, []*eventspb.Event{ev}); err != nil {
		return 0, false, status.Errorf(codes.Unavailable, "store event %d of step %q: %v", ev.GetSeq(), stepID, err)
	}
	st.appended = ev.GetSeq()
	return st.appended, true, nil
}

// acker acknowledges appended events once they are durable.
func (s *Server) acker(ctx context.Context, stepID string, appended <-chan uint64, out chan<- *eventspb.ATCMessage, held *heldBytes) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case seq := <-appended:
			if err := s.sink.Sync(ctx, stepID, seq); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return status.Errorf(codes.Unavailable, "store events of step %q: %v", stepID, err)
			}
			held.durable(seq)
			select {
			case out <- ack(seq):
			case <-ctx.Done():
				return nil
			}
		}
	}
}
