package sidecar

import (
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/redact"
)

// The journal shows a credential the process printed as ((redacted)); the
// event the caller holds (sent to the ATC, which redacts it itself) is left
// alone.
func TestJournalRedactsCredentials(t *testing.T) {
	a := &action.Action{StepID: "s1", Build: action.Build{ID: "1"}}
	trail, err := newAuditTrail(t.TempDir(), a, "pod", nil, redact.New([]string{"hunter2", "multi\nline"}))
	if err != nil {
		t.Fatal(err)
	}
	defer trail.close()
	printed := &eventspb.Event{Seq: 1, Payload: &eventspb.Event_Output{Output: &eventspb.Output{Data: []byte("token=hunter2 ok\n")}}}
	trail.record(printed)
	trail.record(&eventspb.Event{Seq: 2, Payload: &eventspb.Event_Output{Output: &eventspb.Output{Data: []byte("multi\n")}}})
	trail.record(&eventspb.Event{Seq: 3, Payload: &eventspb.Event_Output{Output: &eventspb.Output{Data: []byte("plain\n")}}})
	if string(printed.GetOutput().GetData()) != "token=hunter2 ok\n" {
		t.Errorf("record changed the caller's event: %q", printed.GetOutput().GetData())
	}
	body, _, err := trail.compressedJournal()
	if err != nil {
		t.Fatal(err)
	}
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	raw, err := dec.DecodeAll(body, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var ev eventspb.Event
		if err := protojson.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("journal line %q: %v", line, err)
		}
		out = append(out, string(ev.GetOutput().GetData()))
	}
	want := []string{"token=((redacted)) ok\n", "((redacted))\n", "plain\n"}
	if strings.Join(out, "|") != strings.Join(want, "|") {
		t.Errorf("journal output %q, want %q", out, want)
	}
}
