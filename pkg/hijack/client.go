package hijack

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/porter-ci/porter/pkg/concourse"
)

// ClientOptions say where to open a session and what to run in it.
type ClientOptions struct {
	// URL is http(s)://host/api/v1/teams/T/containers/ID/hijack; it is
	// dialed as ws(s).
	URL string
	// Header is sent with the upgrade request: Authorization.
	Header http.Header
	// Spec is the process to run; see SessionOpen for what Porter does
	// with each field.
	Spec concourse.HijackProcessSpec
	// Stdin is passed to the process and closed at its end; nil is an
	// empty stdin. A Read that never returns (a terminal) keeps one
	// goroutine past Run's return, as with fly.
	Stdin io.Reader
	// Stdout and Stderr get the process's output (nil discards it).
	Stdout, Stderr io.Writer
	// Resize delivers the terminal's new sizes (optional).
	Resize <-chan concourse.HijackWindowSize
	// TLSConfig is for wss (nil: the system's roots).
	TLSConfig *tls.Config
}

// ErrExecutableNotFound is Run's error when the command does not exist in
// the container; fly retries its default "bash" as "sh" on it.
var ErrExecutableNotFound = errors.New("executable not found in the container")

// SessionError is a failure the server reported, such as a lost sidecar;
// fly prints Message in red and exits 255.
type SessionError struct {
	Message string
}

func (e *SessionError) Error() string { return e.Message }

// StatusError is the server's refusal to open the session, before the
// upgrade: no such container (404), not allowed (403), a bad token (401).
type StatusError struct {
	StatusCode int
	Status     string
	// Body is the start of the answer's body, trimmed.
	Body string
}

func (e *StatusError) Error() string {
	if e.Body == "" {
		return "the server answered " + e.Status
	}
	return "the server answered " + e.Status + ": " + e.Body
}

// Client timings. fly pings every 10 s; the server answers every ping, so
// a long silence means the connection is dead.
const (
	clientPingEvery    = 10 * time.Second
	clientReadTimeout  = time.Minute
	clientWriteTimeout = 30 * time.Second
	stdinChunk         = 32 << 10
)

// Run opens a session, passes stdin and terminal sizes to it and its output
// to Stdout and Stderr, and returns the process's exit status. An error
// message from the server (*SessionError, or ErrExecutableNotFound) or a
// connection that breaks before the exit status is an error. Canceling ctx
// closes the session, which kills the process.
func Run(ctx context.Context, opts ClientOptions) (exitStatus int, err error) {
	u, err := websocketURL(opts.URL)
	if err != nil {
		return -1, err
	}
	d := websocket.Dialer{
		Proxy:            http.ProxyFromEnvironment,
		TLSClientConfig:  opts.TLSConfig,
		HandshakeTimeout: time.Minute,
		ReadBufferSize:   16 << 10,
		WriteBufferSize:  16 << 10,
	}
	conn, resp, err := d.DialContext(ctx, u, opts.Header)
	if err != nil {
		if resp != nil && errors.Is(err, websocket.ErrBadHandshake) {
			return -1, fmt.Errorf("open a session at %s: %w", u, statusError(resp))
		}
		return -1, fmt.Errorf("open a session at %s: %w", u, err)
	}
	defer conn.Close()
	conn.SetReadLimit(maxMessage)

	_ = conn.SetWriteDeadline(time.Now().Add(clientWriteTimeout))
	if err := conn.WriteJSON(opts.Spec); err != nil {
		return -1, fmt.Errorf("send the process spec: %w", err)
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// Canceling closes the connection, which unblocks the read below; the
	// server then closes the session.
	stop := context.AfterFunc(ctx, func() {
		_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""),
			time.Now().Add(time.Second))
		_ = conn.Close()
	})
	defer stop()

	inputs := make(chan concourse.HijackInput)
	go readStdin(ctx, opts.Stdin, inputs)
	go writeInputs(ctx, conn, inputs, opts.Resize, cancel)
	return readOutputs(ctx, conn, opts)
}

// websocketURL turns the hijack URL into the one to dial.
func websocketURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("parse the hijack URL: %w", err)
	}
	switch u.Scheme {
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	case "ws", "wss":
	default:
		return "", fmt.Errorf("hijack URL %q: want http or https", raw)
	}
	return u.String(), nil
}

func statusError(resp *http.Response) *StatusError {
	// The dialer keeps the start of the body for us.
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	return &StatusError{StatusCode: resp.StatusCode, Status: resp.Status, Body: strings.TrimSpace(string(body))}
}

// readStdin turns stdin into messages, and its end (or a read error: no
// more input either way, as with fly) into "closed".
func readStdin(ctx context.Context, r io.Reader, inputs chan<- concourse.HijackInput) {
	send := func(in concourse.HijackInput) bool {
		select {
		case inputs <- in:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if r == nil {
		send(concourse.HijackInput{Closed: true})
		return
	}
	buf := make([]byte, stdinChunk)
	for {
		n, err := r.Read(buf)
		if n > 0 && !send(concourse.HijackInput{Stdin: append([]byte(nil), buf[:n]...)}) {
			return
		}
		if err != nil {
			send(concourse.HijackInput{Closed: true})
			return
		}
	}
}

// writeInputs is the connection's only writer of data frames: stdin,
// terminal sizes and pings. A failed write ends the session.
func writeInputs(ctx context.Context, conn *websocket.Conn, inputs <-chan concourse.HijackInput,
	resize <-chan concourse.HijackWindowSize, cancel context.CancelCauseFunc) {
	tick := time.NewTicker(clientPingEvery)
	defer tick.Stop()
	for {
		var in concourse.HijackInput
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(clientWriteTimeout)); err != nil {
				cancel(fmt.Errorf("ping the server: %w", err))
				return
			}
			continue
		case size, ok := <-resize:
			if !ok {
				resize = nil // no more sizes; a nil channel never fires
				continue
			}
			in = concourse.HijackInput{TTYSpec: &concourse.HijackTTYSpec{WindowSize: size}}
		case in = <-inputs:
		}
		_ = conn.SetWriteDeadline(time.Now().Add(clientWriteTimeout))
		if err := conn.WriteJSON(in); err != nil {
			cancel(fmt.Errorf("send input to the server: %w", err))
			return
		}
	}
}

// readOutputs passes the server's messages on until the exit status or an
// error. It is the connection's only reader.
func readOutputs(ctx context.Context, conn *websocket.Conn, opts ClientOptions) (int, error) {
	stdout, stderr := opts.Stdout, opts.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	conn.SetPongHandler(func(string) error {
		return conn.SetReadDeadline(time.Now().Add(clientReadTimeout))
	})
	var notFound bool
	for {
		_ = conn.SetReadDeadline(time.Now().Add(clientReadTimeout))
		_, data, err := conn.ReadMessage()
		if err != nil {
			if cause := context.Cause(ctx); cause != nil {
				return -1, fmt.Errorf("the session was closed: %w", cause)
			}
			if notFound {
				return -1, ErrExecutableNotFound
			}
			if websocket.IsCloseError(err, websocket.CloseNormalClosure) {
				return -1, errors.New("the server closed the session without an exit status")
			}
			return -1, fmt.Errorf("the connection broke before the process exited: %w", err)
		}
		var out concourse.HijackOutput
		if err := json.Unmarshal(data, &out); err != nil {
			return -1, fmt.Errorf("read a message from the server: %w", err)
		}
		if len(out.Stdout) > 0 {
			if _, err := stdout.Write(out.Stdout); err != nil {
				return -1, fmt.Errorf("write the process's stdout: %w", err)
			}
		}
		if len(out.Stderr) > 0 {
			if _, err := stderr.Write(out.Stderr); err != nil {
				return -1, fmt.Errorf("write the process's stderr: %w", err)
			}
		}
		switch {
		case out.ExitStatus != nil:
			awaitClose(conn)
			return *out.ExitStatus, nil
		case out.ExecutableNotFound:
			// The error message that says which follows.
			notFound = true
		case out.Error != "":
			awaitClose(conn)
			// fly recognizes the text too, from servers that do not set
			// the flag.
			if notFound || strings.Contains(out.Error, notFoundText) {
				return -1, fmt.Errorf("%w: %s", ErrExecutableNotFound, out.Error)
			}
			return -1, &SessionError{Message: out.Error}
		}
	}
}

// awaitClose reads until the server's close frame, which the connection
// answers by itself, so that both ends part cleanly.
func awaitClose(conn *websocket.Conn) {
	_ = conn.SetReadDeadline(time.Now().Add(closeGrace))
	for {
		if _, _, err := conn.NextReader(); err != nil {
			return
		}
	}
}
