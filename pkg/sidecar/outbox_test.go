package sidecar

import (
	"context"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/events/eventspb"
)

func output(n int) *eventspb.Event {
	return &eventspb.Event{Payload: &eventspb.Event_Output{Output: &eventspb.Output{Data: make([]byte, n)}}}
}

func TestOutboxNumbersKeepsAndResends(t *testing.T) {
	var recorded []uint64
	o := newOutbox(1<<20, func(e *eventspb.Event) { recorded = append(recorded, e.Seq) })
	ctx := context.Background()
	for i := 1; i <= 5; i++ {
		seq, err := o.Append(ctx, output(10))
		if err != nil || seq != uint64(i) {
			t.Fatalf("Append %d = %d, %v", i, seq, err)
		}
	}
	if len(recorded) != 5 || recorded[4] != 5 {
		t.Fatalf("journal saw %v", recorded)
	}
	o.Ack(3)
	if got := o.FirstUnacked(); got != 4 {
		t.Fatalf("FirstUnacked = %d, want 4", got)
	}
	// A reconnect resends what the ATC has not stored, from its resume point.
	evs, _ := o.After(3)
	if len(evs) != 2 || evs[0].Seq != 4 || evs[1].Seq != 5 {
		t.Fatalf("After(3) = %v", evs)
	}
	// A stale ack (an older connection's) changes nothing.
	o.Ack(2)
	if got := o.FirstUnacked(); got != 4 {
		t.Fatalf("FirstUnacked after a stale ack = %d", got)
	}
	done := make(chan error, 1)
	go func() { done <- o.WaitAcked(ctx, 5) }()
	select {
	case <-done:
		t.Fatal("WaitAcked returned before the ack")
	case <-time.After(50 * time.Millisecond):
	}
	o.Ack(5)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestOutboxPushesBackWhenFull(t *testing.T) {
	o := newOutbox(1000, nil)
	ctx := context.Background()
	if _, err := o.Append(ctx, output(600)); err != nil {
		t.Fatal(err)
	}
	appended := make(chan uint64, 1)
	go func() {
		seq, _ := o.Append(ctx, output(600))
		appended <- seq
	}()
	select {
	case <-appended:
		t.Fatal("Append went past the limit")
	case <-time.After(50 * time.Millisecond):
	}
	o.Ack(1)
	select {
	case seq := <-appended:
		if seq != 2 {
			t.Fatalf("seq %d, want 2", seq)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Append still blocked after the ack made room")
	}
	// A single event larger than the limit still goes through when the outbox is empty.
	o.Ack(2)
	if _, err := o.Append(ctx, output(5000)); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := o.Append(cctx, output(10)); err == nil {
		t.Fatal("Append on a full outbox ignored its cancelled context")
	}
}

func TestOutboxContinuesAfterTheATCsResumePoint(t *testing.T) {
	// A restarted sidecar starts from nothing while the ATC has 50 events.
	o := newOutbox(1<<20, nil)
	o.Ack(50)
	seq, err := o.Append(context.Background(), output(1))
	if err != nil || seq != 51 {
		t.Fatalf("first event after the resume point = %d, %v; want 51", seq, err)
	}
}
