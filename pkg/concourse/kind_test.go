package concourse

import (
	"encoding/json"
	"testing"
)

func TestPlanKind(t *testing.T) {
	for js, want := range map[string]StepKind{
		`{"task":{"name":"t"}}`: KindTask,
		`{"get":{"name":"g"}}`:  KindGet,
		`{"on_failure":{"step":{"task":{"name":"t"}},"on_failure":{"task":{"name":"h"}}}}`: KindOnFailure,
		`{"across":{"vars":[]},"do":null}`:                                                 KindAcross,
		`{"run":{"message":"m"}}`:                                                          KindRun,
		`{"id":"1"}`:                                                                       "",
	} {
		var p Plan
		if err := json.Unmarshal([]byte(js), &p); err != nil {
			t.Fatal(err)
		}
		if got := p.Kind(); got != want {
			t.Errorf("%s: kind %q, want %q", js, got, want)
		}
	}
	if !KindTry.Composite() || KindTask.Composite() || !KindCheck.RunsPod() || KindLoadVar.RunsPod() {
		t.Error("Composite/RunsPod disagree with the kinds")
	}
}
