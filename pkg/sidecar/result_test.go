package sidecar

import (
	"encoding/json"
	"testing"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/events/eventspb"
)

// The audit record and the ATC read these strings: the typed result must
// encode as the literals did, and each must map to its event enum.
func TestStepResultWireForms(t *testing.T) {
	for _, tc := range []struct {
		result StepResult
		json   string
		event  eventspb.Result
	}{
		{Succeeded, "SUCCEEDED", eventspb.Result_RESULT_SUCCEEDED},
		{Failed, "FAILED", eventspb.Result_RESULT_FAILED},
		{Errored, "ERRORED", eventspb.Result_RESULT_ERRORED},
		{Aborted, "ABORTED", eventspb.Result_RESULT_ABORTED},
	} {
		t.Run(tc.json, func(t *testing.T) {
			b, err := json.Marshal(api.StepRecord{StepResult: Result{Result: tc.result}})
			if err != nil {
				t.Fatal(err)
			}
			var rec map[string]any
			if err := json.Unmarshal(b, &rec); err != nil {
				t.Fatal(err)
			}
			if rec["result"] != tc.json {
				t.Errorf("result encodes as %v, want %q", rec["result"], tc.json)
			}
			var back api.StepRecord
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if back.Result != tc.result {
				t.Errorf("decodes as %q, want %q", back.Result, tc.result)
			}
			if got := resultEvent(tc.result); got != tc.event {
				t.Errorf("event result %v, want %v", got, tc.event)
			}
		})
	}
	if got := resultEvent(""); got != eventspb.Result_RESULT_UNSPECIFIED {
		t.Errorf("empty result maps to %v, want unspecified", got)
	}
}
