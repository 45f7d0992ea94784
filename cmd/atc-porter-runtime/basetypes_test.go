package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/atc/exec/basetypes"
)

func TestParseBaseResourceTypes(t *testing.T) {
	types, err := parseBaseResourceTypes([]string{"git=example.com/git:1", "s3=example.com/s3:2"})
	if err != nil {
		t.Fatal(err)
	}
	if types["git"] != "example.com/git:1" || types["s3"] != "example.com/s3:2" || types["mock"] != "porter.local/resource-mock:dev" {
		t.Fatalf("types = %v", types)
	}
	if _, err := parseBaseResourceTypes([]string{"git"}); err == nil || !strings.Contains(err.Error(), "want NAME=IMAGE") {
		t.Fatalf("err = %v", err)
	}
}

func TestParseBaseResourceTypeDefaults(t *testing.T) {
	types := basetypes.Images()
	got, err := parseBaseResourceTypeDefaults([]byte("registry-image:\n  registry_mirror: {host: 10.245.0.1:5000}\n  insecure: true\n"), types)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]any{"registry-image": {"registry_mirror": map[string]any{"host": "10.245.0.1:5000"}, "insecure": true}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults = %#v, want %#v", got, want)
	}
	for _, tc := range []struct{ yaml, wantErr string }{
		{"registry-imag: {insecure: true}\n", `registry-imag: not a base resource type of this server (known: git, mock, registry-image, time)`},
		{"- registry-image\n", "want a map of base resource type names to source defaults"},
		{"registry-image: [insecure]\n", "want a map"},
	} {
		if _, err := parseBaseResourceTypeDefaults([]byte(tc.yaml), types); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%q: err = %v, want %q", tc.yaml, err, tc.wantErr)
		}
	}
	if _, err := loadBaseResourceTypeDefaults(t.TempDir()+"/missing.yml", types); err == nil || !strings.Contains(err.Error(), "missing.yml") {
		t.Errorf("missing file: %v", err)
	}
}
