// Package mock is the mock resource type: versions come from its source, so
// tests can drive pipelines without the outside world. It behaves like
// Concourse's mock resource (github.com/concourse/mock-resource): check
// returns the version it is given, so `fly check-resource -f version:v2`
// makes v2; plus knobs to simulate slow and broken checks and gets.
package mock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/porter-ci/porter/pkg/resource"
)

// DefaultInitialVersion is the version check emits when the source names none.
const DefaultInitialVersion = "mock"

// Source is the resource's source: Concourse's mock's keys, and Porter's
// own (versions, in_delay, check_output, marked so).
type Source struct {
	// InitialVersion is the first version check emits (default "mock").
	InitialVersion resource.String `json:"initial_version"`
	// NoInitialVersion leaves the initial version out, so the first version
	// comes from Versions (or none at all).
	NoInitialVersion bool `json:"no_initial_version"`
	// Versions (Porter's) follow the initial version, oldest first: a test
	// adds a version by appending here and re-setting the pipeline.
	Versions []resource.String `json:"versions"`
	// ForceVersion makes check emit exactly this version, whatever else is set.
	ForceVersion resource.String `json:"force_version"`
	// CreateFiles are written by in, path (relative) to content: a string,
	// or any other value, written as JSON.
	CreateFiles map[string]json.RawMessage `json:"create_files"`
	// CheckFailure makes check fail with this message.
	CheckFailure string `json:"check_failure"`
	// CheckDelay and InDelay (Porter's) make check and in wait first (a
	// hanging check).
	CheckDelay resource.Duration `json:"check_delay"`
	InDelay    resource.Duration `json:"in_delay"`
	// CheckOutput (Porter's) is printed by check instead of the versions
	// (e.g. invalid JSON).
	CheckOutput *string `json:"check_output"`
	// MirrorSelf makes the resource its own image: as an image_resource, a
	// resource type or a get a task's image: names, the server runs the
	// base mock type's image (pkg/atc/exec/basetypes.MirrorsSelf); in
	// describes that image in repository and tag files.
	MirrorSelf bool `json:"mirror_self"`
	// Log is printed to stderr by check, in and out.
	Log string `json:"log"`
	// Metadata is returned by in and out.
	Metadata []resource.MetadataField `json:"metadata"`
}

// InParams are the params of a get.
type InParams struct {
	CreateFilesViaParams map[string]json.RawMessage `json:"create_files_via_params"`
	MirrorSelfViaParams  bool                       `json:"mirror_self_via_params"`
	// Fail (Porter's) makes in fail after writing its files.
	Fail bool `json:"fail"`
}

// OutParams are the params of a put.
type OutParams struct {
	// Version is the version the put produces.
	Version resource.String `json:"version"`
	// File, a path relative to the put's directory (e.g. "out/version"), holds
	// the version instead.
	File string `json:"file"`
	// PrintEnv prints the environment to stderr.
	PrintEnv bool `json:"print_env"`
	// Fail (Porter's) makes out fail.
	Fail bool `json:"fail"`
}

// EnvImage names the image this binary runs in (baked into the image), used
// by mirror_self.
const EnvImage = "PORTER_RESOURCE_IMAGE"

// Type is the mock resource type.
type Type struct {
	// Image is this resource's own image reference, for mirror_self.
	Image string
	// Privileged says whether the resource runs privileged: its versions
	// then say so, and in writes it in the file "privileged", as
	// Concourse's mock does.
	Privileged func() (bool, error)
}

// New returns the mock type; image is its own image reference (may be
// empty). It runs privileged when it has CAP_SYS_ADMIN, as a privileged
// container has.
func New(image string) *Type { return &Type{Image: image, Privileged: hasSysAdmin} }

// capSysAdmin is CAP_SYS_ADMIN's bit in /proc/self/status's CapEff.
const capSysAdmin = 21

// hasSysAdmin says whether this process has CAP_SYS_ADMIN. Concourse's mock
// reads the uid map instead, which tells a user-namespaced container from
// a privileged one; no pod here has a user namespace, so capabilities are
// what tell a privileged step pod from another.
func hasSysAdmin() (bool, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false, fmt.Errorf("read the capabilities: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if hex, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			if err != nil {
				return false, fmt.Errorf("read the capabilities %q: %w", line, err)
			}
			return caps&(1<<capSysAdmin) != 0, nil
		}
	}
	return false, errors.New("read the capabilities: /proc/self/status has no CapEff")
}

// privileged is t.Privileged, false when unset.
func (t *Type) privileged() (bool, error) {
	if t.Privileged == nil {
		return false, nil
	}
	priv, err := t.Privileged()
	if err != nil {
		return false, fmt.Errorf("could not check privilege: %w", err)
	}
	return priv, nil
}

// markPrivileged adds privileged: "true" to versions made in a privileged
// container, as Concourse's mock does.
func (t *Type) markPrivileged(vs []resource.Version) ([]resource.Version, error) {
	priv, err := t.privileged()
	if err != nil || !priv {
		return vs, err
	}
	for i := range vs {
		vs[i]["privileged"] = "true"
	}
	return vs, nil
}

func decodeSource(req []byte) (Source, error) {
	var s Source
	if err := resource.Decode("mock source", req, &s); err != nil {
		return s, err
	}
	if s.InitialVersion == "" {
		s.InitialVersion = DefaultInitialVersion
	}
	return s, nil
}

// history is every version the source describes, oldest first.
func (s Source) history() []string {
	var h []string
	if !s.NoInitialVersion {
		h = append(h, string(s.InitialVersion))
	}
	for _, v := range s.Versions {
		h = append(h, string(v))
	}
	return h
}

// CheckRaw prints check_output instead of versions when it is set.
func (t *Type) CheckRaw(ctx context.Context, req resource.CheckRequest, log io.Writer) ([]byte, bool, error) {
	s, err := decodeSource(req.Source)
	if err != nil {
		return nil, false, err
	}
	if s.CheckOutput == nil {
		return nil, false, nil
	}
	if err := t.beforeCheck(ctx, s, log); err != nil {
		return nil, false, err
	}
	return []byte(*s.CheckOutput), true, nil
}

func (t *Type) beforeCheck(ctx context.Context, s Source, log io.Writer) error {
	if s.Log != "" {
		resource.Logf(log, "%s", s.Log)
	}
	if s.CheckDelay > 0 {
		resource.Logf(log, "check: waiting %s (check_delay)", time.Duration(s.CheckDelay))
		if err := resource.Sleep(ctx, time.Duration(s.CheckDelay)); err != nil {
			return fmt.Errorf("check_delay: %w", err)
		}
	}
	if s.CheckFailure != "" {
		return fmt.Errorf("intentionally failing to check: %s", s.CheckFailure)
	}
	return nil
}

// Check emits force_version alone when set. Otherwise, as Concourse's mock,
// it returns the version it is given (`fly check-resource -f` makes a
// version so), with every later one when it is in the list of the initial
// version and source.versions; with no version given, the latest of that
// list.
func (t *Type) Check(ctx context.Context, req resource.CheckRequest, log io.Writer) ([]resource.Version, error) {
	s, err := decodeSource(req.Source)
	if err != nil {
		return nil, err
	}
	if err := t.beforeCheck(ctx, s, log); err != nil {
		return nil, err
	}
	return t.markPrivileged(versionsFrom(s, req.Version))
}

func versionsFrom(s Source, given resource.Version) []resource.Version {
	if s.ForceVersion != "" {
		return []resource.Version{{"version": string(s.ForceVersion)}}
	}
	h := s.history()
	cur, ok := given["version"]
	from := len(h) - 1
	if ok {
		// The last occurrence, so a version listed twice still ends the list.
		from = lastIndex(h, cur)
		if from < 0 {
			return []resource.Version{{"version": cur}}
		}
	}
	out := []resource.Version{}
	if len(h) == 0 {
		return out
	}
	for _, v := range h[from:] {
		out = append(out, resource.Version{"version": v})
	}
	return out
}

func lastIndex(h []string, v string) int {
	for i := len(h) - 1; i >= 0; i-- {
		if h[i] == v {
			return i
		}
	}
	return -1
}

// In writes the version file, the source's and params' create_files, and
// (mirror_self) the image's repository and tag files.
func (t *Type) In(ctx context.Context, dir string, req resource.InRequest, log io.Writer) (resource.Response, error) {
	s, err := decodeSource(req.Source)
	if err != nil {
		return resource.Response{}, err
	}
	var p InParams
	if err := resource.Decode("mock get params", req.Params, &p); err != nil {
		return resource.Response{}, err
	}
	if s.Log != "" {
		resource.Logf(log, "%s", s.Log)
	}
	if s.InDelay > 0 {
		resource.Logf(log, "in: waiting %s (in_delay)", time.Duration(s.InDelay))
		if err := resource.Sleep(ctx, time.Duration(s.InDelay)); err != nil {
			return resource.Response{}, fmt.Errorf("in_delay: %w", err)
		}
	}
	version, ok := req.Version["version"]
	if !ok {
		return resource.Response{}, fmt.Errorf("request version %v has no \"version\" key", req.Version)
	}
	priv, err := t.privileged()
	if err != nil {
		return resource.Response{}, err
	}
	files := map[string]string{"version": version, "privileged": strconv.FormatBool(priv) + "\n"}
	for _, create := range []map[string]json.RawMessage{s.CreateFiles, p.CreateFilesViaParams} {
		for name, content := range create {
			text, err := fileContent(content)
			if err != nil {
				return resource.Response{}, fmt.Errorf("create file %s: %w", name, err)
			}
			files[name] = text
		}
	}
	if s.MirrorSelf || p.MirrorSelfViaParams {
		repo, tag, err := splitImage(t.Image)
		if err != nil {
			return resource.Response{}, fmt.Errorf("mirror_self: %w", err)
		}
		files["repository"], files["tag"] = repo, tag
	}
	if err := writeFiles(dir, files); err != nil {
		return resource.Response{}, err
	}
	resource.Logf(log, "fetched version %s", version)
	if p.Fail {
		return resource.Response{}, fmt.Errorf("failing as asked (params.fail) after fetching version %s", version)
	}
	// The version as given, privileged key and all, as Concourse's mock.
	return resource.Response{Version: maps.Clone(req.Version), Metadata: s.Metadata}, nil
}

// Out produces params.version, or the trimmed content of params.file.
func (t *Type) Out(ctx context.Context, dir string, req resource.OutRequest, log io.Writer) (resource.Response, error) {
	s, err := decodeSource(req.Source)
	if err != nil {
		return resource.Response{}, err
	}
	var p OutParams
	if err := resource.Decode("mock put params", req.Params, &p); err != nil {
		return resource.Response{}, err
	}
	if s.Log != "" {
		resource.Logf(log, "%s", s.Log)
	}
	if p.PrintEnv {
		env := os.Environ()
		sort.Strings(env)
		for _, e := range env {
			resource.Logf(log, "%s", e)
		}
	}
	if p.Fail {
		return resource.Response{}, fmt.Errorf("failing as asked (params.fail)")
	}
	version := string(p.Version)
	switch {
	case p.Version != "" && p.File != "":
		return resource.Response{}, fmt.Errorf("params.version and params.file are both set: want one")
	case p.File != "":
		path, err := resource.JoinInside(dir, p.File)
		if err != nil {
			return resource.Response{}, fmt.Errorf("params.file: %w", err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return resource.Response{}, fmt.Errorf("params.file: read the version: %w", err)
		}
		version = strings.TrimSpace(string(b))
		if version == "" {
			return resource.Response{}, fmt.Errorf("params.file: %s is empty", p.File)
		}
	case p.Version == "":
		return resource.Response{}, fmt.Errorf("put needs params.version or params.file")
	}
	resource.Logf(log, "put version %s", version)
	vs, err := t.markPrivileged([]resource.Version{{"version": version}})
	if err != nil {
		return resource.Response{}, err
	}
	return resource.Response{Version: vs[0], Metadata: s.Metadata}, nil
}

// fileContent is a create_files value as the file holds it: a string as it
// is, anything else as the JSON it was written as. START_VAR and END_VAR
// become (( and )), as in Concourse's mock, so a file can hold ((vars))
// the pipeline would otherwise fill in.
func fileContent(raw json.RawMessage) (string, error) {
	text := string(raw)
	if len(raw) > 0 && raw[0] == '"' {
		if err := json.Unmarshal(raw, &text); err != nil {
			return "", fmt.Errorf("read its content: %w", err)
		}
	}
	return strings.NewReplacer("START_VAR", "((", "END_VAR", "))").Replace(text), nil
}

func writeFiles(dir string, files map[string]string) error {
	for name, content := range files {
		path, err := resource.JoinInside(dir, name)
		if err != nil {
			return fmt.Errorf("create file: %w", err)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("create file %s: %w", name, err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return fmt.Errorf("create file %s: %w", name, err)
		}
	}
	return nil
}

// splitImage splits "host/repo:tag" into repository and tag (default latest).
func splitImage(ref string) (string, string, error) {
	if ref == "" {
		return "", "", fmt.Errorf("this binary does not know its image (%s is not set)", EnvImage)
	}
	repo, tag := ref, "latest"
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		repo, tag = ref[:i], ref[i+1:]
	}
	return repo, tag, nil
}
