package events

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// The build event stream follows Concourse's /api/v1/builds/:id/events: one
// server-sent event named "event" per build event, with the event's number
// as its id and the envelope's JSON as its data, and a last event named
// "end" once the build is over and every event was sent. A client that
// reconnects sends the last id it saw in the Last-Event-ID header.
const (
	SSENameEvent = "event"
	SSENameEnd   = "end"

	// StreamVersionHeader and StreamVersion are the response header Concourse
	// sets on the stream, which clients such as fly check.
	StreamVersionHeader = "X-ATC-Stream-Version"
	StreamVersion       = "2.0"

	// SSEContentType is the stream's Content-Type.
	SSEContentType = "text/event-stream; charset=utf-8"
)

// MaxSSELineLength bounds one line of a stream, so that a broken or hostile
// server cannot make a reader buffer without limit.
const MaxSSELineLength = 16 << 20

// SSEEvent is one server-sent event.
type SSEEvent struct {
	ID   string
	Name string
	Data []byte
}

// Write renders the event in the text/event-stream format.
func (e SSEEvent) Write(w io.Writer) error {
	var b bytes.Buffer
	if e.ID != "" {
		fmt.Fprintf(&b, "id: %s\n", e.ID)
	}
	if e.Name != "" {
		fmt.Fprintf(&b, "event: %s\n", e.Name)
	}
	// Every line of the data is a data field of its own; an empty line is a
	// bare "data" field, as Concourse writes it.
	for _, line := range bytes.Split(e.Data, []byte("\n")) {
		if len(line) == 0 {
			b.WriteString("data\n")
		} else {
			fmt.Fprintf(&b, "data: %s\n", line)
		}
	}
	b.WriteString("\n")
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("write server-sent event %q: %w", e.ID, err)
	}
	return nil
}

// WriteSSE writes one build event of the stream. The caller flushes.
func WriteSSE(w io.Writer, id uint64, env Envelope) error {
	data, err := json.Marshal(env)
	if err != nil {
		return fmt.Errorf("encode %s event %d: %w", env.Event, id, err)
	}
	return SSEEvent{ID: strconv.FormatUint(id, 10), Name: SSENameEvent, Data: data}.Write(w)
}

// WriteSSEEnd writes the stream's last event, which says the build is over;
// id is one more than the last build event's.
func WriteSSEEnd(w io.Writer, id uint64) error {
	return SSEEvent{ID: strconv.FormatUint(id, 10), Name: SSENameEnd}.Write(w)
}

// SSEReader reads server-sent events as the HTML standard describes them:
// lines end in LF, CRLF or CR; a blank line ends an event; lines starting
// with ":" are comments; "field: value" loses one space after the colon;
// several data lines join with LF; the last id seen carries over to later
// events; an event cut off by the end of the stream is dropped.
type SSEReader struct {
	scanner *bufio.Scanner
	// idBuffer is the last id field read; it becomes lastID only when its
	// event is complete.
	idBuffer string
	lastID   string
}

// NewSSEReader reads events from r.
func NewSSEReader(r io.Reader) *SSEReader {
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 0, 64<<10), MaxSSELineLength)
	s.Split(scanSSELines)
	return &SSEReader{scanner: s}
}

// Next returns the next event; io.EOF when the stream ended.
func (r *SSEReader) Next() (SSEEvent, error) {
	var (
		name    string
		data    bytes.Buffer
		hasData bool
		started bool
	)
	for r.scanner.Scan() {
		line := r.scanner.Bytes()
		if len(line) == 0 {
			if !started {
				continue
			}
			r.lastID = r.idBuffer
			if !hasData {
				// Per the standard an event without data is not dispatched,
				// but its id still counts; Concourse's "end" always has a
				// (bare) data field.
				name, started = "", false
				continue
			}
			return SSEEvent{ID: r.lastID, Name: name, Data: bytes.Clone(data.Bytes())}, nil
		}
		if line[0] == ':' {
			continue
		}
		started = true
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "id":
			// An id containing NUL is ignored, as the standard says.
			if bytes.IndexByte(value, 0) < 0 {
				r.idBuffer = string(value)
			}
		case "event":
			name = string(value)
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.Write(value)
			hasData = true
		}
		// Other fields (e.g. "retry") mean nothing to a build event reader.
	}
	if err := r.scanner.Err(); err != nil {
		return SSEEvent{}, fmt.Errorf("read server-sent events: %w", err)
	}
	return SSEEvent{}, io.EOF
}

// LastID is the id of the last event read, for a reconnect's Last-Event-ID.
func (r *SSEReader) LastID() string { return r.lastID }

// scanSSELines splits at LF, CRLF or CR.
func scanSSELines(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if atEOF && len(data) == 0 {
		return 0, nil, nil
	}
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		if data[i] == '\n' {
			return i + 1, data[:i], nil
		}
		// A CR at the end of what has been read may be the first half of
		// a CRLF.
		if i+1 == len(data) && !atEOF {
			return 0, nil, nil
		}
		if i+1 < len(data) && data[i+1] == '\n' {
			return i + 2, data[:i], nil
		}
		return i + 1, data[:i], nil
	}
	if atEOF {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// BuildStreamReader reads a build's event stream.
type BuildStreamReader struct {
	sse *SSEReader
}

// NewBuildStreamReader reads the build events in r, a response body of
// /api/v1/builds/:id/events.
func NewBuildStreamReader(r io.Reader) *BuildStreamReader {
	return &BuildStreamReader{sse: NewSSEReader(r)}
}

// ErrStreamCut means the stream ended before its "end" event: the build may
// still be running, and a client should reconnect with Last-Event-ID.
var ErrStreamCut = errors.New("build event stream ended before the build did")

// Next returns the next build event's id and envelope. It returns io.EOF
// after the stream's "end" event, and ErrStreamCut when the stream stopped
// without one. Events of other names are skipped. The envelope's payload is
// left to Envelope.Decode, so that a caller can skip what it does not know.
func (r *BuildStreamReader) Next() (string, Envelope, error) {
	for {
		ev, err := r.sse.Next()
		if errors.Is(err, io.EOF) {
			return "", Envelope{}, ErrStreamCut
		}
		if err != nil {
			return "", Envelope{}, err
		}
		switch ev.Name {
		case SSENameEnd:
			return "", Envelope{}, io.EOF
		case SSENameEvent:
			var env Envelope
			if err := json.Unmarshal(ev.Data, &env); err != nil {
				return ev.ID, Envelope{}, fmt.Errorf("decode build event %s: %w", ev.ID, err)
			}
			return ev.ID, env, nil
		}
	}
}

// LastID is the id of the last event read, for a reconnect's Last-Event-ID.
func (r *BuildStreamReader) LastID() string { return r.sse.LastID() }
