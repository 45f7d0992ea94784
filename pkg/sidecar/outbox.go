package sidecar

import (
	"context"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/porter-ci/porter/pkg/events/eventspb"
)

// outbox numbers a step's events and keeps every one until the ATC has
// acknowledged it, so a reconnecting sidecar can resend exactly what is
// missing. It holds at most limit bytes of unacknowledged events: past that,
// Append blocks, which pushes back on the step's process through its pipes
// instead of growing without bound while the ATC is away.
type outbox struct {
	limit int

	mu      sync.Mutex
	pending []*eventspb.Event // unacknowledged, in sequence order
	bytes   int
	nextSeq uint64
	acked   uint64
	changed chan struct{} // closed and replaced on every append and ack
	// record sees every event once, in order (the audit journal).
	record func(*eventspb.Event)
}

func newOutbox(limit int, record func(*eventspb.Event)) *outbox {
	return &outbox{limit: limit, nextSeq: 1, changed: make(chan struct{}), record: record}
}

func (o *outbox) notifyLocked() {
	close(o.changed)
	o.changed = make(chan struct{})
}

// Append numbers ev, keeps it until acknowledged and returns its sequence
// number. It blocks while the outbox is full.
func (o *outbox) Append(ctx context.Context, ev *eventspb.Event) (uint64, error) {
	size := proto.Size(ev)
	o.mu.Lock()
	for o.bytes > 0 && o.bytes+size > o.limit {
		ch := o.changed
		o.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		o.mu.Lock()
	}
	defer o.mu.Unlock()
	ev.Seq = o.nextSeq
	o.nextSeq++
	if ev.Time == nil {
		ev.Time = timestamppb.New(time.Now())
	}
	o.pending = append(o.pending, ev)
	o.bytes += size
	if o.record != nil {
		o.record(ev)
	}
	o.notifyLocked()
	return ev.Seq, nil
}

// Ack drops every event up to and including seq.
func (o *outbox) Ack(seq uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if seq <= o.acked {
		return
	}
	o.acked = seq
	// The ATC holds more than this process numbered (a restarted sidecar):
	// continue after it, or new events would be taken for resends.
	if seq >= o.nextSeq {
		o.nextSeq = seq + 1
	}
	n := 0
	for n < len(o.pending) && o.pending[n].Seq <= seq {
		o.bytes -= proto.Size(o.pending[n])
		o.pending[n] = nil
		n++
	}
	o.pending = o.pending[n:]
	o.notifyLocked()
}

// After returns the held events numbered above seq and a channel closed at
// the next change.
func (o *outbox) After(seq uint64) ([]*eventspb.Event, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	i := 0
	for i < len(o.pending) && o.pending[i].Seq <= seq {
		i++
	}
	return append([]*eventspb.Event(nil), o.pending[i:]...), o.changed
}

// FirstUnacked is the resume cursor sent in Hello.
func (o *outbox) FirstUnacked() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.acked + 1
}

// WaitAcked blocks until seq is acknowledged.
func (o *outbox) WaitAcked(ctx context.Context, seq uint64) error {
	for {
		o.mu.Lock()
		done, ch := o.acked >= seq, o.changed
		o.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
