package atcfake

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync"

	"github.com/gorilla/websocket"

	"github.com/porter-ci/porter/pkg/api"
)

// InterceptSession is the client's side of one intercept session as the
// fake saw it.
type InterceptSession struct {
	// Build is the {id} of the path; Query the parameters.
	Build string
	Query url.Values
	// Received are the client's messages, in order.
	Received []api.InterceptMessage
}

// Intercept is a stand-in for the ATC's intercept endpoint (GET
// /api/v1/builds/{id}/intercept) and nothing else: a session echoes its
// input on stdout, says "ready" on stderr first, and exits with ExitStatus
// when the client closes stdin or types ^D, as a shell at its prompt would.
type Intercept struct {
	*httptest.Server

	// Refuse, if set, is the answer instead of a session, e.g.
	// http.StatusConflict with Message.
	Refuse  int
	Message string
	// ExitStatus is the status the session exits with; Error, if set, ends
	// it with an error message instead.
	ExitStatus int
	Error      string

	mu       sync.Mutex
	sessions []InterceptSession
}

// NewIntercept starts a fake intercept endpoint; it stops with the test.
// Set its fields before the first session.
func NewIntercept(t interface{ Cleanup(func()) }) *Intercept {
	f := &Intercept{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/builds/{id}/intercept", f.serve)
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

// Sessions lists the sessions so far.
func (f *Intercept) Sessions() []InterceptSession {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := slices.Clone(f.sessions)
	for i := range out {
		out[i].Received = slices.Clone(out[i].Received)
	}
	return out
}

func (f *Intercept) record(i int, msg api.InterceptMessage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sessions[i].Received = append(f.sessions[i].Received, msg)
}

func (f *Intercept) serve(w http.ResponseWriter, r *http.Request) {
	if f.Refuse != 0 {
		writeError(w, f.Refuse, "%s", f.Message)
		return
	}
	f.mu.Lock()
	f.sessions = append(f.sessions, InterceptSession{Build: r.PathValue("id"), Query: r.URL.Query()})
	i := len(f.sessions) - 1
	f.mu.Unlock()
	conn, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer conn.Close()
	send := func(msg api.InterceptMessage) bool { return conn.WriteJSON(msg) == nil }
	if !send(api.InterceptMessage{Type: api.InterceptOutput, Stream: api.StreamStderr, Data: []byte("ready\n")}) {
		return
	}
	for {
		var msg api.InterceptMessage
		if err := conn.ReadJSON(&msg); err != nil {
			return // the client went away: the session is over
		}
		f.record(i, msg)
		switch msg.Type {
		case api.InterceptInput:
			if string(msg.Data) != "\x04" {
				if !send(api.InterceptMessage{Type: api.InterceptOutput, Stream: api.StreamStdout, Data: msg.Data}) {
					return
				}
				continue
			}
			fallthrough
		case api.InterceptEOF:
			end := api.InterceptMessage{Type: api.InterceptExit, Status: &f.ExitStatus}
			if f.Error != "" {
				end = api.InterceptMessage{Type: api.InterceptError, Message: f.Error}
			}
			send(end)
			_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
			return
		}
	}
}
