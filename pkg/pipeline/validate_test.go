package pipeline

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/names"
)

const validPipeline = `
resource_types:
- name: my-type
  type: registry-image
  source: {repository: example/my-type}
  check_every: never
resources:
- name: repo
  type: git
  source: {uri: x}
  check_every: 5m
  check_timeout: 1m
- name: img
  type: my-type
  source: {}
jobs:
- name: build
  max_in_flight: 1
  plan:
  - get: repo
    trigger: true
  - task: compile
    file: repo/compile.yml
    timeout: ((compile_timeout))
  - put: img
- name: test
  serial_groups: [deploys]
  plan:
  - in_parallel:
      limit: 1
      steps:
      - get: repo
        passed: [build]
      - get: image
        resource: img
        passed: [b*]
  - task: run
    config: {platform: linux, run: {path: ls}}
    attempts: 2
groups:
- name: all
  jobs: ["*"]
  resources: [repo]
`

func TestValidateAcceptsAValidPipeline(t *testing.T) {
	cfg, err := Parse([]byte(validPipeline))
	if err != nil {
		t.Fatal(err)
	}
	warnings, errs := Validate(cfg, Options{})
	if len(warnings) != 0 || len(errs) != 0 {
		t.Fatalf("warnings %+v, errors %q", warnings, errs)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		yaml     string
		opts     Options
		errs     []string // each must be in one of the errors
		warnings []string // each must be in one of the warnings' messages
	}{
		{
			name: "no jobs",
			yaml: "resources: []",
			errs: []string{"invalid jobs:\n\tjobs: pipeline must contain at least one job"},
		},
		{
			name: "duplicate resources",
			yaml: "resources:\n- {name: r, type: git, source: {}}\n- {name: r, type: git, source: {}}\njobs:\n- {name: j, plan: [{get: r}]}",
			errs: []string{"invalid resources:\n\tresources[0] and resources[1] have the same name ('r')"},
		},
		{
			name: "duplicate resource types",
			yaml: "resource_types:\n- {name: t, type: git, source: {}}\n- {name: t, type: git, source: {}}\njobs:\n- {name: j, plan: []}",
			errs: []string{"invalid resource types:\n\tresource_types[0] and resource_types[1] have the same name ('t')"},
		},
		{
			name: "duplicate jobs",
			yaml: "jobs:\n- {name: j, plan: []}\n- {name: j, plan: []}",
			errs: []string{"jobs[0] and jobs[1] have the same name ('j')"},
		},
		{
			name: "duplicate groups",
			yaml: "groups:\n- {name: g, jobs: [j]}\n- {name: g, jobs: [j]}\njobs:\n- {name: j, plan: []}",
			errs: []string{"invalid groups:\n\tgroup 'g' appears 2 times. Duplicate names are not allowed."},
		},
		{
			name: "missing names and types",
			yaml: "resources:\n- {source: {}}\nresource_types:\n- {source: {}}\njobs:\n- {plan: []}",
			errs: []string{
				"resources[0]: identifier cannot be an empty string", "resources[0] has no name", "resources[0] has no type",
				"resource_types[0] has no name", "resource_types[0] has no type",
				"jobs[0] has no name",
			},
		},
		{
			name: "get of an unknown resource",
			yaml: "jobs:\n- {name: j, plan: [{get: nope}]}",
			errs: []string{"jobs.j.plan[0].get(nope): unknown resource 'nope'"},
		},
		{
			name: "put of an unknown resource",
			yaml: "jobs:\n- {name: j, plan: [{put: nope}]}",
			errs: []string{"jobs.j.plan[0].put(nope): unknown resource 'nope'"},
		},
		{
			name: "step resource unknown",
			yaml: "resources:\n- {name: r, type: git, source: {}}\njobs:\n- {name: j, plan: [{get: r}, {get: x, resource: nope}]}",
			errs: []string{"jobs.j.plan[1].get(x): unknown resource 'nope'"},
		},
		{
			name: "repeated get name",
			yaml: "resources:\n- {name: r, type: git, source: {}}\njobs:\n- {name: j, plan: [{get: r}, {do: [{get: r}]}]}",
			errs: []string{"jobs.j.plan[1].do[0].get(r): repeated name"},
		},
		{
			name: "unused resource",
			yaml: "resources:\n- {name: r, type: git, source: {}}\njobs:\n- {name: j, plan: []}",
			errs: []string{"resource 'r' is not used"},
		},
		{
			name: "unknown resource type",
			yaml: "resources:\n- {name: r, type: gti, source: {}}\njobs:\n- {name: j, plan: [{get: r}]}",
			errs: []string{"resources.r has unknown resource type 'gti'"},
		},
		{
			name: "base types are a parameter",
			yaml: "resources:\n- {name: r, type: git, source: {}}\njobs:\n- {name: j, plan: [{get: r}]}",
			opts: Options{BaseTypes: []string{"registry-image"}},
			errs: []string{"resources.r has unknown resource type 'git'"},
		},
		{
			name: "resource type of an unknown type",
			yaml: "resource_types:\n- {name: t, type: nope, source: {}}\njobs:\n- {name: j, plan: []}",
			errs: []string{"resource_types.t has unknown resource type 'nope'"},
		},
		{
			name: "resource type of its own type",
			yaml: "resource_types:\n- {name: t, type: t, source: {}}\njobs:\n- {name: j, plan: []}",
			errs: []string{"resource_types.t has unknown resource type 't'"},
		},
		{
			name: "resource types fetching each other",
			yaml: "resource_types:\n- {name: a, type: b, source: {}}\n- {name: b, type: a, source: {}}\njobs:\n- {name: j, plan: []}",
			errs: []string{"resource_types.a: resource types form a cycle: a -> b -> a", "resource_types.b: resource types form a cycle: b -> a -> b"},
		},
		{
			name: "passed an unknown job",
			yaml: "resources:\n- {name: r, type: git, source: {}}\njobs:\n- {name: j, plan: [{get: r, passed: [nope]}]}",
			errs: []string{"jobs.j.plan[0].get(r).passed: no matching job(s) for 'nope'"},
		},
		{
			name: "passed a job without the resource",
			yaml: "resources:\n- {name: r, type: git, source: {}}\n- {name: s, type: git, source: {}}\njobs:\n- {name: a, plan: [{get: s}]}\n- {name: b, plan: [{get: r, passed: [a]}]}",
			errs: []string{"jobs.b.plan[0].get(r).passed: job 'a' does not interact with resource 'r'"},
		},
		{
			name: "passed a job that puts the resource",
			yaml: "resources:\n- {name: r, type: git, source: {}}\njobs:\n- {name: a, plan: [{put: r}]}\n- {name: b, plan: [{get: r, passed: [a]}]}",
		},
		{
			name: "passed cycle",
			yaml: "resources:\n- {name: r, type: git, source: {}}\njobs:\n" +
				"- {name: a, plan: [{get: r, passed: [c]}]}\n- {name: b, plan: [{get: r, passed: [a]}]}\n- {name: c, plan: [{get: r, passed: [b]}]}",
			errs: []string{"pipeline contains a cycle that starts at Job", "'a' -> 'b' -> 'c' -> 'a'"},
		},
		{
			name: "passed itself",
			yaml: "resources:\n- {name: r, type: git, source: {}}\njobs:\n- {name: a, plan: [{get: r, passed: [a]}]}",
			errs: []string{"pipeline contains a cycle that starts at Job 'a': 'a' -> 'a'"},
		},
		{
			name: "group of unknown job and resource",
			yaml: "resources:\n- {name: r, type: git, source: {}}\ngroups:\n- {name: g, jobs: [nope, j], resources: [gone]}\njobs:\n- {name: j, plan: [{get: r}]}",
			errs: []string{"no jobs match 'nope' for group 'g'", "group 'g' has unknown resource 'gone'"},
		},
		{
			name: "job in no group",
			yaml: "groups:\n- {name: g, jobs: [a]}\njobs:\n- {name: a, plan: []}\n- {name: b, plan: []}",
			errs: []string{"job 'b' belongs to no group"},
		},
		{
			name: "bad group glob",
			yaml: "groups:\n- {name: g, jobs: ['[']}\njobs:\n- {name: a, plan: []}",
			errs: []string{"invalid glob expression '[' for group 'g'"},
		},
		{
			name: "task without config or file",
			yaml: "jobs:\n- {name: j, plan: [{task: t}]}",
			errs: []string{"jobs.j.plan[0].task(t): must specify either `file:` or `config:`"},
		},
		{
			name: "task with config and file",
			yaml: "jobs:\n- {name: j, plan: [{task: t, file: f, config: {platform: linux}}]}",
			errs: []string{"jobs.j.plan[0].task(t): must specify one of `file:` or `config:`, not both"},
		},
		{
			name:     "hermetic task",
			yaml:     "jobs:\n- {name: j, plan: [{task: t, file: f, hermetic: true}]}",
			warnings: []string{"jobs.j.plan[0].task(t): specifies `hermetic:` only works against worker containerd runtime"},
		},
		{
			name: "set_pipeline and load_var without file",
			yaml: "jobs:\n- {name: j, plan: [{set_pipeline: p}, {load_var: v}]}",
			errs: []string{"jobs.j.plan[0].set_pipeline(p): no file specified", "jobs.j.plan[1].load_var(v): no file specified"},
		},
		{
			name: "var_sources: dummy is accepted, other types and bad configs are refused by name",
			yaml: "var_sources:\n- {name: ok, type: dummy, config: {vars: {a: 1}}}\n- {name: v, type: ssm, config: {}}\n" +
				"- {name: ok, type: dummy}\n- {name: bad, type: dummy, config: {values: {}}}\n- {type: dummy}\n" +
				"jobs:\n- {name: j, plan: [{task: t, file: f}]}",
			errs: []string{
				"var_sources[1](v): type 'ssm' is not supported by this server (supported: dummy, vault)",
				"var_sources[2](ok): repeated name",
				`var_sources[3](bad): config: unknown key "values"`,
				"var_sources[4]: has no name",
			},
		},
		{
			name: "var_sources: vault is accepted, its missing and bad fields are refused by name",
			yaml: "var_sources:\n" +
				"- {name: ok, type: vault, config: {url: 'https://vault:8200', client_token: ((vault-token)), path_prefix: /secret, shared_path: shared,\n" +
				"   lookup_templates: ['/{{.Team}}/{{.Secret}}'], namespace: ns, insecure_skip_verify: true, query_timeout: 5s}}\n" +
				"- {name: vars-url, type: vault, config: {url: '((vault-url))', client_token: t}}\n" +
				"- {name: empty, type: vault, config: {}}\n" +
				"- {name: bad, type: vault, config: {url: 'ftp://vault', client_token: 7, lookup_templates: ['/{{.Team}}/{{.Nope}}'],\n" +
				"   query_timeout: soon, auth_backend: approle, colour: red, ca_cert: not-pem}}\n" +
				"- {name: none, type: vault}\n" +
				"jobs:\n- {name: j, plan: [{task: t, file: f}]}",
			errs: []string{
				"var_sources[2](empty): config.url is required",
				"var_sources[2](empty): config.client_token is required (auth backends are not supported yet)",
				"var_sources[3](bad): config.auth_backend is not supported by this server: auth backends are not supported yet: use client_token",
				"var_sources[3](bad): config.client_token must be a string",
				`var_sources[3](bad): config: unknown key "colour"`,
				`var_sources[3](bad): config.query_timeout "soon" is not a duration (e.g. 30s)`,
				`var_sources[3](bad): config.url "ftp://vault" must be http:// or https://`,
				"var_sources[3](bad): config.client_token is required (auth backends are not supported yet)",
				`var_sources[3](bad): config.lookup_templates[0] "/{{.Team}}/{{.Nope}}": the template must use {{.Secret}}`,
				"var_sources[3](bad): config.ca_cert holds no PEM certificate",
				"var_sources[4](none): config must be a map with at least url and client_token",
			},
		},
		{
			name: "set_pipeline with instance_vars is accepted, across is checked",
			yaml: "jobs:\n- {name: j, plan: [{set_pipeline: p, file: f, instance_vars: {b: main}}, " +
				"{task: t, file: f, across: [{var: x, values: []}]}, {task: u, file: f, across: [{var: x, values: [1]}, {var: x, values: [2]}]}]}",
			errs: []string{
				"jobs.j.plan[1].task(t): across var 'x': values is an empty list",
				"jobs.j.plan[2].task(u): across[1]: var 'x' is repeated",
			},
		},
		{
			name: "a set_pipeline name from an across var is checked when it runs",
			yaml: "jobs:\n- {name: j, plan: [{set_pipeline: 'p-((.:i))', file: f, across: [{var: i, values: [1, 2]}]}]}",
		},
		{
			name: "bad durations",
			yaml: "resource_types:\n- {name: t, type: git, source: {}, check_every: often}\n" +
				"resources:\n- {name: r, type: git, source: {}, check_every: 5 minutes, check_timeout: 1x}\n" +
				"jobs:\n- {name: j, plan: [{get: r, timeout: soon}, {do: [], timeout: 1y}]}",
			errs: []string{
				"resource_types.t.check_every: invalid duration 'often'",
				"resources.r.check_every: invalid duration '5 minutes'",
				"resources.r.check_timeout: invalid duration '1x'",
				"jobs.j.plan[0].get(r).timeout: invalid duration 'soon'",
				"jobs.j.plan[1].do.timeout: invalid duration '1y'",
			},
		},
		{
			name: "negative numbers",
			yaml: "resources:\n- {name: r, type: git, source: {}}\n" +
				"jobs:\n- {name: j, max_in_flight: -1, plan: [{get: r, attempts: -2}, {in_parallel: {limit: -1, steps: []}}]}",
			errs: []string{
				"jobs.j has negative max_in_flight: -1",
				"jobs.j.plan[0].get(r).attempts: must be greater than 0",
				"jobs.j.plan[1].in_parallel.limit: must be greater than or equal to 0",
			},
		},
		{
			name: "empty serial group",
			yaml: "jobs:\n- {name: j, serial_groups: [a, ''], plan: []}",
			errs: []string{"jobs.j.serial_groups[1]: identifier cannot be an empty string"},
		},
		{
			name:     "deprecated build_logs_to_retain",
			yaml:     "jobs:\n- {name: j, build_logs_to_retain: 3, plan: []}",
			warnings: []string{"jobs.j.build_logs_to_retain is deprecated. Use build_log_retention instead."},
		},
		{
			name:     "both log retentions",
			yaml:     "jobs:\n- {name: j, build_logs_to_retain: 3, build_log_retention: {builds: 2}, plan: []}",
			errs:     []string{"jobs.j can't use both build_log_retention and build_logs_to_retain"},
			warnings: []string{"build_logs_to_retain is deprecated"},
		}, {
			name: "a negative build_log_retention is refused",
			yaml: "jobs:\n- {name: j, build_log_retention: {builds: -1}, plan: []}",
			errs: []string{"jobs.j.build_log_retention.builds is negative: -1"},
		},

		{
			name: "steps in hooks are validated",
			yaml: "jobs:\n- {name: j, plan: [{task: t, file: f, on_failure: {put: nope}}], ensure: {get: gone}}",
			errs: []string{"jobs.j.plan[0].task(t).on_failure.put(nope): unknown resource 'nope'", "jobs.j.ensure.get(gone): unknown resource 'gone'"},
		},
		{
			name: "names that would become keys or paths are refused",
			yaml: "resources:\n- {name: 'r/s', type: git, source: {}}\nresource_types:\n- {name: '..', type: git, source: {}}\n" +
				`jobs:
- {name: '../x', plan: [{get: 'r/s'}, {task: 'a\b', file: f}]}
- {name: ok, plan: [{task: "t\x00", file: f}, {set_pipeline: '../p', file: f}, {load_var: 'v/w', file: f}]}`,
			errs: []string{
				`resources.r/s: name "r/s" contains '/' (` + names.Rule + ")",
				`resource_types...: name ".." is a relative path element`,
				`jobs.../x: name "../x" contains '/'`,
				`jobs.../x.plan[0].get(r/s): name "r/s" contains '/'`,
				`name "a\\b" contains '\\'`,
				`name "t\x00" contains the control character U+0000`,
				`jobs.ok.plan[1].set_pipeline(../p): name "../p" contains '/'`,
				`jobs.ok.plan[2].load_var(v/w): name "v/w" contains '/'`,
			},
		},
		{
			name: "invalid identifiers warn",
			yaml: "resources:\n- {name: My-Repo, type: git, source: {}}\ngroups:\n- {name: 'a group', jobs: ['*']}\n" +
				"jobs:\n- {name: '123', plan: [{get: My-Repo}, {task: _t, file: f}]}",
			warnings: []string{
				"resources.My-Repo: 'My-Repo' is not a valid identifier: must start with a lowercase letter or a number",
				"groups.a group: 'a group' is not a valid identifier: illegal character ' '",
				"jobs.123: '123' is not a valid identifier: cannot be just numbers",
				"jobs.123.plan[0].get(My-Repo): 'My-Repo' is not a valid identifier",
				"jobs.123.plan[1].task(_t): '_t' is not a valid identifier: must start with a lowercase letter or a number",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			warnings, errs := Validate(cfg, tc.opts)
			all := strings.Join(errs, "")
			for _, want := range tc.errs {
				if !strings.Contains(all, want) {
					t.Errorf("errors %q do not contain %q", errs, want)
				}
			}
			if len(tc.errs) == 0 && len(errs) > 0 {
				t.Errorf("unexpected errors %q", errs)
			}
			var msgs []string
			for _, w := range warnings {
				msgs = append(msgs, w.Message)
				if w.Type == "" {
					t.Errorf("warning without type: %+v", w)
				}
			}
			for _, want := range tc.warnings {
				if !strings.Contains(strings.Join(msgs, "\n"), want) {
					t.Errorf("warnings %q do not contain %q", msgs, want)
				}
			}
			if len(tc.warnings) == 0 && len(warnings) > 0 {
				t.Errorf("unexpected warnings %+v", warnings)
			}
		})
	}
}

func TestWarningJSON(t *testing.T) {
	js, err := json.Marshal(Warning{Type: WarningInvalidIdentifier, Message: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if string(js) != `{"type":"invalid_identifier","message":"m"}` {
		t.Errorf("got %s", js)
	}
}

func TestInvalidIdentifierWarningType(t *testing.T) {
	cfg, err := Parse([]byte("jobs:\n- {name: Build, plan: []}"))
	if err != nil {
		t.Fatal(err)
	}
	warnings, _ := Validate(cfg, Options{})
	if len(warnings) != 1 || warnings[0].Type != "invalid_identifier" {
		t.Fatalf("warnings: %+v", warnings)
	}
}

func TestValidateVaultVarSourceAccepted(t *testing.T) {
	cfg, err := Parse([]byte("var_sources:\n" +
		"- {name: v, type: vault, config: {url: 'http://10.0.0.1:8200', client_token: ((token)), shared_path: shared, ca_cert: ((ca))}}\n" +
		"- {name: w, type: vault, config: {url: '((vault-url))', client_token: t, lookup_templates: ['/{{.Team}}/{{.Pipeline}}/{{.Secret}}']}}\n" +
		"jobs:\n- {name: j, plan: [{task: t, file: f}]}"))
	if err != nil {
		t.Fatal(err)
	}
	if _, errs := Validate(cfg, Options{}); len(errs) > 0 {
		t.Errorf("valid vault var_sources refused: %q", errs)
	}
}
