package atcclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/porter-ci/porter/pkg/events"
)

// Reconnects of an event stream: attempts in a row without an event, and
// the backoff between them (doubling from the first to the last). About a
// minute and a half in all, long enough for a server to restart.
const (
	maxReconnectAttempts = 20
	firstReconnectDelay  = 100 * time.Millisecond
	maxReconnectDelay    = 5 * time.Second
)

// EventStream reads a build's events. When the stream is cut before its
// end (the connection broke, the server restarted) it reconnects with the
// Last-Event-ID of the last event read, so no event is lost or repeated.
// It is not safe for concurrent use.
type EventStream struct {
	c       *Client
	ctx     context.Context
	buildID int64
	lastID  string

	body *recordingBody
	r    *events.BuildStreamReader
	done bool

	// failures counts connections in a row that gave no event.
	failures int
	lastErr  error
}

// BuildEvents follows a build's events from its start:
// GET /api/v1/builds/{id}/events. The first connection is made now, so that
// an unknown build, a missing token or an unreachable server is reported at
// once. ctx bounds the whole stream, reconnects included.
func (c *Client) BuildEvents(ctx context.Context, buildID int64) (*EventStream, error) {
	s := &EventStream{c: c, ctx: ctx, buildID: buildID}
	if err := s.connect(); err != nil {
		return nil, err
	}
	return s, nil
}

// Next returns the next event's id and envelope; io.EOF after the build's
// last event. Payloads are left to Envelope.Decode, so that a caller can
// skip the event types it does not know.
func (s *EventStream) Next() (string, events.Envelope, error) {
	for {
		if s.done {
			return "", events.Envelope{}, io.EOF
		}
		if s.r == nil {
			if err := s.reconnect(); err != nil {
				s.Close()
				return "", events.Envelope{}, err
			}
		}
		id, env, err := s.r.Next()
		switch {
		case err == nil:
			if id != "" {
				s.lastID = id
			}
			s.failures = 0
			return id, env, nil
		case errors.Is(err, io.EOF):
			s.Close()
			return "", events.Envelope{}, io.EOF
		case s.ctx.Err() != nil:
			s.Close()
			return "", events.Envelope{}, fmt.Errorf("follow build %d's events: %w", s.buildID, context.Cause(s.ctx))
		case !errors.Is(err, events.ErrStreamCut) && s.body.err == nil:
			// Not the connection's fault (an event that does not decode):
			// reading it again would give the same.
			s.Close()
			return "", events.Envelope{}, fmt.Errorf("follow build %d's events: %w", s.buildID, err)
		}
		s.c.log.DebugContext(s.ctx, "build event stream cut; reconnecting", "build", s.buildID, "last_event_id", s.lastID, "err", err)
		s.lastErr = err
		s.failures++
		s.closeBody()
	}
}

// LastID is the id of the last event read.
func (s *EventStream) LastID() string { return s.lastID }

// Close ends the stream; Next then returns io.EOF.
func (s *EventStream) Close() error {
	s.done = true
	s.closeBody()
	return nil
}

func (s *EventStream) closeBody() {
	if s.body != nil {
		s.body.rc.Close()
	}
	s.body, s.r = nil, nil
}

func (s *EventStream) reconnect() error {
	for {
		if s.failures > maxReconnectAttempts {
			return fmt.Errorf("follow build %d's events: gave up after %d attempts to reconnect: %w", s.buildID, maxReconnectAttempts, s.lastErr)
		}
		if s.failures > 0 {
			delay := min(firstReconnectDelay<<(s.failures-1), maxReconnectDelay)
			t := time.NewTimer(delay)
			select {
			case <-s.ctx.Done():
				t.Stop()
				return fmt.Errorf("follow build %d's events: %w", s.buildID, context.Cause(s.ctx))
			case <-t.C:
			}
		}
		err := s.connect()
		if err == nil {
			return nil
		}
		var se *Error
		if (errors.As(err, &se) && se.StatusCode/100 == 4) || s.ctx.Err() != nil {
			// The server answered and said no (or we were told to stop):
			// asking again would not change that.
			return err
		}
		s.c.log.DebugContext(s.ctx, "reconnect to build event stream failed", "build", s.buildID, "err", err)
		s.lastErr = err
		s.failures++
	}
}

func (s *EventStream) connect() error {
	r := request{op: fmt.Sprintf("follow build %d's events", s.buildID), method: http.MethodGet, path: buildPath(s.buildID) + "/events"}
	resp, err := s.c.sendHeader(s.ctx, r, http.Header{"Accept": {"text/event-stream"}, "Last-Event-ID": {s.lastID}})
	if err != nil {
		return err
	}
	s.body = &recordingBody{rc: resp.Body}
	s.r = events.NewBuildStreamReader(s.body)
	return nil
}

// recordingBody keeps the body's read error, which tells a broken
// connection (worth a reconnect) from a stream that is wrong.
type recordingBody struct {
	rc  io.ReadCloser
	err error
}

func (b *recordingBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		b.err = err
	}
	return n, err
}
