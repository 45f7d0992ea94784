package taskconfig_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/taskconfig"
)

// The tasks of Concourse's hello-world examples.
const (
	helloWorld = `
platform: linux
image_resource:
  type: registry-image
  source: {repository: busybox}
run:
  path: echo
  args: ["Hello, world!"]
`
	makeAFile = `
platform: linux
image_resource:
  type: registry-image
  source: {repository: busybox}
run:
  path: sh
  args:
  - -exc
  - ls -la; echo "Created a file on $(date)" > ./files/created_file
outputs:
- name: files
`
	consumeTheFile = `
platform: linux
image_resource:
  type: registry-image
  source: {repository: busybox}
inputs:
- name: files
run:
  path: cat
  args:
  - ./files/created_file
`
)

func TestParseExamples(t *testing.T) {
	for _, tc := range []struct {
		name  string
		yaml  string
		check func(t *testing.T, c *taskconfig.Config)
	}{
		{"hello-world", helloWorld, func(t *testing.T, c *taskconfig.Config) {
			if c.Run.Path != "echo" || !reflect.DeepEqual(c.Run.Args, []string{"Hello, world!"}) {
				t.Errorf("run = %+v", c.Run)
			}
		}},
		{"make-a-file", makeAFile, func(t *testing.T, c *taskconfig.Config) {
			if len(c.Outputs) != 1 || c.Outputs[0].Name != "files" || c.Outputs[0].DirPath() != "files" {
				t.Errorf("outputs = %+v", c.Outputs)
			}
			if !strings.Contains(c.Run.Args[1], "> ./files/created_file") {
				t.Errorf("args = %q", c.Run.Args)
			}
		}},
		{"consume-the-file", consumeTheFile, func(t *testing.T, c *taskconfig.Config) {
			if len(c.Inputs) != 1 || c.Inputs[0].Name != "files" || c.Inputs[0].Optional {
				t.Errorf("inputs = %+v", c.Inputs)
			}
			if got := taskconfig.MissingInputs(c, map[string]bool{"files": true}, nil); len(got) != 0 {
				t.Errorf("missing inputs = %v with files provided", got)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := taskconfig.Parse([]byte(tc.yaml))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if c.Platform != "linux" {
				t.Errorf("platform = %q", c.Platform)
			}
			if c.ImageResource == nil || c.ImageResource.Type != "registry-image" || c.ImageResource.Source["repository"] != "busybox" {
				t.Errorf("image_resource = %+v", c.ImageResource)
			}
			tc.check(t, c)
		})
	}
}

func TestParseFull(t *testing.T) {
	c, err := taskconfig.Parse([]byte(`
platform: linux
image_resource:
  type: registry-image
  source:
    repository: golang
    tag: "1.22"
  params: {format: oci}
  version: {digest: "sha256:abc"}
inputs:
- name: repo
- name: version
  path: v
  optional: true
outputs:
- name: repo
- name: binary
  path: out/bin
caches:
- path: go/pkg/mod
params:
  STRING: hello
  INT: 42
  BIG: 10000000000
  FLOAT: 1.5
  BOOL: true
  EMPTY: null
  LIST: [a, 1, true]
  MAP: {k: v, num: 2}
run:
  path: repo/ci/test.sh
  args: [-v]
  dir: repo
  user: root
container_limits:
  cpu: 512
  memory: 1GB
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	wantParams := taskconfig.Params{
		"STRING": "hello",
		"INT":    "42",
		"BIG":    "10000000000",
		"FLOAT":  "1.5",
		"BOOL":   "true",
		"EMPTY":  "",
		"LIST":   `["a",1,true]`,
		"MAP":    `{"k":"v","num":2}`,
	}
	if !reflect.DeepEqual(c.Params, wantParams) {
		t.Errorf("params = %#v\nwant %#v", c.Params, wantParams)
	}
	wantRun := taskconfig.Run{Path: "repo/ci/test.sh", Args: []string{"-v"}, Dir: "repo", User: "root"}
	if !reflect.DeepEqual(c.Run, wantRun) {
		t.Errorf("run = %+v", c.Run)
	}
	l := c.ActionLimits()
	if l.CPUShares == nil || *l.CPUShares != 512 || l.MemoryBytes == nil || *l.MemoryBytes != 1<<30 {
		t.Errorf("limits = %+v", c.Limits)
	}
	if ir := c.ImageResource; ir == nil || ir.Source["repository"] != "golang" || ir.Version["digest"] != "sha256:abc" {
		t.Errorf("image_resource = %+v", ir)
	}
	if got := c.Inputs[1].DirPath(); got != "v" {
		t.Errorf("input path = %q", got)
	}
	if got := c.Outputs[1].DirPath(); got != "out/bin" {
		t.Errorf("output path = %q", got)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want []string
	}{
		{
			name: "empty",
			yaml: `{}`,
			want: []string{"missing 'platform'", "missing path to executable to run"},
		},
		{
			name: "rootfs_uri",
			yaml: "platform: linux\nrootfs_uri: docker:///busybox\nrun: {path: echo}\n",
			want: []string{"rootfs_uri is not supported; use image_resource"},
		},
		{
			name: "unknown field",
			yaml: "platform: linux\nrun: {path: echo, argz: [x]}\n",
			want: []string{`unknown field "argz"`},
		},
		{
			name: "wrong type",
			yaml: "platform: linux\nrun: {path: echo, args: not-a-list}\n",
			want: []string{"parse task config", "args"},
		},
		{
			name: "unnamed inputs and outputs",
			yaml: "platform: linux\nrun: {path: echo}\ninputs: [{name: a}, {path: x}]\noutputs: [{path: y}]\n",
			want: []string{"input in position 1 is missing a name", "output in position 0 is missing a name"},
		},
		{
			name: "duplicates",
			yaml: `
platform: linux
run: {path: echo}
inputs: [{name: a}, {name: a, path: other}, {name: b, path: x}, {name: c, path: x}]
outputs: [{name: o}, {name: o, path: p}]
caches: [{path: x}, {path: cache}, {path: cache/}]
`,
			want: []string{
				`input "a" is declared more than once`,
				`input "c": path "x" is already used by input "b"`,
				`output "o" is declared more than once`,
				`cache "x": path "x" is already used by input "b"`,
				`cache "cache/": path "cache/" is already used by cache "cache"`,
			},
		},
		{
			name: "paths outside the work dir",
			yaml: "platform: linux\nrun: {path: echo}\ninputs: [{name: a, path: /abs}]\noutputs: [{name: b, path: ../up}]\n",
			want: []string{`input "a": path "/abs" must be relative`, `output "b": path "../up" leaves the working directory`},
		},
		{
			name: "bad memory",
			yaml: "platform: linux\nrun: {path: echo}\ncontainer_limits: {memory: 1TB}\n",
			want: []string{"could not parse container memory limit"},
		},
		{
			name: "bad cpu",
			yaml: "platform: linux\nrun: {path: echo}\ncontainer_limits: {cpu: lots}\n",
			want: []string{"cpu limit must be an integer"},
		},
		{
			name: "darwin",
			yaml: "platform: darwin\nrun: {path: echo}\n",
			want: []string{`platform "darwin" is not supported`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := taskconfig.Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatal("Parse accepted the config")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestOutputMayShareInputPath(t *testing.T) {
	_, err := taskconfig.Parse([]byte(`
platform: linux
run: {path: echo}
inputs: [{name: repo}]
outputs: [{name: repo}, {name: bumped, path: repo}]
`))
	if err == nil || !strings.Contains(err.Error(), `output "bumped": path "repo" is already used by output "repo"`) {
		t.Errorf("err = %v; want only the output/output clash", err)
	}
	if err != nil && strings.Contains(err.Error(), "by input") {
		t.Errorf("output sharing an input's path was refused: %v", err)
	}
}

func TestParseMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
	}{
		{"1024", 1024},
		{"1024B", 1024},
		{"1KB", 1 << 10},
		{"512MB", 512 << 20},
		{"512mb", 512 << 20},
		{"1GB", 1 << 30},
		{"1g", 1 << 30},
		{"2Gi", 2 << 30},
		{"2GiB", 2 << 30},
		{"3m", 3 << 20},
	} {
		got, err := taskconfig.ParseMemoryLimit(tc.in)
		if err != nil || uint64(got) != tc.want {
			t.Errorf("ParseMemoryLimit(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "GB", "1.5GB", "-1", "1TB", "1 GB x", "99999999999999999999"} {
		if got, err := taskconfig.ParseMemoryLimit(in); err == nil {
			t.Errorf("ParseMemoryLimit(%q) = %d, want an error", in, got)
		}
	}
}

func TestMemoryLimitAsNumber(t *testing.T) {
	c, err := taskconfig.Parse([]byte("platform: linux\nrun: {path: echo}\ncontainer_limits: {memory: 1073741824, cpu: 1024}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if *c.Limits.Memory != 1<<30 || *c.Limits.CPU != 1024 {
		t.Errorf("limits = %d, %d", *c.Limits.Memory, *c.Limits.CPU)
	}
}

// TestZeroLimits: 0 is Concourse's "unlimited", kept as an explicit zero
// (podspec then sets no request or limit), not refused.
func TestZeroLimits(t *testing.T) {
	for _, y := range []string{
		"container_limits: {memory: 0, cpu: 0}",
		`container_limits: {memory: "0", cpu: 0}`,
		`container_limits: {memory: "0GB", cpu: 0}`,
	} {
		c, err := taskconfig.Parse([]byte("platform: linux\nrun: {path: echo}\n" + y + "\n"))
		if err != nil {
			t.Errorf("%s: %v", y, err)
			continue
		}
		l := c.ActionLimits()
		if l.CPUShares == nil || *l.CPUShares != 0 || l.MemoryBytes == nil || *l.MemoryBytes != 0 {
			t.Errorf("%s: action limits = %+v, want explicit zeros", y, l)
		}
	}
}

func TestPinnedImage(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name    string
		source  map[string]any
		version map[string]string
		want    string
		wantErr string
	}{
		{"docker hub", map[string]any{"repository": "busybox"}, map[string]string{"digest": digest}, "busybox@" + digest, ""},
		{"registry port", map[string]any{"repository": "10.245.0.1:5000/app", "tag": "v1"}, map[string]string{"digest": digest}, "10.245.0.1:5000/app@" + digest, ""},
		{"no repository", map[string]any{}, map[string]string{"digest": digest}, "", "no repository"},
		{"repository not a string", map[string]any{"repository": 3}, map[string]string{"digest": digest}, "", "source.repository must be a string"},
		{"tag in repository", map[string]any{"repository": "busybox:1.36"}, map[string]string{"digest": digest}, "", "without tag or digest"},
		{"digest in repository", map[string]any{"repository": "busybox@" + digest}, map[string]string{"digest": digest}, "", "without tag or digest"},
		{"no digest", map[string]any{"repository": "busybox"}, map[string]string{"ref": "abc"}, "", "has no digest"},
		{"bad digest", map[string]any{"repository": "busybox"}, map[string]string{"digest": "sha256:abc"}, "", "not sha256:<64 hex digits>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := taskconfig.PinnedImage(tc.source, tc.version)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("PinnedImage = %q, %v; want error %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("PinnedImage = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestImageTag(t *testing.T) {
	for _, tc := range []struct {
		source  map[string]any
		want    string
		wantErr string
	}{
		{map[string]any{"repository": "busybox"}, "latest", ""},
		{map[string]any{"repository": "busybox", "tag": "1.36"}, "1.36", ""},
		// YAML reads 3.19 as a number; it is the tag's text.
		{map[string]any{"repository": "alpine", "tag": 3.19}, "3.19", ""},
		{map[string]any{"repository": "busybox", "tag": []any{"x"}}, "", "source.tag must be a string"},
	} {
		got, err := taskconfig.ImageTag(tc.source)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ImageTag(%v) = %q, %v; want error %q", tc.source, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ImageTag(%v) = %q, %v; want %q", tc.source, got, err, tc.want)
		}
	}
}

func TestRegistryCredentials(t *testing.T) {
	u, p, err := taskconfig.RegistryCredentials(map[string]any{"repository": "r", "username": "me", "password": "pw"})
	if err != nil || u != "me" || p != "pw" {
		t.Errorf("RegistryCredentials = %q, %q, %v", u, p, err)
	}
	if u, p, err := taskconfig.RegistryCredentials(map[string]any{"repository": "r"}); err != nil || u != "" || p != "" {
		t.Errorf("RegistryCredentials without credentials = %q, %q, %v", u, p, err)
	}
	if _, _, err := taskconfig.RegistryCredentials(map[string]any{"username": "me"}); err == nil || !strings.Contains(err.Error(), "together") {
		t.Errorf("RegistryCredentials with only a username: %v", err)
	}
}

func TestMappings(t *testing.T) {
	c, err := taskconfig.Parse([]byte(`
platform: linux
run: {path: echo}
inputs:
- name: source
- name: config
  path: cfg
- name: extra
  optional: true
outputs:
- name: result
`))
	if err != nil {
		t.Fatal(err)
	}
	inputMapping := map[string]string{"source": "my-repo"}

	got := taskconfig.MissingInputs(c, map[string]bool{"source": true}, inputMapping)
	if want := []string{"config", "my-repo"}; !reflect.DeepEqual(got, want) {
		t.Errorf("MissingInputs = %v, want %v", got, want)
	}
	if got := taskconfig.MissingInputs(c, map[string]bool{"my-repo": true, "config": true}, inputMapping); len(got) != 0 {
		t.Errorf("MissingInputs = %v, want none (extra is optional)", got)
	}

	taskconfig.ApplyInputMapping(c, inputMapping)
	if in := c.Inputs[0]; in.Name != "my-repo" || in.DirPath() != "source" {
		t.Errorf("mapped input = %+v; want name my-repo at path source", in)
	}
	if in := c.Inputs[1]; in.Name != "config" || in.DirPath() != "cfg" {
		t.Errorf("unmapped input = %+v", in)
	}
	if got := taskconfig.MissingInputs(c, map[string]bool{"my-repo": true}, nil); !reflect.DeepEqual(got, []string{"config"}) {
		t.Errorf("MissingInputs after mapping = %v", got)
	}

	taskconfig.ApplyOutputMapping(c, map[string]string{"result": "build-result"})
	if out := c.Outputs[0]; out.Name != "build-result" || out.DirPath() != "result" {
		t.Errorf("mapped output = %+v", out)
	}
}

func TestMergeParams(t *testing.T) {
	config := map[string]string{"A": "config", "B": "config"}
	step := map[string]string{"B": "step", "C": "step"}
	got := taskconfig.MergeParams(config, step)
	want := map[string]string{"A": "config", "B": "step", "C": "step"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("MergeParams = %v, want %v", got, want)
	}
	if config["B"] != "config" {
		t.Error("MergeParams modified the config's params")
	}
	if got := taskconfig.MergeParams(nil, nil); got == nil || len(got) != 0 {
		t.Errorf("MergeParams(nil, nil) = %#v", got)
	}
}
