package pipeline

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/concourse"
)

func parseFile(t *testing.T, path string) *concourse.Config {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if _, errs := Validate(cfg, Options{}); len(errs) > 0 {
		t.Fatalf("%s does not validate: %q", path, errs)
	}
	return cfg
}

func findJob(t *testing.T, cfg *concourse.Config, name string) *concourse.JobConfig {
	t.Helper()
	for i := range cfg.Jobs {
		if cfg.Jobs[i].Name == name {
			return &cfg.Jobs[i]
		}
	}
	t.Fatalf("no job %s", name)
	return nil
}

// toTree turns anything into its decoded JSON, to compare shapes.
func toTree(t *testing.T, v any) any {
	t.Helper()
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var tree any
	if err := json.Unmarshal(js, &tree); err != nil {
		t.Fatal(err)
	}
	return tree
}

// expandGolden replaces the golden file's shorthands: "TYPES" is the
// pipeline's resource types, "CUSTOM(id)" the image of a step of type
// my-type whose plan id is id.
func expandGolden(t *testing.T, tree any, cfg *concourse.Config) any {
	custom := regexp.MustCompile(`^CUSTOM\((\w+)\)$`)
	switch n := tree.(type) {
	case map[string]any:
		for k, v := range n {
			n[k] = expandGolden(t, v, cfg)
		}
	case []any:
		for i, v := range n {
			n[i] = expandGolden(t, v, cfg)
		}
	case string:
		if n == "TYPES" {
			return toTree(t, cfg.ResourceTypes)
		}
		if m := custom.FindStringSubmatch(n); m != nil {
			id := m[1]
			return map[string]any{
				"base_type":  "registry-image",
				"privileged": true,
				"check_plan": map[string]any{"id": id + "/image-check", "check": map[string]any{
					"name": "my-type", "type": "registry-image",
					"source": map[string]any{"repository": "example/my-type"},
					"image":  map[string]any{"base_type": "registry-image"},
				}},
				"get_plan": map[string]any{"id": id + "/image-get", "get": map[string]any{
					"name": "my-type", "type": "registry-image",
					"source":       map[string]any{"repository": "example/my-type"},
					"image":        map[string]any{"base_type": "registry-image"},
					"version_from": id + "/image-check",
				}},
			}
		}
	}
	return tree
}

func TestJobPlanGolden(t *testing.T) {
	cfg := parseFile(t, "testdata/job.yml")
	inputs := map[string]InputVersion{
		"repo": {Version: map[string]string{"ref": "abc"}},
		"img":  {Version: map[string]string{"digest": "sha256:1"}},
	}
	plan, err := JobPlan(cfg, findJob(t, cfg, "build"), inputs, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	goldenJS, err := os.ReadFile("testdata/job.plan.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden any
	if err := json.Unmarshal(goldenJS, &golden); err != nil {
		t.Fatal(err)
	}
	want := expandGolden(t, golden, cfg)
	got := toTree(t, plan)
	if !reflect.DeepEqual(got, want) {
		gotJS, _ := json.MarshalIndent(got, "", "  ")
		wantJS, _ := json.MarshalIndent(want, "", "  ")
		t.Errorf("plan differs from testdata/job.plan.json\ngot:\n%s\nwant:\n%s", gotJS, wantJS)
	}

	// The same job compiles to the same plan, ids included.
	again, err := JobPlan(cfg, findJob(t, cfg, "build"), inputs, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(toTree(t, again), got) {
		t.Error("plan is not deterministic")
	}

	// Every id is unique.
	seen := map[concourse.PlanID]bool{}
	plan.Each(func(p *concourse.Plan) {
		if seen[p.ID] {
			t.Errorf("id %s used twice", p.ID)
		}
		seen[p.ID] = true
	})
}

// jobPlan compiles the single job of a pipeline.
func jobPlan(t *testing.T, yaml string, inputs map[string]InputVersion, opts PlanOptions) (concourse.Plan, error) {
	t.Helper()
	cfg, err := Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return JobPlan(cfg, &cfg.Jobs[0], inputs, opts)
}

func v(ref string) InputVersion { return InputVersion{Version: map[string]string{"ref": ref}} }

func TestJobPlanShapes(t *testing.T) {
	const resources = "resources:\n- {name: r, type: git, source: {uri: u}}\n"
	for _, tc := range []struct {
		name   string
		yaml   string
		inputs map[string]InputVersion
		want   string // JSON of the plan, compared as a tree
	}{
		{
			name:   "get with step name other than the resource, tags and timeout",
			yaml:   resources + "jobs:\n- {name: j, plan: [{get: src, resource: r, tags: [t1], timeout: 5m}]}",
			inputs: map[string]InputVersion{"src": v("1")},
			want: `{"id":"2","do":[{"id":"1","get":{"name":"src","resource":"r","type":"git","source":{"uri":"u"},
				"image":{"base_type":"git"},"version":{"ref":"1"},"tags":["t1"],"timeout":"5m"}}]}`,
		},
		{
			name: "put without get keeps inputs",
			yaml: resources + "jobs:\n- {name: j, plan: [{put: r, no_get: true, inputs: [a, b], params: {x: 1}}]}",
			want: `{"id":"2","do":[{"id":"1","put":{"name":"r","resource":"r","type":"git","source":{"uri":"u"},
				"image":{"base_type":"git"},"inputs":["a","b"],"params":{"x":1}}}]}`,
		},
		{
			name: "put that may run again when its pod is lost (Porter's restart_on_pod_loss)",
			yaml: resources + "jobs:\n- {name: j, plan: [{put: r, no_get: true, restart_on_pod_loss: true}]}",
			want: `{"id":"2","do":[{"id":"1","put":{"name":"r","resource":"r","type":"git","source":{"uri":"u"},
				"image":{"base_type":"git"},"restart_on_pod_loss":true}}]}`,
		},
		{
			name: "task with everything",
			yaml: "jobs:\n- name: j\n  plan:\n  - task: t\n    config: {platform: linux}\n    image: img\n    privileged: true\n" +
				"    vars: {a: b}\n    params: {P: q}\n    input_mapping: {in: src}\n    output_mapping: {out: dst}\n" +
				"    container_limits: {cpu: 2}\n    tags: [big]\n    timeout: 1h",
			want: `{"id":"2","do":[{"id":"1","task":{"name":"t","privileged":true,"hermetic":false,"config":{"platform":"linux"},
				"image":"img","vars":{"a":"b"},"params":{"P":"q"},"input_mapping":{"in":"src"},"output_mapping":{"out":"dst"},
				"container_limits":{"cpu":2},"tags":["big"],"timeout":"1h"}}]}`,
		},
		{
			name: "try, do and timeout on composites",
			yaml: "jobs:\n- {name: j, plan: [{try: {do: [{task: t, file: f}], timeout: 2m}}]}",
			want: `{"id":"5","do":[{"id":"4","try":{"step":{"id":"3","timeout":{"duration":"2m",
				"step":{"id":"2","do":[{"id":"1","task":{"name":"t","privileged":false,"hermetic":false,"config_path":"f"}}]}}}}}]}`,
		},
		{
			name: "hooks nest ensure outermost, attempts inside them",
			yaml: "jobs:\n- name: j\n  plan:\n  - task: t\n    file: f\n    attempts: 1\n" +
				"    on_success: {task: s, file: f}\n    on_failure: {task: f, file: f}\n    on_abort: {task: a, file: f}\n" +
				"    on_error: {task: e, file: f}\n    ensure: {task: ens, file: f}",
			want: `{"id":"d","do":[{"id":"c","ensure":{
				"step":{"id":"a","on_error":{
					"step":{"id":"8","on_abort":{
						"step":{"id":"6","on_failure":{
							"step":{"id":"4","on_success":{
								"step":{"id":"2","retry":[{"id":"1","task":{"name":"t","privileged":false,"hermetic":false,"config_path":"f"}}]},
								"on_success":{"id":"3","task":{"name":"s","privileged":false,"hermetic":false,"config_path":"f"}}}},
							"on_failure":{"id":"5","task":{"name":"f","privileged":false,"hermetic":false,"config_path":"f"}}}},
						"on_abort":{"id":"7","task":{"name":"a","privileged":false,"hermetic":false,"config_path":"f"}}}},
					"on_error":{"id":"9","task":{"name":"e","privileged":false,"hermetic":false,"config_path":"f"}}}},
				"ensure":{"id":"b","task":{"name":"ens","privileged":false,"hermetic":false,"config_path":"f"}}}}]}`,
		},
		{
			name: "job hooks wrap the whole plan",
			yaml: "jobs:\n- {name: j, plan: [], on_success: {task: s, file: f}, on_failure: {task: f, file: f}}",
			want: `{"id":"5","on_failure":{
				"step":{"id":"3","on_success":{"step":{"id":"1","do":[]},
					"on_success":{"id":"2","task":{"name":"s","privileged":false,"hermetic":false,"config_path":"f"}}}},
				"on_failure":{"id":"4","task":{"name":"f","privileged":false,"hermetic":false,"config_path":"f"}}}}`,
		},
		{
			name: "in_parallel limit and fail_fast",
			yaml: "jobs:\n- {name: j, plan: [{in_parallel: {limit: 1, fail_fast: true, steps: [{task: t, file: f}]}}]}",
			want: `{"id":"3","do":[{"id":"2","in_parallel":{"limit":1,"fail_fast":true,
				"steps":[{"id":"1","task":{"name":"t","privileged":false,"hermetic":false,"config_path":"f"}}]}}]}`,
		},
		{
			name: "load_var",
			yaml: "jobs:\n- {name: j, plan: [{load_var: v, file: f, reveal: true}]}",
			want: `{"id":"2","do":[{"id":"1","load_var":{"name":"v","file":"f","reveal":true}}]}`,
		},
		{
			name: "set_pipeline",
			yaml: "jobs:\n- {name: j, plan: [{set_pipeline: self, file: f, vars: {a: 1}, var_files: [g]}]}",
			want: `{"id":"2","do":[{"id":"1","set_pipeline":{"name":"self","file":"f","vars":{"a":1},"var_files":["g"]}}]}`,
		},
		{
			name: "across inside the hooks, outside attempts; max_in_flight 1 unless said",
			yaml: "jobs:\n- {name: j, plan: [{task: t, file: f, attempts: 2, fail_fast: true, ensure: {task: e, file: f}, across: [{var: x, values: [a, b]}, {var: z, values: '((.:ys))', max_in_flight: all}]}]}",
			want: `{"id":"7","do":[{"id":"6","ensure":{
				"step":{"id":"4","across":{"vars":[{"name":"x","values":["a","b"],"max_in_flight":1},{"name":"z","values":"((.:ys))"}],"fail_fast":true,
					"substep_template":"{\"id\":\"3\",\"retry\":[{\"id\":\"1\",\"task\":{\"name\":\"t\",\"privileged\":false,\"hermetic\":false,\"config_path\":\"f\"}},{\"id\":\"2\",\"task\":{\"name\":\"t\",\"privileged\":false,\"hermetic\":false,\"config_path\":\"f\"}}]}"}},
				"ensure":{"id":"5","task":{"name":"e","privileged":false,"hermetic":false,"config_path":"f"}}}}]}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := jobPlan(t, tc.yaml, tc.inputs, PlanOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var want any
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatalf("bad want: %v", err)
			}
			if got := toTree(t, plan); !reflect.DeepEqual(got, want) {
				gotJS, _ := json.Marshal(got)
				wantJS, _ := json.Marshal(want)
				t.Errorf("got  %s\nwant %s", gotJS, wantJS)
			}
		})
	}
}

func TestJobPlanErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		yaml   string
		inputs map[string]InputVersion
		opts   PlanOptions
		want   string
		is     error
	}{
		{
			name: "get without a version",
			yaml: "resources:\n- {name: r, type: git, source: {}}\njobs:\n- {name: j, plan: [{get: r}]}",
			want: "plan job j: get r: version for input 'r' not provided",
		},
		{
			name:   "unknown resource",
			yaml:   "jobs:\n- {name: j, plan: [{get: r}]}",
			inputs: map[string]InputVersion{"r": v("1")},
			want:   "get r: unknown resource 'r'",
		},
		{
			name: "unknown resource type",
			yaml: "resources:\n- {name: r, type: git, source: {}}\njobs:\n- {name: j, plan: [{put: r}]}",
			opts: PlanOptions{BaseTypes: []string{"time"}},
			want: "put r: unknown resource type 'git'",
		},
		{
			name: "across with a bad max_in_flight",
			yaml: "jobs:\n- {name: j, plan: [{task: t, file: f, across: [{var: x, values: [1], max_in_flight: 0}]}]}",
			want: "max_in_flight must be a positive number",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := jobPlan(t, tc.yaml, tc.inputs, tc.opts)
			if err == nil {
				t.Fatal("no error")
			}
			if tc.want != "" && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %q is not %q", err, tc.is)
			}
		})
	}
}

// A type whose image comes from another custom type resolves down to a
// base type; a type's tags go to its image's plans.
func TestNestedCustomTypes(t *testing.T) {
	cfg, err := Parse([]byte(`
resource_types:
- {name: outer, type: inner, source: {o: 1}, params: {p: 1}}
- {name: inner, type: registry-image, source: {repository: inner}, tags: [special]}
resources:
- {name: r, type: outer, source: {}}
jobs:
- {name: j, plan: [{get: r}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := JobPlan(cfg, &cfg.Jobs[0], map[string]InputVersion{"r": v("1")}, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	img := (*plan.Do)[0].Get.TypeImage
	if img.BaseType != "registry-image" || img.GetPlan == nil || img.CheckPlan == nil {
		t.Fatalf("image: %+v", img)
	}
	outerGet := img.GetPlan.Get
	if outerGet.Name != "outer" || outerGet.Type != "inner" || outerGet.Params["p"] != json.Number("1") {
		t.Errorf("outer get: %+v", outerGet)
	}
	// The chain goes on under the check, which the executor runs; the get
	// names only the image it runs with (the check's).
	if got := outerGet.TypeImage; got.BaseType != "registry-image" || got.CheckPlan != nil || got.GetPlan != nil {
		t.Errorf("outer get's image: %+v", got)
	}
	outerCheck := img.CheckPlan.Check
	if outerCheck.Name != "outer" || outerCheck.Type != "inner" || img.CheckPlan.ID != "1/image-check" {
		t.Errorf("outer check: %+v", outerCheck)
	}
	inner := outerCheck.TypeImage
	if inner.GetPlan == nil || inner.GetPlan.ID != "1/image-check/image-get" || inner.GetPlan.Get.Type != "registry-image" {
		t.Fatalf("inner image: %+v", inner)
	}
	if got := inner.GetPlan.Get.Tags; len(got) != 1 || got[0] != "special" {
		t.Errorf("inner type's tags not used: %v", got)
	}
	if got := *inner.GetPlan.Get.VersionFrom; got != "1/image-check/image-check" {
		t.Errorf("inner get version_from %s", got)
	}
	if inner.CheckPlan == nil || inner.CheckPlan.Check.TypeImage.BaseType != "registry-image" {
		t.Errorf("inner check: %+v", inner.CheckPlan)
	}
}

// A custom type may shadow a base type of the same name: its image is the
// base type's.
func TestCustomTypeShadowingABaseType(t *testing.T) {
	cfg, err := Parse([]byte(`
resource_types:
- {name: git, type: registry-image, source: {repository: my/git}}
resources:
- {name: r, type: git, source: {}}
jobs:
- {name: j, plan: [{get: r}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, errs := Validate(cfg, Options{}); len(errs) > 0 {
		t.Fatalf("errors: %q", errs)
	}
	plan, err := JobPlan(cfg, &cfg.Jobs[0], map[string]InputVersion{"r": v("1")}, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	img := (*plan.Do)[0].Get.TypeImage
	if img.GetPlan == nil || img.GetPlan.Get.Source["repository"] != "my/git" || img.BaseType != "registry-image" {
		t.Errorf("image: %+v", img)
	}
}

func TestCheckPlan(t *testing.T) {
	cfg := parseFile(t, "testdata/job.yml")
	for _, tc := range []struct {
		name     string
		resource concourse.ResourceConfig
		from     map[string]string
		want     string
	}{
		{
			name:     "base type, default timeout, first check",
			resource: concourse.ResourceConfig{Name: "repo", Type: "git", Source: map[string]any{"uri": "u"}, Tags: []string{"t"}},
			want: `{"id":"1","check":{"name":"repo","resource":"repo","type":"git","source":{"uri":"u"},
				"image":{"base_type":"git"},"timeout":"1h","tags":["t"]}}`,
		},
		{
			name:     "custom type with defaults, from a version",
			resource: concourse.ResourceConfig{Name: "img", Type: "my-type", Source: map[string]any{"depth": 5}, CheckTimeout: "5m"},
			from:     map[string]string{"digest": "d"},
			want: `{"id":"1","check":{"name":"img","resource":"img","type":"my-type","source":{"branch":"main","depth":5},
				"image":"CUSTOM(1)","from_version":{"digest":"d"},"timeout":"5m"}}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := CheckPlan(cfg, &tc.resource, tc.from, PlanOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var want any
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatal(err)
			}
			want = expandGolden(t, want, cfg)
			if got := toTree(t, plan); !reflect.DeepEqual(got, want) {
				gotJS, _ := json.Marshal(got)
				wantJS, _ := json.Marshal(want)
				t.Errorf("got  %s\nwant %s", gotJS, wantJS)
			}
		})
	}

	if _, err := CheckPlan(cfg, &concourse.ResourceConfig{Name: "x", Type: "nope"}, nil, PlanOptions{}); err == nil ||
		!strings.Contains(err.Error(), "plan check of x: unknown resource type 'nope'") {
		t.Errorf("unknown type: %v", err)
	}
}

// Compiling a plan must not change the config it came from.
func TestJobPlanLeavesConfigAlone(t *testing.T) {
	cfg := parseFile(t, "testdata/job.yml")
	before := toTree(t, cfg)
	plan, err := JobPlan(cfg, findJob(t, cfg, "build"), map[string]InputVersion{"repo": v("1"), "img": v("2")}, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	plan.Each(func(p *concourse.Plan) {
		if p.Get != nil {
			p.Get.Source["injected"] = true
		}
	})
	if after := toTree(t, cfg); !reflect.DeepEqual(before, after) {
		t.Error("config changed through the plan")
	}
}
