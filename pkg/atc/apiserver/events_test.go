package apiserver

import (
	"encoding/json"
	"testing"
)

func TestPublicPlanHidesTaskConfig(t *testing.T) {
	var in any
	_ = json.Unmarshal([]byte(`{"id":"1","do":[{"id":"2","task":{"name":"t","privileged":false,"hermetic":false,"config":{"params":{"SECRET":"x"}}}}]}`), &in)
	out, _ := json.Marshal(publicPlan(in))
	if want := `{"do":[{"id":"2","task":{"hermetic":false,"name":"t","privileged":false}}],"id":"1"}`; string(out) != want {
		t.Errorf("public plan %s, want %s", out, want)
	}
}
