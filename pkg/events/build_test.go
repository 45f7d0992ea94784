package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	origin := events.Origin{ID: "5eaaa7a9"}
	config := events.TaskConfig{
		Platform: "linux",
		Image:    "busybox",
		Run:      events.TaskRunConfig{Path: "echo", Args: []string{"Hello, world!"}},
		Inputs:   []events.TaskInputInfo{{Name: "repo", Path: "repo"}},
	}
	for _, e := range []events.Event{
		events.Status{Status: concourse.StatusStarted, Time: 1588270462},
		events.Log{Time: 1588270466, Origin: events.Origin{ID: "5eaaa7a9", Source: events.OriginSourceStdout}, Payload: "Hello, world!\n"},
		events.Error{Message: "pod unschedulable", Origin: origin, Time: 1},
		events.SelectedWorker{Time: 1, Origin: origin, WorkerName: "kind-default"},
		events.InitializeTask{Time: 1, Origin: origin, Config: config},
		events.StartTask{Time: 2, Origin: origin, Config: config},
		events.FinishTask{Time: 3, ExitStatus: 1, Origin: origin},
		events.InitializeGet{Origin: origin, Time: 1},
		events.StartGet{Origin: origin, Time: 1},
		events.FinishGet{Origin: origin, Time: 4, ExitStatus: 0, Version: map[string]string{"ref": "abc"}, Metadata: []events.MetadataField{{Name: "author", Value: "me"}}},
		events.InitializePut{Origin: origin, Time: 1},
		events.StartPut{Origin: origin, Time: 1},
		events.FinishPut{Origin: origin, Time: 5, ExitStatus: 0, Version: map[string]string{"digest": "sha256:1"}},
		events.InitializeCheck{Origin: origin, Time: 1, Name: "repo"},
		events.ImageCheck{Origin: origin, Time: 1, Plan: json.RawMessage(`{"id":"t/image-check","check":{"name":"image","type":"registry-image"}}`)},
	} {
		t.Run(string(e.EventType()), func(t *testing.T) {
			data, err := events.Encode(e)
			if err != nil {
				t.Fatal(err)
			}
			got, err := events.Decode(data)
			if err != nil {
				t.Fatalf("Decode(%s): %v", data, err)
			}
			if !reflect.DeepEqual(got, e) {
				t.Errorf("round trip of %s gave %#v, want %#v", data, got, e)
			}
		})
	}
}

// The JSON of each payload is Concourse's, field for field.
func TestConcourseShapes(t *testing.T) {
	for _, tc := range []struct {
		event events.Event
		want  string
	}{
		{
			events.Log{Time: 10, Origin: events.Origin{ID: "a1", Source: "stderr"}, Payload: "oops\n"},
			`{"data":{"time":10,"origin":{"id":"a1","source":"stderr"},"payload":"oops\n"},"event":"log","version":"5.1"}`,
		},
		{
			events.FinishTask{Time: 10, ExitStatus: 2, Origin: events.Origin{ID: "a1"}},
			`{"data":{"time":10,"exit_status":2,"origin":{"id":"a1"}},"event":"finish-task","version":"4.0"}`,
		},
		{
			events.InitializeCheck{Time: 10, Origin: events.Origin{ID: "a1"}, Name: "repo"},
			`{"data":{"origin":{"id":"a1"},"time":10,"name":"repo"},"event":"initialize-check","version":"1.0"}`,
		},
		{
			events.ImageCheck{Time: 10, Origin: events.Origin{ID: "t"}, Plan: json.RawMessage(`{"id":"t/image-check","check":{"name":"image","type":"registry-image"}}`)},
			`{"data":{"time":10,"origin":{"id":"t"},"plan":{"id":"t/image-check","check":{"name":"image","type":"registry-image"}}},"event":"image-check","version":"1.1"}`,
		},
		{
			events.Status{Status: concourse.StatusSucceeded, Time: 10},
			`{"data":{"status":"succeeded","time":10},"event":"status","version":"1.0"}`,
		},
		{
			events.Error{Message: "boom", Origin: events.Origin{ID: "a1"}, Time: 10},
			`{"data":{"message":"boom","origin":{"id":"a1"},"time":10},"event":"error","version":"4.1"}`,
		},
		{
			events.FinishGet{Origin: events.Origin{ID: "g"}, Time: 10, ExitStatus: 0, Version: map[string]string{"ref": "abc"}, Metadata: []events.MetadataField{{Name: "commit", Value: "abc"}}},
			`{"data":{"origin":{"id":"g"},"time":10,"exit_status":0,"version":{"ref":"abc"},"metadata":[{"name":"commit","value":"abc"}]},"event":"finish-get","version":"5.1"}`,
		},
		{
			events.FinishPut{Origin: events.Origin{ID: "p"}, Time: 10, Version: map[string]string{"v": "1"}},
			`{"data":{"origin":{"id":"p"},"time":10,"exit_status":0,"version":{"v":"1"}},"event":"finish-put","version":"5.1"}`,
		},
		{
			events.InitializeTask{Time: 10, Origin: events.Origin{ID: "t"}, Config: events.TaskConfig{Platform: "linux", Run: events.TaskRunConfig{Path: "echo"}}},
			`{"data":{"time":10,"origin":{"id":"t"},"config":{"platform":"linux","image":"","run":{"path":"echo","args":null,"dir":""},"inputs":null}},"event":"initialize-task","version":"4.0"}`,
		},
		{
			events.StartTask{Time: 10, Origin: events.Origin{ID: "t"}},
			`{"data":{"time":10,"origin":{"id":"t"},"config":{"platform":"","image":"","run":{"path":"","args":null,"dir":""},"inputs":null}},"event":"start-task","version":"5.0"}`,
		},
	} {
		got, err := events.Encode(tc.event)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("Encode(%T)\n got %s\nwant %s", tc.event, got, tc.want)
		}
	}
}

func TestDecodeUnknown(t *testing.T) {
	for _, data := range []string{
		`{"data":{"time":1,"origin":{"id":"x"},"plan":{}},"event":"image-get","version":"1.1"}`,
		`{"data":{"time":1,"origin":{},"payload":"x"},"event":"log","version":"6.0"}`,
	} {
		_, err := events.Decode([]byte(data))
		if !errors.Is(err, events.ErrUnknownEvent) {
			t.Errorf("Decode(%s) = %v, want ErrUnknownEvent", data, err)
		}
	}
	// A newer minor version of a known event is still read.
	e, err := events.Decode([]byte(`{"data":{"time":1,"origin":{"id":"x"},"payload":"hi","extra":true},"event":"log","version":"5.7"}`))
	if err != nil {
		t.Fatalf("newer minor version: %v", err)
	}
	if log, ok := e.(events.Log); !ok || log.Payload != "hi" {
		t.Errorf("decoded %#v", e)
	}
	if _, err := events.Decode([]byte(`{"event":"log","version":"5.1"}`)); err == nil {
		t.Error("Decode accepted an event without data")
	}
	if _, err := events.Decode([]byte(`not json`)); err == nil {
		t.Error("Decode accepted garbage")
	}
}

// A stream as Concourse serves it for the hello-world job, with a get step
// and an event type this package does not know.
const concourseStream = "id: 0\n" +
	"event: event\n" +
	`data: {"data":{"status":"started","time":1588270462},"event":"status","version":"1.0"}` + "\n" +
	"\n" +
	"id: 1\n" +
	"event: event\n" +
	`data: {"data":{"time":1588270462,"origin":{"id":"5eaaa7a8"},"plan":{"id":"5eaaa7a8","get":{}}},"event":"image-get","version":"1.1"}` + "\n" +
	"\n" +
	"id: 2\n" +
	"event: event\n" +
	`data: {"data":{"origin":{"id":"5eaaa7a7"},"time":1588270463,"exit_status":0,"version":{"ref":"8f0c1b2"},"metadata":[{"name":"author","value":"someone"},{"name":"message","value":"fix"}]},"event":"finish-get","version":"5.1"}` + "\n" +
	"\n" +
	"id: 3\n" +
	"event: event\n" +
	`data: {"data":{"time":1588270463,"origin":{"id":"5eaaa7a9"},"selected_worker":"worker-1"},"event":"selected-worker","version":"1.0"}` + "\n" +
	"\n" +
	"id: 4\n" +
	"event: event\n" +
	`data: {"data":{"time":1588270463,"origin":{"id":"5eaaa7a9"},"config":{"platform":"linux","image":"","run":{"path":"echo","args":["Hello, world!"],"dir":""},"inputs":null}},"event":"initialize-task","version":"4.0"}` + "\n" +
	"\n" +
	"id: 5\n" +
	"event: event\n" +
	`data: {"data":{"time":1588270466,"origin":{"id":"5eaaa7a9"},"config":{"platform":"linux","image":"","run":{"path":"echo","args":["Hello, world!"],"dir":""},"inputs":null}},"event":"start-task","version":"5.0"}` + "\n" +
	"\n" +
	"id: 6\n" +
	"event: event\n" +
	`data: {"data":{"time":1588270466,"origin":{"id":"5eaaa7a9","source":"stdout"},"payload":"Hello, world!\n"},"event":"log","version":"5.1"}` + "\n" +
	"\n" +
	"id: 7\n" +
	"event: event\n" +
	`data: {"data":{"time":1588270466,"exit_status":0,"origin":{"id":"5eaaa7a9"}},"event":"finish-task","version":"4.0"}` + "\n" +
	"\n" +
	"id: 8\n" +
	"event: event\n" +
	`data: {"data":{"status":"succeeded","time":1588270466},"event":"status","version":"1.0"}` + "\n" +
	"\n" +
	"id: 9\n" +
	"event: end\n" +
	"data\n" +
	"\n"

func TestReadConcourseStream(t *testing.T) {
	r := events.NewBuildStreamReader(strings.NewReader(concourseStream))
	var (
		got     []events.Event
		ids     []string
		unknown int
	)
	for {
		id, env, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		e, err := env.Decode()
		if errors.Is(err, events.ErrUnknownEvent) {
			unknown++
			continue
		}
		if err != nil {
			t.Fatalf("event %s: %v", id, err)
		}
		ids = append(ids, id)
		got = append(got, e)
	}
	if unknown != 1 {
		t.Errorf("%d unknown events, want 1 (image-get)", unknown)
	}
	if want := "0 2 3 4 5 6 7 8"; strings.Join(ids, " ") != want {
		t.Errorf("ids = %v, want %s", ids, want)
	}
	origin := events.Origin{ID: "5eaaa7a9"}
	config := events.TaskConfig{Platform: "linux", Run: events.TaskRunConfig{Path: "echo", Args: []string{"Hello, world!"}}}
	want := []events.Event{
		events.Status{Status: concourse.StatusStarted, Time: 1588270462},
		events.FinishGet{
			Origin: events.Origin{ID: "5eaaa7a7"}, Time: 1588270463, Version: map[string]string{"ref": "8f0c1b2"},
			Metadata: []events.MetadataField{{Name: "author", Value: "someone"}, {Name: "message", Value: "fix"}},
		},
		events.SelectedWorker{Time: 1588270463, Origin: origin, WorkerName: "worker-1"},
		events.InitializeTask{Time: 1588270463, Origin: origin, Config: config},
		events.StartTask{Time: 1588270466, Origin: origin, Config: config},
		events.Log{Time: 1588270466, Origin: events.Origin{ID: "5eaaa7a9", Source: "stdout"}, Payload: "Hello, world!\n"},
		events.FinishTask{Time: 1588270466, ExitStatus: 0, Origin: origin},
		events.Status{Status: concourse.StatusSucceeded, Time: 1588270466},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events:\n got %#v\nwant %#v", got, want)
	}
	if r.LastID() != "9" {
		t.Errorf("LastID = %q, want 9", r.LastID())
	}
}

func TestWriteThenReadStream(t *testing.T) {
	var buf bytes.Buffer
	sent := []events.Event{
		events.Status{Status: concourse.StatusStarted, Time: 1},
		events.Log{Time: 2, Origin: events.Origin{ID: "s", Source: "stderr"}, Payload: "line one\nline two\r\n"},
		events.FinishTask{Time: 3, ExitStatus: 7, Origin: events.Origin{ID: "s"}},
	}
	for i, e := range sent {
		env, err := events.NewEnvelope(e)
		if err != nil {
			t.Fatal(err)
		}
		if err := events.WriteSSE(&buf, uint64(i), env); err != nil {
			t.Fatal(err)
		}
	}
	if err := events.WriteSSEEnd(&buf, uint64(len(sent))); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(buf.String(), "id: 3\nevent: end\ndata\n\n") {
		t.Errorf("stream does not end like Concourse's:\n%s", buf.String())
	}

	r := events.NewBuildStreamReader(&buf)
	for i, want := range sent {
		id, env, err := r.Next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if id != strconv.Itoa(i) {
			t.Errorf("id = %q, want %d", id, i)
		}
		got, err := env.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("event %d = %#v, want %#v", i, got, want)
		}
	}
	if _, _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("after end: %v, want io.EOF", err)
	}
}

func TestStreamCut(t *testing.T) {
	env, err := events.NewEnvelope(events.Status{Status: concourse.StatusStarted, Time: 1})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := events.WriteSSE(&buf, 41, env); err != nil {
		t.Fatal(err)
	}
	// A half-written event at the end is dropped.
	buf.WriteString("id: 42\nevent: event\ndata: {\"data\":")
	r := events.NewBuildStreamReader(&buf)
	if _, _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Next(); !errors.Is(err, events.ErrStreamCut) {
		t.Errorf("err = %v, want ErrStreamCut", err)
	}
	if r.LastID() != "41" {
		t.Errorf("LastID = %q, want 41 (the last complete event)", r.LastID())
	}
}

func TestEnvelopeJSON(t *testing.T) {
	env, err := events.NewEnvelope(events.Status{Status: concourse.StatusAborted, Time: 9})
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	var back events.Envelope
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.Event != events.EventTypeStatus || back.Version != "1.0" || string(back.Data) != `{"status":"aborted","time":9}` {
		t.Errorf("envelope = %+v (%s)", back, back.Data)
	}
}
