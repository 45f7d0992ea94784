package stepserver

import (
	"context"
	"sync"

	"github.com/porter-ci/porter/pkg/events/eventspb"
)

// MemorySink keeps events in memory: for tests and for watching a step live.
type MemorySink struct {
	mu      sync.Mutex
	events  map[string][]*eventspb.Event
	changed chan struct{}
}

// NewMemorySink returns an empty sink.
func NewMemorySink() *MemorySink {
	return &MemorySink{events: map[string][]*eventspb.Event{}, changed: make(chan struct{})}
}

// LastSeq implements Sink.
func (m *MemorySink) LastSeq(_ context.Context, stepID string) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	evs := m.events[stepID]
	if len(evs) == 0 {
		return 0, nil
	}
	return evs[len(evs)-1].GetSeq(), nil
}

// Append implements Sink.
func (m *MemorySink) Append(_ context.Context, stepID string, events []*eventspb.Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events[stepID] = append(m.events[stepID], events...)
	close(m.changed)
	m.changed = make(chan struct{})
	return nil
}

// Sync implements Sink: memory is as durable as this sink gets.
func (m *MemorySink) Sync(context.Context, string, uint64) error { return nil }

// Events returns a copy of the step's stored events.
func (m *MemorySink) Events(stepID string) []*eventspb.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*eventspb.Event(nil), m.events[stepID]...)
}

// Wait blocks until cond holds for the step's events, or ctx ends.
func (m *MemorySink) Wait(ctx context.Context, stepID string, cond func([]*eventspb.Event) bool) ([]*eventspb.Event, error) {
	for {
		m.mu.Lock()
		evs := append([]*eventspb.Event(nil), m.events[stepID]...)
		ch := m.changed
		m.mu.Unlock()
		if cond(evs) {
			return evs, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return evs, ctx.Err()
		}
	}
}
