package atcclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/porter-ci/porter/pkg/api"
)

// InterceptOptions say what to run where in an intercept session.
type InterceptOptions struct {
	// Step is the step's name or ID; empty means the build's only step.
	Step string
	// Command is what to run; empty means the image's shell.
	Command []string
	// TTY asks for a terminal of Rows x Cols (zero: the server's default).
	TTY        bool
	Rows, Cols uint32
}

// InterceptSession is an open intercept session. Send and Recv may be used
// from different goroutines; Close may be called at any time.
type InterceptSession struct {
	conn *websocket.Conn
	// wmu serializes writers: the connection allows one at a time.
	wmu sync.Mutex
}

// interceptWriteTimeout bounds one message to the ATC.
const interceptWriteTimeout = 30 * time.Second

// Intercept opens a session in a build's step: GET
// /api/v1/builds/{id}/intercept as a WebSocket. The ATC's refusals (no such
// build or step, the step's pod is gone) are *StatusError. ctx bounds the
// opening only; Close ends the session.
func (c *Client) Intercept(ctx context.Context, buildID int64, opts InterceptOptions) (*InterceptSession, error) {
	op := "intercept build " + strconv.FormatInt(buildID, 10)
	u, err := url.Parse(c.url(api.InterceptPath(buildID)))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	default:
		u.Scheme = "ws"
	}
	q := url.Values{"tty": {strconv.FormatBool(opts.TTY)}}
	if opts.Step != "" {
		q.Set("step", opts.Step)
	}
	if opts.Rows > 0 && opts.Cols > 0 {
		q.Set("rows", strconv.FormatUint(uint64(opts.Rows), 10))
		q.Set("cols", strconv.FormatUint(uint64(opts.Cols), 10))
	}
	for _, arg := range opts.Command {
		q.Add("cmd", arg)
	}
	u.RawQuery = q.Encode()

	conn, resp, err := c.dialer().DialContext(ctx, u.String(), nil)
	if err != nil {
		if resp != nil && resp.StatusCode/100 != 1 && resp.StatusCode/100 != 2 {
			return nil, statusError(op, resp)
		}
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return &InterceptSession{conn: conn}, nil
}

// dialer reaches the ATC the way the client's HTTP transport does (proxy,
// TLS settings, dialer) where it can tell.
func (c *Client) dialer() *websocket.Dialer {
	d := &websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: time.Minute}
	if t, ok := c.http.Transport.(*http.Transport); ok {
		d.Proxy, d.NetDialContext = t.Proxy, t.DialContext
		if t.TLSClientConfig != nil {
			d.TLSClientConfig = t.TLSClientConfig.Clone()
		}
	}
	return d
}

func (s *InterceptSession) send(msg api.InterceptMessage) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_ = s.conn.SetWriteDeadline(time.Now().Add(interceptWriteTimeout))
	if err := s.conn.WriteJSON(msg); err != nil {
		return fmt.Errorf("send %s: %w", msg.Type, err)
	}
	return nil
}

// Input sends bytes to the process's stdin (or terminal).
func (s *InterceptSession) Input(data []byte) error {
	return s.send(api.InterceptMessage{Type: api.InterceptInput, Data: data})
}

// CloseInput closes the process's stdin (^D with a terminal).
func (s *InterceptSession) CloseInput() error {
	return s.send(api.InterceptMessage{Type: api.InterceptEOF})
}

// Resize tells the process its terminal's new size.
func (s *InterceptSession) Resize(rows, cols uint32) error {
	return s.send(api.InterceptMessage{Type: api.InterceptResize, Rows: rows, Cols: cols})
}

// Recv returns the session's next message: output, then one exit or error.
// It returns io.EOF when the ATC closed the connection cleanly.
func (s *InterceptSession) Recv() (api.InterceptMessage, error) {
	var msg api.InterceptMessage
	err := s.conn.ReadJSON(&msg)
	if websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway) {
		return msg, io.EOF
	}
	if err != nil {
		return msg, fmt.Errorf("read from the ATC: %w", err)
	}
	return msg, nil
}

// Close ends the session; a process still running is killed.
func (s *InterceptSession) Close() error {
	// A polite close frame first, best effort: the connection goes either way.
	_ = s.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""),
		time.Now().Add(time.Second))
	return s.conn.Close()
}

// ExitStatus waits for the session's end, passing its output to stdout and
// stderr, and returns the process's exit status. An error message from the
// ATC, or a connection that ends without an exit status, is an error.
func (s *InterceptSession) ExitStatus(stdout, stderr io.Writer) (int, error) {
	for {
		msg, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return -1, errors.New("the ATC closed the session without an exit status")
		}
		if err != nil {
			return -1, err
		}
		switch msg.Type {
		case api.InterceptOutput:
			w := stdout
			if msg.Stream == api.StreamStderr {
				w = stderr
			}
			if _, err := w.Write(msg.Data); err != nil {
				return -1, fmt.Errorf("write the session's %s: %w", msg.Stream, err)
			}
		case api.InterceptExit:
			if msg.Status == nil {
				return -1, errors.New("the ATC sent an exit without a status")
			}
			return *msg.Status, nil
		case api.InterceptError:
			return -1, errors.New(msg.Message)
		}
	}
}
