package stepserver

import (
	"context"
	"fmt"
	"sync"

	"github.com/google/uuid"

	"github.com/porter-ci/porter/pkg/events/eventspb"
)

// Session is an intercept session running in a step's main container,
// carried over the sidecar's stream.
type Session struct {
	ID     string
	stepID string
	srv    *Server
	// output delivers the session's output in order; it is closed after the
	// message that has Exited set.
	output chan *eventspb.SessionOutput
	done   chan struct{}

	closeOnce sync.Once
}

// Next returns the session's next output; ok is false once the session has
// exited (after its last message) or been closed.
func (sess *Session) Next(ctx context.Context) (out *eventspb.SessionOutput, ok bool, err error) {
	select {
	case out, ok = <-sess.output:
		return out, ok, nil
	case <-sess.done:
		return nil, false, nil
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

// OpenSession starts an intercept session in the step.
func (s *Server) OpenSession(ctx context.Context, stepID string, open *eventspb.SessionOpen) (*Session, error) {
	sess := &Session{ID: uuid.NewString(), stepID: stepID, srv: s, output: make(chan *eventspb.SessionOutput, 256), done: make(chan struct{})}
	open.SessionId = sess.ID
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stepLocked(stepID)
	if err := s.sendLocked(st, &eventspb.ATCMessage{Msg: &eventspb.ATCMessage_SessionOpen{SessionOpen: open}}); err != nil {
		return nil, fmt.Errorf("open session in step %q: %w", stepID, err)
	}
	st.sessions[sess.ID] = sess
	return sess, nil
}

// Input sends keystrokes (or stdin bytes) to the session; eof closes its stdin.
func (sess *Session) Input(data []byte, eof bool) error {
	return sess.send(&eventspb.ATCMessage{Msg: &eventspb.ATCMessage_SessionInput{
		SessionInput: &eventspb.SessionInput{SessionId: sess.ID, Data: data, Eof: eof}}})
}

// Resize changes the session's terminal size.
func (sess *Session) Resize(rows, cols uint32) error {
	return sess.send(&eventspb.ATCMessage{Msg: &eventspb.ATCMessage_SessionResize{
		SessionResize: &eventspb.SessionResize{SessionId: sess.ID, Rows: rows, Cols: cols}}})
}

// Close ends the session (the process in the container is killed).
func (sess *Session) Close() error {
	err := sess.send(&eventspb.ATCMessage{Msg: &eventspb.ATCMessage_SessionClose{
		SessionClose: &eventspb.SessionClose{SessionId: sess.ID}}})
	sess.srv.mu.Lock()
	if st, ok := sess.srv.steps[sess.stepID]; ok {
		delete(st.sessions, sess.ID)
	}
	sess.srv.mu.Unlock()
	sess.closeOnce.Do(func() { close(sess.done) })
	return err
}

func (sess *Session) send(msg *eventspb.ATCMessage) error {
	sess.srv.mu.Lock()
	defer sess.srv.mu.Unlock()
	st, ok := sess.srv.steps[sess.stepID]
	if !ok {
		return ErrNotConnected
	}
	return sess.srv.sendLocked(st, msg)
}

func (s *Server) deliverSession(stepID string, out *eventspb.SessionOutput) {
	s.mu.Lock()
	var sess *Session
	if st, ok := s.steps[stepID]; ok {
		sess = st.sessions[out.GetSessionId()]
		if sess != nil && out.GetExited() {
			delete(st.sessions, sess.ID)
		}
	}
	s.mu.Unlock()
	if sess == nil {
		return
	}
	// Blocking here slows the sidecar's stream rather than dropping output;
	// only this function sends on or closes output, so there is no race.
	select {
	case sess.output <- out:
	case <-sess.done:
		return
	}
	if out.GetExited() {
		close(sess.output)
	}
}

// end finishes a session from the server's side with an error as its last
// message (or, if its reader is far behind, by closing it).
func (sess *Session) end(reason string) {
	select {
	case sess.output <- &eventspb.SessionOutput{SessionId: sess.ID, Exited: true, ExitStatus: -1, Error: reason}:
		close(sess.output)
	default:
		sess.closeOnce.Do(func() { close(sess.done) })
	}
}
