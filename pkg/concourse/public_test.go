package concourse

import (
	"encoding/json"
	"testing"
)

func TestPublicPlanHidesTaskConfig(t *testing.T) {
	var in any
	_ = json.Unmarshal([]byte(`{"id":"1","do":[{"id":"2","task":{"name":"t","privileged":false,"hermetic":false,"config":{"params":{"SECRET":"x"}}}}]}`), &in)
	out, _ := json.Marshal(PublicPlanTree(in))
	if want := `{"do":[{"id":"2","task":{"hermetic":false,"name":"t","privileged":false}}],"id":"1"}`; string(out) != want {
		t.Errorf("public plan %s, want %s", out, want)
	}
}

func TestPublicPlanHidesAcrossValuesAndStepDetails(t *testing.T) {
	p := &Plan{ID: "3", Across: &AcrossPlan{Vars: []AcrossVar{{Var: "x", Values: []any{"secret"}, MaxInFlight: 1}}, SubStepTemplate: "{}", FailFast: true}}
	out, _ := json.Marshal(PublicPlan(p))
	if want := `{"across":{"fail_fast":true,"vars":[{"name":"x"}]},"id":"3"}`; string(out) != want {
		t.Errorf("public plan %s, want %s", out, want)
	}
	p = &Plan{ID: "1", Do: &DoPlan{
		{ID: "2", LoadVar: &LoadVarPlan{Name: "v", File: "a/f"}},
		{ID: "4", SetPipeline: &SetPipelinePlan{Name: "p", File: "a/p.yml", Vars: map[string]any{"k": "secret"}}},
	}}
	out, _ = json.Marshal(PublicPlan(p))
	if want := `{"do":[{"id":"2","load_var":{"name":"v"}},{"id":"4","set_pipeline":{"instance_vars":null,"name":"p","team":null}}],"id":"1"}`; string(out) != want {
		t.Errorf("public plan %s, want %s", out, want)
	}
}
