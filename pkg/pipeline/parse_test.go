package pipeline

import (
	"encoding/json"
	"strings"
	"testing"
)

const fullPipeline = `
shared: &alpine {type: registry-image, source: {repository: alpine}}
resource_types:
- name: my-type
  type: registry-image
  source: {repository: example/my-type}
  defaults: {branch: main}
  privileged: true
resources:
- name: repo
  type: git
  source: {uri: https://example.com/repo.git}
  check_every: 1m
- name: out
  type: my-type
  source: {target: x}
jobs:
- name: unit
  serial: true
  max_in_flight: 2
  disable_reruns: true
  plan:
  - get: repo
    trigger: true
    version: every
  - task: test
    file: repo/ci/test.yml
    params: {COUNT: 10000000000000001, FLAG: true}
    timeout: 10m
    attempts: 2
    on_failure:
      put: out
      params: {status: failed}
  ensure:
    task: cleanup
    config:
      platform: linux
      image_resource: *alpine
      run: {path: true}
- name: ship
  plan:
  - in_parallel:
    - get: repo
      passed: [unit]
    - do:
      - try:
          load_var: v
          file: repo/v
  - in_parallel:
      limit: 2
      fail_fast: true
      steps:
      - put: out
        inputs: [repo]
        get_params: {skip: true}
      - put: out2
        resource: out
        no_get: true
        inputs: detect
        restart_on_pod_loss: true
`

func TestParseFullPipeline(t *testing.T) {
	cfg, err := Parse([]byte(fullPipeline))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Resources) != 2 || len(cfg.ResourceTypes) != 1 || len(cfg.Jobs) != 2 {
		t.Fatalf("got %d resources, %d types, %d jobs", len(cfg.Resources), len(cfg.ResourceTypes), len(cfg.Jobs))
	}
	unit := cfg.Jobs[0]
	if !unit.Serial || unit.MaxInFlight != 2 {
		t.Errorf("unit job settings lost: %+v", unit)
	}
	get := unit.Plan[0]
	if get.Get != "repo" || !get.Trigger || get.Version == nil || !get.Version.Every {
		t.Errorf("get step: %+v", get)
	}
	task := unit.Plan[1]
	if task.Task != "test" || task.File != "repo/ci/test.yml" || task.Timeout != "10m" || task.Attempts != 2 {
		t.Errorf("task step: %+v", task)
	}
	// Numbers stay exact through parsing.
	if got := task.Params["COUNT"]; got != json.Number("10000000000000001") {
		t.Errorf("COUNT = %#v", got)
	}
	if task.OnFailure == nil || task.OnFailure.Put != "out" {
		t.Errorf("on_failure: %+v", task.OnFailure)
	}
	if unit.Ensure == nil || unit.Ensure.Task != "cleanup" || !strings.Contains(string(unit.Ensure.Config), `"repository":"alpine"`) {
		t.Errorf("job ensure: %+v", unit.Ensure)
	}

	ship := cfg.Jobs[1]
	par := ship.Plan[0].InParallel
	if par == nil || len(par.Steps) != 2 || par.Steps[0].Passed[0] != "unit" {
		t.Fatalf("in_parallel list form: %+v", par)
	}
	if try := par.Steps[1].Do[0].Try; try == nil || try.LoadVar != "v" || try.File != "repo/v" {
		t.Errorf("do/try/load_var: %+v", par.Steps[1])
	}
	obj := ship.Plan[1].InParallel
	if obj == nil || obj.Limit != 2 || !obj.FailFast || len(obj.Steps) != 2 {
		t.Fatalf("in_parallel object form: %+v", obj)
	}
	if string(obj.Steps[0].Inputs) != `["repo"]` || obj.Steps[0].GetParams["skip"] != true {
		t.Errorf("put: %+v", obj.Steps[0])
	}
	if !obj.Steps[1].NoGet || obj.Steps[1].Resource != "out" || string(obj.Steps[1].Inputs) != `"detect"` || !obj.Steps[1].RestartOnPodLoss {
		t.Errorf("put no_get: %+v", obj.Steps[1])
	}
}

func TestParseJSON(t *testing.T) {
	cfg, err := Parse([]byte(`{"resources":[{"name":"r","type":"git","source":{}}],"jobs":[{"name":"j","plan":[{"get":"r","version":{"ref":"abc"}}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if v := cfg.Jobs[0].Plan[0].Version; v == nil || v.Pinned["ref"] != "abc" {
		t.Errorf("pinned version: %+v", v)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want []string // every one must appear in the error
	}{
		{"not yaml", "jobs: [", []string{"parse pipeline config"}},
		{"empty", "", []string{"config is empty"}},
		{"not an object", "- a", []string{"config must be an object"}},
		{"duplicate key", "jobs: []\njobs: []", []string{"jobs"}},
		{"resources not a list", "resources: {a: 1}", []string{"resources: must be a list"}},
		{"unknown resource key", "resources:\n- name: r\n  type: git\n  sorce: {}",
			[]string{`resources.r: unknown key "sorce"`}},
		{"unknown resource key without name", "resources:\n- type: git\n  bogus: 1",
			[]string{`resources[0]: unknown key "bogus"`}},
		{"unknown resource type key", "resource_types:\n- name: t\n  type: git\n  image: x",
			[]string{`resource_types.t: unknown key "image"`}},
		{"unknown group key", "groups:\n- name: g\n  job: [a]", []string{`groups.g: unknown key "job"`}},
		{"unknown job key", "jobs:\n- name: j\n  serail: true\n  plan: []", []string{`jobs.j: unknown key "serail"`}},
		{"job without plan", "jobs:\n- name: j", []string{"jobs.j: has no plan"}},
		{"wrong type", "jobs:\n- name: j\n  serial: yes please\n  plan: []", []string{"jobs.j.serial: cannot be a string here (want true or false)"}},
		{"max_in_flight not a number", "jobs:\n- name: j\n  max_in_flight: lots\n  plan: []", []string{"jobs.j.max_in_flight: cannot be a string here (want a whole number)"}},
		{"step not an object", "jobs:\n- name: j\n  plan: [get]", []string{"jobs.j.plan[0]: must be an object"}},
		{"no step kind", "jobs:\n- name: j\n  plan:\n  - timeout: 1m", []string{"jobs.j.plan[0]: no step configured"}},
		{"two step kinds", "jobs:\n- name: j\n  plan:\n  - get: a\n    put: a", []string{"jobs.j.plan[0]: a step can only be one of", "not get and put at once"}},
		{"passed on a task", "jobs:\n- name: j\n  plan:\n  - task: t\n    file: f\n    passed: [x]",
			[]string{`jobs.j.plan[0].task(t): unknown key "passed" for a task step`}},
		{"tags on a do", "jobs:\n- name: j\n  plan:\n  - do: []\n    tags: [x]",
			[]string{`jobs.j.plan[0].do: unknown key "tags" for a do step`}},
		{"get_params on a get", "jobs:\n- name: j\n  plan:\n  - get: r\n    get_params: {}",
			[]string{`jobs.j.plan[0].get(r): unknown key "get_params" for a get step`}},
		{"unknown key in a hook", "jobs:\n- name: j\n  plan:\n  - get: r\n    on_success:\n      task: t\n      bogus: 1",
			[]string{`jobs.j.plan[0].get(r).on_success.task(t): unknown key "bogus" for a task step`}},
		{"unknown key in a job hook", "jobs:\n- name: j\n  plan: []\n  on_failure:\n    put: r\n    trigger: true",
			[]string{`jobs.j.on_failure.put(r): unknown key "trigger" for a put step`}},
		{"nested do", "jobs:\n- name: j\n  plan:\n  - do:\n    - get: r\n    - task: t\n      resource: r",
			[]string{`jobs.j.plan[0].do[1].task(t): unknown key "resource" for a task step`}},
		{"nested try", "jobs:\n- name: j\n  plan:\n  - try:\n      get: r\n      no_get: true",
			[]string{`jobs.j.plan[0].try.get(r): unknown key "no_get" for a get step`}},
		{"in_parallel bad key", "jobs:\n- name: j\n  plan:\n  - in_parallel:\n      step: []",
			[]string{`jobs.j.plan[0].in_parallel: unknown key "step"`}},
		{"in_parallel wrong type", "jobs:\n- name: j\n  plan:\n  - in_parallel: 3",
			[]string{`in_parallel: must be a list of steps or an object`}},
		{"in_parallel nested step", "jobs:\n- name: j\n  plan:\n  - in_parallel:\n      steps:\n      - get: r\n        file: x",
			[]string{`jobs.j.plan[0].in_parallel.steps[0].get(r): unknown key "file" for a get step`}},
		{"step name not a string", "jobs:\n- name: j\n  plan:\n  - get: [r]", []string{"jobs.j.plan[0].get: must be a string"}},
		{"bad version", "jobs:\n- name: j\n  plan:\n  - get: r\n    version: newest",
			[]string{`jobs.j.plan[0].get(r).version: version must be "latest", "every" or a version, not newest`}},
		{"bad put inputs", "jobs:\n- name: j\n  plan:\n  - put: r\n    inputs: some",
			[]string{`jobs.j.plan[0].put(r).inputs: must be "all", "detect" or a list of names, not "some"`}},
		{"non-string put input", "jobs:\n- name: j\n  plan:\n  - put: r\n    inputs: [1]",
			[]string{`non-string put input: 1`}},
		{"task config not an object", "jobs:\n- name: j\n  plan:\n  - task: t\n    config: x",
			[]string{`jobs.j.plan[0].task(t).config: must be an object`}},
		{"fail_fast without across", "jobs:\n- name: j\n  plan:\n  - task: t\n    file: f\n    fail_fast: true",
			[]string{`unknown key "fail_fast" for a task step`}},
		{"run step", "jobs:\n- name: j\n  plan:\n  - run: hello\n    type: proto", []string{"run steps (prototypes) are not supported"}},
		{"all errors reported", "resources:\n- name: r\n  bogus: 1\njobs:\n- name: j\n  plan:\n  - task: t\n    passed: []",
			[]string{`resources.r: unknown key "bogus"`, `jobs.j.plan[0].task(t): unknown key "passed"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatalf("no error; parsed %+v", cfg)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestParseAcceptsModifiers(t *testing.T) {
	cfg, err := Parse([]byte(`
jobs:
- name: j
  plan:
  - do: []
    timeout: 1h
    attempts: 3
    ensure: {task: t, file: f}
  - task: t
    file: f
    across:
    - var: v
      values: [1, 2]
    fail_fast: true
  - set_pipeline: other
    file: f
    team: main
    vars: {a: 1}
    var_files: [x]
    instance_vars: {b: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	plan := cfg.Jobs[0].Plan
	if plan[0].Timeout != "1h" || plan[0].Attempts != 3 || plan[0].Ensure == nil {
		t.Errorf("do modifiers: %+v", plan[0])
	}
	if len(plan[1].Across) == 0 || !plan[1].FailFast {
		t.Errorf("across: %+v", plan[1])
	}
	if plan[2].SetPipeline != "other" || plan[2].Team != "main" || plan[2].InstanceVars["b"] != json.Number("2") {
		t.Errorf("set_pipeline: %+v", plan[2])
	}
}

// A parsed config written back as JSON (what `fly get-pipeline` shows)
// parses to the same config.
func TestParseRoundTrip(t *testing.T) {
	cfg, err := Parse([]byte(fullPipeline))
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse(js)
	if err != nil {
		t.Fatalf("reparse %s: %v", js, err)
	}
	js2, _ := json.Marshal(again)
	if string(js) != string(js2) {
		t.Errorf("round trip differs:\n%s\n%s", js, js2)
	}
}
