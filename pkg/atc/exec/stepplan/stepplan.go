// Package stepplan reads and checks what can be read of a step's plan
// before the step runs (a load_var's format and file, a resource step's
// name, type image and timeout, durations, a put's inputs), and of what
// its sidecar reported after (its outputs).
package stepplan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/names"
	"sigs.k8s.io/yaml"
)

// LoadVarFormat is the format a load_var reads its file in: the step's,
// or the file's extension when it is one of the formats, else trim.
func LoadVarFormat(lv *concourse.LoadVarPlan) (string, error) {
	switch lv.Format {
	case "json", "yaml", "yml", "trim", "raw":
		return lv.Format, nil
	case "":
	default:
		return "", fmt.Errorf("load_var %s: format %q: want json, yaml, trim or raw", lv.Name, lv.Format)
	}
	switch ext := strings.TrimPrefix(path.Ext(lv.File), "."); ext {
	case "json", "yaml", "yml":
		return ext, nil
	}
	return "trim", nil
}

// ParseVarFile reads a load_var file in format; numbers stay as written.
func ParseVarFile(body []byte, format string) (any, error) {
	switch format {
	case "trim":
		return strings.TrimSpace(string(body)), nil
	case "raw":
		return string(body), nil
	case "yaml", "yml":
		js, err := yaml.YAMLToJSON(body)
		if err != nil {
			return nil, fmt.Errorf("invalid yaml: %w", err)
		}
		body = js
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("invalid %s: %w", format, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("invalid %s: characters found after the top-level value", format)
	}
	return v, nil
}

// ValidateResource checks what can be checked of a resource step
// before the build is recorded.
func ValidateResource(p *concourse.Plan) error {
	var kind, name, timeout string
	var image concourse.TypeImage
	switch {
	case p.Get != nil:
		kind, name, timeout, image = "get", p.Get.Name, p.Get.Timeout, p.Get.TypeImage
		if p.Get.Version == nil && p.Get.VersionFrom == nil {
			return fmt.Errorf("get %q has no version to fetch (neither version nor version_from)", name)
		}
	case p.Put != nil:
		kind, name, timeout, image = "put", p.Put.Name, p.Put.Timeout, p.Put.TypeImage
	case p.Check != nil:
		kind, name, timeout, image = "check", p.Check.Name, p.Check.Timeout, p.Check.TypeImage
	}
	if name == "" {
		return fmt.Errorf("a %s step has no name", kind)
	}
	if err := names.Check(kind, name); err != nil {
		return err
	}
	if timeout != "" {
		if _, err := PositiveDuration(timeout); err != nil {
			return fmt.Errorf("%s %q: timeout: %w", kind, name, err)
		}
	}
	if image.BaseType == "" && image.CheckPlan == nil && image.GetPlan == nil {
		return fmt.Errorf("%s %q: its resource type has no image (neither base_type nor check_plan/get_plan)", kind, name)
	}
	return nil
}

// PositiveDuration parses a step timeout or an interval.
func PositiveDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration like \"30m\"", s)
	}
	return d, nil
}

// EventMetadata is a resource response's metadata as build events show it.
func EventMetadata(md []concourse.MetadataField) []events.MetadataField {
	var out []events.MetadataField
	for _, m := range md {
		out = append(out, events.MetadataField{Name: m.Name, Value: m.Value})
	}
	return out
}

// NonNilMap is m, or an empty map for nil (a request's "source": {}).
func NonNilMap(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// DetectInputs calls f with the first path segment of every string in
// params: a put's params name the artifacts it reads ("repo/file").
func DetectInputs(v any, f func(string)) {
	switch v := v.(type) {
	case string:
		first, _, _ := strings.Cut(v, "/")
		if first != "" && first != "." && first != ".." {
			f(first)
		}
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			DetectInputs(v[k], f)
		}
	case []any:
		for _, e := range v {
			DetectInputs(e, f)
		}
	}
}

func OutputOf(fin *eventspb.StepFinished, name string) (api.ArtifactRef, bool) {
	for _, o := range fin.GetOutputs() {
		if o.GetName() == name {
			return api.ArtifactRef{Key: o.GetKey(), Digest: o.GetDigest(), Size: o.GetSize()}, true
		}
	}
	return api.ArtifactRef{}, false
}
