// Package taskconfig reads Concourse task configs (the YAML of a task's
// `file:` or `config:`) and maps them onto a build's artifacts, so existing
// task files run unchanged.
package taskconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/porter-ci/porter/pkg/action"
)

// Config is a Concourse task config.
type Config struct {
	Platform string `json:"platform,omitempty"`
	// RootfsURI is read only to be refused with a clear message: Porter runs
	// images from registries.
	RootfsURI     string           `json:"rootfs_uri,omitempty"`
	ImageResource *ImageResource   `json:"image_resource,omitempty"`
	Limits        *ContainerLimits `json:"container_limits,omitempty"`
	Params        Params           `json:"params,omitempty"`
	Run           Run              `json:"run"`
	Inputs        []Input          `json:"inputs,omitempty"`
	Outputs       []Output         `json:"outputs,omitempty"`
	Caches        []Cache          `json:"caches,omitempty"`
}

// ImageResource is the resource that provides the task's image.
type ImageResource struct {
	// Name is set by fly when it sends a task config in a plan.
	Name    string            `json:"name,omitempty"`
	Type    string            `json:"type"`
	Source  map[string]any    `json:"source"`
	Params  map[string]any    `json:"params,omitempty"`
	Version map[string]string `json:"version,omitempty"`
	Tags    []string          `json:"tags,omitempty"`
}

// Run is the process a task starts.
type Run struct {
	Path string   `json:"path"`
	Args []string `json:"args,omitempty"`
	Dir  string   `json:"dir,omitempty"`
	// User defaults to the image's user.
	User string `json:"user,omitempty"`
}

// Input is an artifact the task expects, by name.
type Input struct {
	Name string `json:"name"`
	// Path defaults to Name; see DirPath.
	Path     string `json:"path,omitempty"`
	Optional bool   `json:"optional,omitempty"`
}

// DirPath is where the input goes, relative to the working directory.
func (in Input) DirPath() string { return pathOrName(in.Path, in.Name) }

// Output is a directory the task produces, by name.
type Output struct {
	Name string `json:"name"`
	// Path defaults to Name; see DirPath.
	Path string `json:"path,omitempty"`
}

// DirPath is where the output is taken from, relative to the working directory.
func (out Output) DirPath() string { return pathOrName(out.Path, out.Name) }

// Cache is a directory kept between builds of the same task.
type Cache struct {
	Path string `json:"path"`
	// TTL is accepted as Concourse does; Porter's caches live until GC.
	TTL string `json:"ttl,omitempty"`
}

func pathOrName(p, name string) string {
	if p != "" {
		return p
	}
	return name
}

// Parse reads a task config from YAML (or JSON) and validates it, as
// Concourse does when it loads a task file. Unknown fields are errors.
func Parse(data []byte) (*Config, error) {
	var cfg Config
	if err := yaml.UnmarshalStrict(data, &cfg, yaml.DisallowUnknownFields); err != nil {
		return nil, fmt.Errorf("parse task config: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// Validate reports every problem of the config at once. The first messages
// are Concourse's own; the rest guard what a step pod relies on.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if c.Platform == "" {
		bad("missing 'platform'")
	} else if c.Platform != "linux" && c.Platform != "windows" {
		bad("platform %q is not supported; Porter runs linux and windows tasks", c.Platform)
	}
	if c.Run.Path == "" {
		bad("missing path to executable to run")
	}
	if c.RootfsURI != "" {
		bad("rootfs_uri is not supported; use image_resource")
	}

	inputNames := map[string]bool{}
	inputPaths := map[string]string{}
	for i, in := range c.Inputs {
		if in.Name == "" {
			bad("input in position %d is missing a name", i)
			continue
		}
		if inputNames[in.Name] {
			bad("input %q is declared more than once", in.Name)
		}
		inputNames[in.Name] = true
		claimPath(bad, "input", in.Name, in.DirPath(), inputPaths)
	}
	outputNames := map[string]bool{}
	outputPaths := map[string]string{}
	for i, out := range c.Outputs {
		if out.Name == "" {
			bad("output in position %d is missing a name", i)
			continue
		}
		if outputNames[out.Name] {
			bad("output %q is declared more than once", out.Name)
		}
		outputNames[out.Name] = true
		// An output may share its path with an input: it is then the
		// input, modified.
		claimPath(bad, "output", out.Name, out.DirPath(), outputPaths)
	}
	cachePaths := map[string]string{}
	for i, cache := range c.Caches {
		if cache.Path == "" {
			bad("cache in position %d is missing a path", i)
			continue
		}
		claimPath(bad, "cache", cache.Path, cache.Path, cachePaths, inputPaths, outputPaths)
	}

	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid task configuration: %w", err)
	}
	return nil
}

// claimPath records p for kind name in own, reporting a clash with any path
// already in own or others.
func claimPath(bad func(string, ...any), kind, name, p string, own map[string]string, others ...map[string]string) {
	if err := action.CheckRelPath(p); err != nil {
		bad("%s %q: %v", kind, name, err)
		return
	}
	clean := path.Clean(p)
	for _, m := range append([]map[string]string{own}, others...) {
		if other, ok := m[clean]; ok {
			bad("%s %q: path %q is already used by %s", kind, name, p, other)
			return
		}
	}
	own[clean] = fmt.Sprintf("%s %q", kind, name)
}

// Images come from registry-image-like resources: a source with a
// repository (and optionally a tag and credentials) whose versions are
// {"digest": "sha256:..."}. The pod runs repository@digest, so the kubelet
// pulls exactly the checked image.

// digestPattern is what a version's digest must look like to name an image.
var digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// ImageRepository is source.repository of a registry-image-like source,
// which names no tag or digest (those are source.tag and the version's).
func ImageRepository(source map[string]any) (string, error) {
	repository, err := sourceString(source, "repository")
	if err != nil {
		return "", err
	}
	if repository == "" {
		return "", errors.New("source has no repository")
	}
	name := repository[strings.LastIndex(repository, "/")+1:]
	if strings.ContainsAny(name, ":@") || strings.ContainsAny(repository, " \t\n") {
		return "", fmt.Errorf("source.repository %q must be a repository without tag or digest; use source.tag or version.digest", repository)
	}
	return repository, nil
}

// ImageTag is source.tag, "latest" when none is given, as registry-image
// does.
func ImageTag(source map[string]any) (string, error) {
	tag, err := sourceString(source, "tag")
	if err != nil || tag != "" {
		return tag, err
	}
	return "latest", nil
}

// PinnedImage is the image a registry-image-like source and one of its
// versions name: repository@sha256:digest.
func PinnedImage(source map[string]any, version map[string]string) (string, error) {
	repository, err := ImageRepository(source)
	if err != nil {
		return "", err
	}
	digest := version["digest"]
	if digest == "" {
		return "", fmt.Errorf("version %v has no digest", version)
	}
	if !digestPattern.MatchString(digest) {
		return "", fmt.Errorf("version digest %q is not sha256:<64 hex digits>", digest)
	}
	return repository + "@" + digest, nil
}

// RegistryCredentials are source.username and source.password, both or
// neither.
func RegistryCredentials(source map[string]any) (username, password string, err error) {
	if username, err = sourceString(source, "username"); err != nil {
		return "", "", err
	}
	if password, err = sourceString(source, "password"); err != nil {
		return "", "", err
	}
	if (username == "") != (password == "") {
		return "", "", errors.New("source.username and source.password must be given together")
	}
	return username, password, nil
}

// sourceString reads a scalar from a resource source; YAML turns tags like
// 3.19 into numbers, which count as their text.
func sourceString(source map[string]any, key string) (string, error) {
	switch v := source[key].(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	case json.Number:
		return v.String(), nil
	default:
		return "", fmt.Errorf("source.%s must be a string, not %T", key, v)
	}
}

// Params are a task's environment variables. Concourse accepts any YAML
// value and turns it into a string: strings as they are, numbers and
// booleans as their text, null as "", and lists and maps as JSON.
type Params map[string]string

// UnmarshalJSON coerces every value to a string the way Concourse does.
func (p *Params) UnmarshalJSON(data []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return fmt.Errorf("params must be a map: %w", err)
	}
	out := make(Params, len(raw))
	for name, value := range raw {
		s, err := coerceString(value)
		if err != nil {
			return fmt.Errorf("param %q: %w", name, err)
		}
		out[name] = s
	}
	*p = out
	return nil
}

func coerceString(data json.RawMessage) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // keep 10000000000 from becoming 1e+10
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	switch v := v.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return "", err
		}
		return string(b), nil
	}
}

// ContainerLimits are a task's container_limits.
type ContainerLimits struct {
	// CPU is in CPU shares (1024 = one CPU's weight), relative to other
	// containers; 0 means unlimited, as in Concourse.
	CPU *CPULimit `json:"cpu,omitempty"`
	// Memory is in bytes; 0 means unlimited.
	Memory *MemoryLimit `json:"memory,omitempty"`
}

// CPULimit is a cpu limit in shares.
type CPULimit uint64

// UnmarshalJSON accepts a non-negative number.
func (c *CPULimit) UnmarshalJSON(data []byte) error {
	var n float64
	if err := json.Unmarshal(data, &n); err != nil {
		return errors.New("cpu limit must be an integer")
	}
	if n < 0 {
		return errors.New("cpu limit must not be negative")
	}
	*c = CPULimit(n)
	return nil
}

// MemoryLimit is a memory limit in bytes.
type MemoryLimit uint64

// memoryLimitPattern is Concourse's memory syntax: a number of bytes with
// an optional binary unit, any case ("1024", "512MB", "1g", "2GiB").
var memoryLimitPattern = regexp.MustCompile(`(?i)^([0-9]+)(?:([KMG])I?B?|B)?$`)

// UnmarshalJSON accepts a number of bytes or a string like "1GB".
func (m *MemoryLimit) UnmarshalJSON(data []byte) error {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	switch v := v.(type) {
	case float64:
		if v < 0 {
			return errors.New("memory limit must not be negative")
		}
		*m = MemoryLimit(v)
	case string:
		limit, err := ParseMemoryLimit(v)
		if err != nil {
			return err
		}
		*m = limit
	default:
		return fmt.Errorf("memory limit must be a number or a string like \"1GB\", not %s", data)
	}
	return nil
}

// ParseMemoryLimit reads Concourse's memory limit syntax; units are binary
// (1KB = 1024 bytes).
func ParseMemoryLimit(s string) (MemoryLimit, error) {
	match := memoryLimitPattern.FindStringSubmatch(strings.TrimSpace(s))
	if match == nil {
		return 0, fmt.Errorf("could not parse container memory limit %q", s)
	}
	n, err := strconv.ParseUint(match[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("could not parse container memory limit %q: %w", s, err)
	}
	shift := map[string]uint{"": 0, "K": 10, "M": 20, "G": 30}[strings.ToUpper(match[2])]
	if n > (^uint64(0))>>shift {
		return 0, fmt.Errorf("container memory limit %q is too large", s)
	}
	return MemoryLimit(n << shift), nil
}

// ActionLimits converts the config's limits for an action.
func (c *Config) ActionLimits() action.Limits {
	var l action.Limits
	if c.Limits == nil {
		return l
	}
	if c.Limits.CPU != nil {
		v := uint64(*c.Limits.CPU)
		l.CPUShares = &v
	}
	if c.Limits.Memory != nil {
		v := uint64(*c.Limits.Memory)
		l.MemoryBytes = &v
	}
	return l
}

// ApplyInputMapping renames the config's inputs as a task step's
// input_mapping says (task input name -> artifact name in the build), so
// that each input's Name is the artifact to fetch. An input's path is kept:
// the task still finds it where its config says.
func ApplyInputMapping(cfg *Config, mapping map[string]string) {
	for i, in := range cfg.Inputs {
		if artifact, ok := mapping[in.Name]; ok {
			cfg.Inputs[i].Path = in.DirPath()
			cfg.Inputs[i].Name = artifact
		}
	}
}

// ApplyOutputMapping renames the config's outputs as a task step's
// output_mapping says (task output name -> artifact name in the build),
// keeping each output's path.
func ApplyOutputMapping(cfg *Config, mapping map[string]string) {
	for i, out := range cfg.Outputs {
		if artifact, ok := mapping[out.Name]; ok {
			cfg.Outputs[i].Path = out.DirPath()
			cfg.Outputs[i].Name = artifact
		}
	}
}

// MissingInputs lists, sorted, the config's required inputs that no artifact
// in provided satisfies. mapping is the step's input_mapping (task input
// name -> artifact name); pass nil when it has been applied already.
func MissingInputs(cfg *Config, provided map[string]bool, mapping map[string]string) []string {
	var missing []string
	for _, in := range cfg.Inputs {
		if in.Optional {
			continue
		}
		artifact := in.Name
		if mapped, ok := mapping[in.Name]; ok {
			artifact = mapped
		}
		if !provided[artifact] {
			missing = append(missing, artifact)
		}
	}
	slices.Sort(missing)
	return slices.Compact(missing)
}

// MergeParams returns the config's params overridden by the step's params,
// as a task step's `params:` does. Neither argument is modified.
func MergeParams(configParams, stepParams map[string]string) map[string]string {
	merged := make(map[string]string, len(configParams)+len(stepParams))
	maps.Copy(merged, configParams)
	maps.Copy(merged, stepParams)
	return merged
}
