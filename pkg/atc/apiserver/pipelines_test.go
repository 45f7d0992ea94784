package apiserver

import (
	"strings"
	"testing"
)

func TestValidPipelineName(t *testing.T) {
	for _, c := range []struct {
		name    string
		err     bool
		warning string
	}{
		{name: "my-pipeline_1.0"},
		{name: "été"},
		{name: "", err: true},
		{name: "a/b", err: true},
		{name: "..", err: true},
		{name: "a b", err: true},
		{name: `a\b`, err: true},
		{name: "a\x7fb", err: true},
		{name: strings.Repeat("p", 256), err: true},
		{name: "MyPipeline", warning: "must start with a lowercase letter or a number"},
		{name: "my@pipeline", warning: "illegal character '@'"},
		{name: "123", warning: "cannot be just numbers"},
	} {
		w, err := validPipelineName(c.name)
		switch {
		case c.err != (err != nil):
			t.Errorf("validPipelineName(%q): error %v, want error %v", c.name, err, c.err)
		case c.warning == "" && w != nil:
			t.Errorf("validPipelineName(%q): warning %+v, want none", c.name, w)
		case c.warning != "" && (w == nil || !strings.Contains(w.Message, c.warning) || w.Type != "invalid_identifier"):
			t.Errorf("validPipelineName(%q): warning %+v, want one saying %q", c.name, w, c.warning)
		}
	}
}

func TestParsePipelineConfig(t *testing.T) {
	cfg, _, errs, err := parsePipelineConfig([]byte(`
resources: [{name: r, type: mock, source: {}}]
jobs:
- name: a
  plan: [{get: r}, {put: r}]
- name: b
  plan:
  - get: r
    passed: [a]
  ensure: {put: r}
`), "application/x-yaml", nil)
	if err != nil || len(errs) > 0 || len(cfg.Jobs) != 2 || cfg.Jobs[1].Plan[0].Passed[0] != "a" {
		t.Fatalf("a valid config: %+v, %v, %v", cfg, errs, err)
	}
	_, _, errs, err = parsePipelineConfig([]byte(`
resources: [{name: r, type: mock, source: {}}, {name: r, type: mock, source: {}}]
jobs:
- name: a
  plan: [{get: nope}, {get: r, passed: [ghost]}]
  on_failure: {put: missing}
- name: a
  plan: []
`), "application/x-yaml", nil)
	joined := strings.Join(errs, "\n")
	// Concourse's wording, which pkg/pipeline has too.
	for _, want := range []string{`resources[0] and resources[1] have the same name ('r')`, `jobs[0] and jobs[1] have the same name ('a')`,
		`unknown resource 'nope'`, `no matching job(s) for 'ghost'`, `unknown resource 'missing'`} {
		if !strings.Contains(joined, want) {
			t.Errorf("errors %q do not say %q", errs, want)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := parsePipelineConfig([]byte("jobs: [{name: a, plan: [], colour: blue}]"), "application/x-yaml", nil); err == nil ||
		!strings.Contains(err.Error(), "colour") {
		t.Fatalf("an unknown key: %v", err)
	}
	if _, _, _, err := parsePipelineConfig([]byte("jobs: [:"), "application/x-yaml", nil); err == nil {
		t.Fatal("YAML that does not parse was accepted")
	}
}
