package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/porter-ci/porter/pkg/atc/exec/basetypes"
	"sigs.k8s.io/yaml"
)

// parseBaseResourceTypes reads --base-resource-type NAME=IMAGE flags over
// the defaults.
func parseBaseResourceTypes(specs []string) (map[string]string, error) {
	types := basetypes.Images()
	for _, spec := range specs {
		name, image, ok := strings.Cut(spec, "=")
		if !ok || name == "" || image == "" {
			return nil, fmt.Errorf("--base-resource-type %q: want NAME=IMAGE", spec)
		}
		types[name] = image
	}
	return types, nil
}

// Base resource type defaults, like Concourse's
// --base-resource-type-defaults: source settings a base type's every
// resource and image_resource gets unless its source sets them.

// loadBaseResourceTypeDefaults reads the --base-resource-type-defaults
// file: YAML mapping base type names to source defaults, e.g.
//
//	registry-image:
//	  registry_mirror: {host: 10.245.0.1:5000}
//	  insecure: true
func loadBaseResourceTypeDefaults(path string, baseTypes map[string]string) (map[string]map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("base resource type defaults: %w", err)
	}
	defaults, err := parseBaseResourceTypeDefaults(data, baseTypes)
	if err != nil {
		return nil, fmt.Errorf("base resource type defaults %s: %w", path, err)
	}
	return defaults, nil
}

// parseBaseResourceTypeDefaults parses base resource type defaults; every
// name must be one of baseTypes (a misspelt name would silently do nothing).
func parseBaseResourceTypeDefaults(data []byte, baseTypes map[string]string) (map[string]map[string]any, error) {
	var defaults map[string]map[string]any
	if err := yaml.Unmarshal(data, &defaults); err != nil {
		return nil, fmt.Errorf("want a map of base resource type names to source defaults: %w", err)
	}
	var unknown []string
	for name := range defaults {
		if _, ok := baseTypes[name]; !ok {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return nil, fmt.Errorf("%s: not a base resource type of this server (known: %s)",
			strings.Join(unknown, ", "), strings.Join(slices.Sorted(maps.Keys(baseTypes)), ", "))
	}
	return defaults, nil
}
