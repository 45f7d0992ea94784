package hijack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events/eventspb"
)

// Session is a process running in a step's main container; it is satisfied
// by *stepserver.Session.
type Session interface {
	// Next returns the session's next output; ok is false once the session
	// has ended (after the message that has Exited set) or been closed.
	Next(ctx context.Context) (*eventspb.SessionOutput, bool, error)
	// Input sends stdin bytes; eof closes stdin.
	Input(data []byte, eof bool) error
	// Resize changes the terminal's size.
	Resize(rows, cols uint32) error
	// Close ends the session, killing its process if it still runs.
	Close() error
}

// ServeOptions configure Serve.
type ServeOptions struct {
	// Open starts the process the client asked for (after the upgrade,
	// once the spec arrived).
	Open func(ctx context.Context, open *eventspb.SessionOpen) (Session, error)
	// Alive reports whether the step's sidecar is still connected; the
	// session ends with an error once it has been gone for LostAfter. Nil
	// means it is never checked.
	Alive func() bool
	// LostAfter is how long the sidecar may be away (it may reconnect
	// after a network blip); CheckEvery is how often Alive is asked.
	LostAfter, CheckEvery time.Duration
	// PingEvery is how often the client is pinged; WriteTimeout bounds one
	// write to it.
	PingEvery, WriteTimeout time.Duration
	// Log is where Serve logs (default slog.Default()).
	Log *slog.Logger
}

// Defaults of ServeOptions. The sidecar may reconnect after a network blip,
// so a short disconnection does not end a session; a pod that is gone does.
const (
	DefaultLostAfter    = 30 * time.Second
	DefaultCheckEvery   = 2 * time.Second
	DefaultPingEvery    = 30 * time.Second
	DefaultWriteTimeout = 30 * time.Second
)

const (
	// specTimeout is how long a client has after the upgrade to send its
	// process spec.
	specTimeout = 30 * time.Second
	// closeGrace is how long one end waits for the other's close frame
	// before it drops the connection.
	closeGrace = 2 * time.Second
	// maxMessage bounds one message (fly sends stdin in chunks of 32 KiB,
	// base64 in JSON).
	maxMessage = 1 << 20
	// notFoundText is what fly looks for in an error to retry "bash" as
	// "sh", and what the sidecar's lookPath and Go's exec both say.
	notFoundText = "executable file not found"
)

// errClientGone ends a session whose WebSocket went away: nobody is left to
// tell.
var errClientGone = errors.New("the client closed the connection")

func (o ServeOptions) withDefaults() ServeOptions {
	if o.LostAfter <= 0 {
		o.LostAfter = DefaultLostAfter
	}
	if o.CheckEvery <= 0 {
		o.CheckEvery = DefaultCheckEvery
	}
	if o.PingEvery <= 0 {
		o.PingEvery = DefaultPingEvery
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return o
}

// readTimeout is how long the client may stay silent: it answers every
// ping, so a longer silence means the connection is dead.
func (o ServeOptions) readTimeout() time.Duration {
	return max(2*o.PingEvery, o.PingEvery+o.WriteTimeout)
}

// Serve upgrades the request, reads the process spec, opens the session and
// relays until the process exits, the client goes away or the sidecar is
// lost. It returns how it ended (for the log). Whatever fails after the
// upgrade reaches the client as an error message, which fly prints.
func Serve(w http.ResponseWriter, r *http.Request, opts ServeOptions) string {
	opts = opts.withDefaults()
	if opts.Open == nil {
		http.Error(w, "intercept is not available", http.StatusInternalServerError)
		return "no way to open a session (ServeOptions.Open is nil)"
	}
	// The default origin check refuses cross-site browser pages; fly sends
	// no Origin.
	up := websocket.Upgrader{HandshakeTimeout: 5 * time.Second, ReadBufferSize: 16 << 10, WriteBufferSize: 16 << 10}
	conn, err := up.Upgrade(w, r, nil)
	if err != nil {
		// Upgrade has answered the client already.
		return "websocket upgrade: " + err.Error()
	}
	defer conn.Close()
	conn.SetReadLimit(maxMessage)
	c := &serverConn{conn: conn, opts: opts}

	var spec concourse.HijackProcessSpec
	_ = conn.SetReadDeadline(time.Now().Add(specTimeout))
	_, data, err := conn.ReadMessage()
	if err != nil {
		return "read the process spec: " + err.Error()
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		// Concourse only closes with 1003 here, which fly takes for a
		// clean end (exit 0); the error message first makes it fail.
		_ = c.send(concourse.HijackOutput{Error: "malformed process spec: " + err.Error()})
		c.close(websocket.CloseUnsupportedData, "malformed process spec")
		c.drain()
		return "malformed process spec: " + err.Error()
	}
	c.path = spec.Path
	open, err := SessionOpen(spec)
	if err != nil {
		how := c.finish(c.errorOutputs(err.Error()), "refused: "+err.Error())
		c.drain()
		return how
	}

	// After the upgrade the request's context lives until this function
	// returns; the cause says why the relay stopped.
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	sess, err := opts.Open(ctx, open)
	if err != nil {
		msg := fmt.Sprintf("open a session in the step: %v", err)
		how := c.finish(c.errorOutputs(msg), msg)
		c.drain()
		return how
	}
	// Closing an exited session is harmless; closing a live one kills its
	// process, which is what a person who went away wants.
	defer sess.Close()
	opts.Log.Info("intercept session opened", "tty", open.GetTty(), "command", open.GetCommand(), "remote", r.RemoteAddr)

	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		c.relayInput(sess, cancel)
	}()
	if opts.Alive != nil {
		go watchSidecar(ctx, opts, cancel)
	}
	go c.ping(ctx)

	how := c.relayOutput(ctx, sess)
	// Wait for the client's answer to our close frame: dropping the
	// connection with its messages unread could reset it before it has
	// read our last ones.
	select {
	case <-readDone:
	case <-time.After(closeGrace):
	}
	return how
}

// serverConn is the server's end of one session's WebSocket. relayOutput
// (or Serve itself before the session opens) is its only writer of data
// frames; control frames may be written from anywhere.
type serverConn struct {
	conn *websocket.Conn
	opts ServeOptions
	// path is the command the client asked for ("": the image's shell).
	path string
}

func (c *serverConn) send(out concourse.HijackOutput) error {
	_ = c.conn.SetWriteDeadline(time.Now().Add(c.opts.WriteTimeout))
	return c.conn.WriteJSON(out)
}

func (c *serverConn) close(code int, text string) {
	_ = c.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text),
		time.Now().Add(c.opts.WriteTimeout))
}

// finish sends the session's last messages and a normal close frame, and
// returns how, for the log.
func (c *serverConn) finish(outs []concourse.HijackOutput, how string) string {
	for _, out := range outs {
		if err := c.send(out); err != nil {
			return how + " (not told to the client: " + err.Error() + ")"
		}
	}
	c.close(websocket.CloseNormalClosure, "")
	return how
}

// drain reads until the client answers the close frame (or closeGrace
// passes); it is for when no relayInput is reading.
func (c *serverConn) drain() {
	_ = c.conn.SetReadDeadline(time.Now().Add(closeGrace))
	for {
		if _, _, err := c.conn.NextReader(); err != nil {
			return
		}
	}
}

// errorOutputs is the end of a session that failed. A missing "bash" is
// flagged the way Concourse does, so that fly retries it as "sh" (its
// default shell's fallback). fly takes any error saying "executable file
// not found" for that flag and exits 0 silently, so another missing command
// is said in other words: fly prints them and exits 255.
func (c *serverConn) errorOutputs(msg string) []concourse.HijackOutput {
	if !strings.Contains(msg, notFoundText) {
		return []concourse.HijackOutput{{Error: msg}}
	}
	if c.path == "bash" {
		return []concourse.HijackOutput{{ExecutableNotFound: true}, {Error: msg}}
	}
	return []concourse.HijackOutput{{Error: strings.Replace(msg, notFoundText, "command not found", 1)}}
}

// relayInput passes the client's messages to the session until the client
// goes away (or breaks the protocol), then cancels the relay. It is the
// connection's only reader.
func (c *serverConn) relayInput(sess Session, cancel context.CancelCauseFunc) {
	timeout := c.opts.readTimeout()
	// The client answers every ping; a pong proves it is still there even
	// when the person types nothing.
	c.conn.SetPongHandler(func(string) error {
		return c.conn.SetReadDeadline(time.Now().Add(timeout))
	})
	for {
		_ = c.conn.SetReadDeadline(time.Now().Add(timeout))
		_, data, err := c.conn.ReadMessage()
		if err != nil {
			c.opts.Log.Debug("intercept: read from the client", "err", err)
			cancel(errClientGone)
			return
		}
		var in concourse.HijackInput
		if err := json.Unmarshal(data, &in); err != nil {
			cancel(fmt.Errorf("read a message from the client: %w", err))
			return
		}
		// Concourse's messages carry one of these; a message with several
		// gets them all, stdin first so that "closed" comes after its data.
		if len(in.Stdin) > 0 {
			if err := sess.Input(in.Stdin, false); err != nil {
				cancel(fmt.Errorf("pass stdin to the step: %w", err))
				return
			}
		}
		if in.TTYSpec != nil {
			size := in.TTYSpec.WindowSize
			if size.Rows > 0 && size.Columns > 0 {
				if err := sess.Resize(uint32(size.Rows), uint32(size.Columns)); err != nil {
					cancel(fmt.Errorf("pass the terminal's size to the step: %w", err))
					return
				}
			}
		}
		if in.Closed {
			if err := sess.Input(nil, true); err != nil {
				cancel(fmt.Errorf("close the process's stdin: %w", err))
				return
			}
		}
	}
}

// watchSidecar ends the session when the step's sidecar has been gone for a
// while: its output could never arrive.
func watchSidecar(ctx context.Context, opts ServeOptions, cancel context.CancelCauseFunc) {
	tick := time.NewTicker(opts.CheckEvery)
	defer tick.Stop()
	var since time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			switch {
			case opts.Alive():
				since = time.Time{}
			case since.IsZero():
				since = now
			case now.Sub(since) >= opts.LostAfter:
				cancel(fmt.Errorf("lost the step's sidecar for %s: its pod is gone or unreachable", opts.LostAfter))
				return
			}
		}
	}
}

// ping keeps idle sessions alive through proxies that drop quiet
// connections, and lets relayInput notice a client that is gone.
func (c *serverConn) ping(ctx context.Context) {
	tick := time.NewTicker(c.opts.PingEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if err := c.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.opts.WriteTimeout)); err != nil {
				// The connection is broken: relayInput's read fails too.
				c.opts.Log.Debug("intercept: ping the client", "err", err)
				return
			}
		}
	}
}

// relayOutput writes the session's output to the client until it exits or
// the relay is canceled, then the last message and a close frame. It returns
// how the session ended, for the log.
func (c *serverConn) relayOutput(ctx context.Context, sess Session) string {
	for {
		out, ok, err := sess.Next(ctx)
		switch {
		case err != nil:
			cause := context.Cause(ctx)
			if cause == nil {
				cause = err
			}
			if errors.Is(cause, errClientGone) {
				return "client went away"
			}
			return c.finish(c.errorOutputs(cause.Error()), cause.Error())
		case !ok:
			return c.finish(c.errorOutputs("the session ended without an exit status"), "no exit status")
		}
		if data := out.GetData(); len(data) > 0 {
			msg := concourse.HijackOutput{Stdout: data}
			if out.GetStream() == eventspb.Stream_STREAM_STDERR {
				msg = concourse.HijackOutput{Stderr: data}
			}
			if err := c.send(msg); err != nil {
				return "write to the client: " + err.Error()
			}
		}
		if !out.GetExited() {
			continue
		}
		if msg := out.GetError(); msg != "" {
			return c.finish(c.errorOutputs(msg), "error: "+msg)
		}
		status := int(out.GetExitStatus())
		return c.finish([]concourse.HijackOutput{{ExitStatus: &status}}, "exit "+strconv.Itoa(status))
	}
}
