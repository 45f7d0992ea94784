package events_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events"
)

func readAll(t *testing.T, r io.Reader) []events.SSEEvent {
	t.Helper()
	sr := events.NewSSEReader(r)
	var out []events.SSEEvent
	for {
		ev, err := sr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		out = append(out, ev)
	}
}

func TestSSEReader(t *testing.T) {
	stream := ": a comment\r\n" +
		"retry: 1000\r\n" +
		"id: 1\r\n" +
		"event: event\r\n" +
		"data:no space\r\n" +
		"data:  two spaces\r\n" +
		"\r\n" +
		// An event without data is not dispatched, but its id counts.
		"id: 2\n" +
		"event: ignored\n" +
		"\n" +
		"data: first\rdata\rdata: third\r\r" +
		"id\n" +
		"data: id reset\n" +
		"\n" +
		"data: cut off"
	want := []events.SSEEvent{
		{ID: "1", Name: "event", Data: []byte("no space\n two spaces")},
		{ID: "2", Name: "", Data: []byte("first\n\nthird")},
		{ID: "", Name: "", Data: []byte("id reset")},
	}
	for name, r := range map[string]io.Reader{
		"whole":        strings.NewReader(stream),
		"byte by byte": iotest.OneByteReader(strings.NewReader(stream)),
	} {
		t.Run(name, func(t *testing.T) {
			got := readAll(t, r)
			if len(got) != len(want) {
				t.Fatalf("got %d events %q, want %d", len(got), got, len(want))
			}
			for i := range want {
				if got[i].ID != want[i].ID || got[i].Name != want[i].Name || !bytes.Equal(got[i].Data, want[i].Data) {
					t.Errorf("event %d = {%q %q %q}, want {%q %q %q}", i, got[i].ID, got[i].Name, got[i].Data, want[i].ID, want[i].Name, want[i].Data)
				}
			}
		})
	}
}

func TestSSEWriteRead(t *testing.T) {
	sent := []events.SSEEvent{
		{ID: "7", Name: "event", Data: []byte(`{"a":1}`)},
		{ID: "8", Name: "multi", Data: []byte("one\n\nthree\n")},
		{ID: "9", Name: "end"},
	}
	var buf bytes.Buffer
	for _, ev := range sent {
		if err := ev.Write(&buf); err != nil {
			t.Fatal(err)
		}
	}
	wantText := "id: 7\nevent: event\ndata: {\"a\":1}\n\n" +
		"id: 8\nevent: multi\ndata: one\ndata\ndata: three\ndata\n\n" +
		"id: 9\nevent: end\ndata\n\n"
	if buf.String() != wantText {
		t.Errorf("wrote\n%q\nwant\n%q", buf.String(), wantText)
	}
	got := readAll(t, &buf)
	if len(got) != len(sent) {
		t.Fatalf("read %d events, want %d", len(got), len(sent))
	}
	for i := range sent {
		if got[i].ID != sent[i].ID || got[i].Name != sent[i].Name || !bytes.Equal(got[i].Data, sent[i].Data) {
			t.Errorf("event %d = %+v, want %+v", i, got[i], sent[i])
		}
	}
}

func TestSSELineTooLong(t *testing.T) {
	long := "data: " + strings.Repeat("x", events.MaxSSELineLength+1) + "\n\n"
	_, err := events.NewSSEReader(strings.NewReader(long)).Next()
	if err == nil || errors.Is(err, io.EOF) {
		t.Errorf("err = %v, want a read error", err)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("connection reset") }

func TestWriteSSEError(t *testing.T) {
	env, err := events.NewEnvelope(events.Status{Status: concourse.StatusStarted})
	if err != nil {
		t.Fatal(err)
	}
	if err := events.WriteSSE(failingWriter{}, 1, env); err == nil || !strings.Contains(err.Error(), "connection reset") {
		t.Errorf("err = %v", err)
	}
}
