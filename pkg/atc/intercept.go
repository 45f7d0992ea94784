package atc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gorilla/websocket"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/stepserver"
)

// Intercept timings. The sidecar may reconnect after a network blip, so a
// short disconnection does not end a session; a pod that is gone does.
const (
	interceptWriteTimeout = 30 * time.Second
	interceptPingEvery    = 30 * time.Second
	sidecarLostAfter      = 30 * time.Second
	sidecarCheckEvery     = 2 * time.Second
	// maxInterceptMessage bounds one client message (base64 keystrokes or
	// piped stdin in chunks).
	maxInterceptMessage = 1 << 20
)

// errClientGone ends a session whose WebSocket went away: nobody is left to
// tell.
var errClientGone = errors.New("the client closed the connection")

// handleIntercept opens a session in a step's main container and relays it
// over a WebSocket (see package api). The session travels over the step
// sidecar's own gRPC stream: the ATC needs neither pods/exec nor a way into
// the pod.
func (s *Server) handleIntercept(w http.ResponseWriter, r *http.Request) {
	b, ok := s.buildFromPath(w, r)
	if !ok {
		return
	}
	info := b.snapshot()
	q := r.URL.Query()
	step, code, err := interceptStep(info, q.Get("step"))
	if err != nil {
		writeError(w, code, err)
		return
	}
	open, err := sessionOpen(q)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	if !s.streams.Connected(step.ID) {
		writeError(w, http.StatusConflict, notInterceptible(step))
		return
	}
	// The session is opened before the upgrade so that a failure is still
	// an HTTP answer the client can show as it is.
	sess, err := s.streams.OpenSession(r.Context(), step.ID, open)
	if errors.Is(err, stepserver.ErrNotConnected) {
		writeError(w, http.StatusConflict, notInterceptible(step))
		return
	}
	if err != nil {
		writeError(w, http.StatusBadGateway, err)
		return
	}
	// Closing an exited session is harmless; closing a live one kills its
	// process, which is what a person who went away wants.
	defer sess.Close()

	// The default origin check refuses cross-site browser pages; the CLI
	// sends no Origin.
	up := websocket.Upgrader{ReadBufferSize: 16 << 10, WriteBufferSize: 16 << 10}
	conn, err := up.Upgrade(w, r, nil)
	if err != nil {
		// Upgrade has answered the client already.
		s.log.Warn("intercept: websocket upgrade", "build", info.ID, "step", step.ID, "err", err)
		return
	}
	defer conn.Close()
	log := s.log.With("build", info.ID, "step", step.ID, "session", sess.ID)
	log.Info("intercept session opened", "tty", open.GetTty(), "command", open.GetCommand(), "remote", r.RemoteAddr)

	// After the upgrade the request's context lives until this handler
	// returns; the cause says why the relay stopped.
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	go readIntercept(conn, sess, cancel)
	go s.watchSidecar(ctx, step.ID, cancel)
	go pingIntercept(ctx, conn)

	end := relayOutput(ctx, conn, sess)
	log.Info("intercept session ended", "how", end)
}

// interceptStep finds the step the person named (by name or ID), or the
// build's only step; code is the HTTP status of err.
func interceptStep(b api.Build, name string) (api.Step, int, error) {
	if name == "" {
		if len(b.Steps) == 1 {
			return b.Steps[0], 0, nil
		}
		return api.Step{}, http.StatusBadRequest, fmt.Errorf("build %d has %d steps: say which one with step=NAME", b.ID, len(b.Steps))
	}
	for _, st := range b.Steps {
		if st.Name == name || st.ID == name {
			return st, 0, nil
		}
	}
	return api.Step{}, http.StatusNotFound, fmt.Errorf("build %d has no step %q", b.ID, name)
}

// sessionOpen reads the session's parameters from the query.
func sessionOpen(q map[string][]string) (*eventspb.SessionOpen, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	open := &eventspb.SessionOpen{Tty: true, Command: q["cmd"]}
	if v := get("tty"); v != "" {
		tty, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("tty=%q: want true or false", v)
		}
		open.Tty = tty
	}
	for _, p := range []struct {
		name string
		dst  *uint32
	}{{"rows", &open.Rows}, {"cols", &open.Cols}} {
		v := get(p.name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: want a number from 0 to 65535", p.name, v)
		}
		*p.dst = uint32(n)
	}
	if len(open.Command) > 0 && open.Command[0] == "" {
		return nil, errors.New("cmd: the program's name is empty")
	}
	return open, nil
}

func notInterceptible(step api.Step) error {
	if !api.Finished(step.Status) {
		return fmt.Errorf("step %q is not interceptible yet: its sidecar has not connected (the pod may still be starting)", step.Name)
	}
	return fmt.Errorf("step %q is not running or no longer interceptible: its pod is gone "+
		"(a finished step stays interceptible only for the server's --keep-alive)", step.Name)
}

// readIntercept passes the client's messages to the session until the
// client goes away (or breaks the protocol), then cancels the relay.
func readIntercept(conn *websocket.Conn, sess *stepserver.Session, cancel context.CancelCauseFunc) {
	conn.SetReadLimit(maxInterceptMessage)
	for {
		var msg api.InterceptMessage
		if err := conn.ReadJSON(&msg); err != nil {
			var syntax *json.SyntaxError
			var typ *json.UnmarshalTypeError
			if errors.As(err, &syntax) || errors.As(err, &typ) {
				cancel(fmt.Errorf("read a message from the client: %w", err))
				return
			}
			cancel(errClientGone)
			return
		}
		var err error
		switch msg.Type {
		case api.InterceptInput:
			if len(msg.Data) > 0 {
				err = sess.Input(msg.Data, false)
			}
		case api.InterceptEOF:
			err = sess.Input(nil, true)
		case api.InterceptResize:
			if msg.Rows > 0 && msg.Cols > 0 {
				err = sess.Resize(msg.Rows, msg.Cols)
			}
		default:
			err = fmt.Errorf("unknown message type %q", msg.Type)
		}
		if err != nil {
			cancel(fmt.Errorf("pass %s to the step: %w", msg.Type, err))
			return
		}
	}
}

// watchSidecar ends the session when the step's sidecar has been gone for
// a while: its output could never arrive.
func (s *Server) watchSidecar(ctx context.Context, stepID string, cancel context.CancelCauseFunc) {
	tick := time.NewTicker(sidecarCheckEvery)
	defer tick.Stop()
	var since time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			switch {
			case s.streams.Connected(stepID):
				since = time.Time{}
			case since.IsZero():
				since = now
			case now.Sub(since) >= sidecarLostAfter:
				cancel(fmt.Errorf("lost the step's sidecar for %s: its pod is gone or unreachable", sidecarLostAfter))
				return
			}
		}
	}
}

// pingIntercept keeps idle sessions alive through proxies that drop quiet
// connections. WriteControl may run alongside the relay's writes.
func pingIntercept(ctx context.Context, conn *websocket.Conn) {
	tick := time.NewTicker(interceptPingEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(interceptWriteTimeout)); err != nil {
				return
			}
		}
	}
}

// relayOutput writes the session's output to the client until it exits or
// ctx ends, then the final exit or error message, and closes the
// WebSocket. It is the connection's only writer of data frames. It returns
// how the session ended, for the log.
func relayOutput(ctx context.Context, conn *websocket.Conn, sess *stepserver.Session) string {
	send := func(msg api.InterceptMessage) error {
		_ = conn.SetWriteDeadline(time.Now().Add(interceptWriteTimeout))
		return conn.WriteJSON(msg)
	}
	finish := func(msg api.InterceptMessage, how string) string {
		if send(msg) == nil {
			_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""),
				time.Now().Add(interceptWriteTimeout))
		}
		return how
	}
	for {
		out, ok, err := sess.Next(ctx)
		switch {
		case err != nil:
			cause := context.Cause(ctx)
			if errors.Is(cause, errClientGone) {
				return "client went away"
			}
			return finish(api.InterceptMessage{Type: api.InterceptError, Message: cause.Error()}, cause.Error())
		case !ok:
			return finish(api.InterceptMessage{Type: api.InterceptError, Message: "the session ended without an exit status"}, "no exit status")
		}
		if len(out.GetData()) > 0 {
			stream := api.StreamStdout
			if out.GetStream() == eventspb.Stream_STREAM_STDERR {
				stream = api.StreamStderr
			}
			if err := send(api.InterceptMessage{Type: api.InterceptOutput, Stream: stream, Data: out.GetData()}); err != nil {
				return "write to client: " + err.Error()
			}
		}
		if !out.GetExited() {
			continue
		}
		if msg := out.GetError(); msg != "" {
			return finish(api.InterceptMessage{Type: api.InterceptError, Message: msg}, "error: "+msg)
		}
		status := int(out.GetExitStatus())
		return finish(api.InterceptMessage{Type: api.InterceptExit, Status: &status}, "exit "+strconv.Itoa(status))
	}
}
