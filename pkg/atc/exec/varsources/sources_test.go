package varsources

import (
	"context"
	"testing"

	"github.com/porter-ci/porter/pkg/vars"
)

func TestResolversOfADummySource(t *testing.T) {
	s := Sources{Team: "main", Pipeline: "p"}
	got, err := s.Resolvers(t.Context(), []byte(`{"var_sources": [{"name": "d", "type": "dummy", "config": {"vars": {"k": "v"}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	v, found, err := got["d"].Get(context.Background(), vars.Ref{Path: "k"})
	if err != nil || !found || v != "v" {
		t.Errorf("d:k is %v (found %v, err %v), want v", v, found, err)
	}
}

func TestResolversRefuse(t *testing.T) {
	s := Sources{Team: "main", Pipeline: "p"}
	for config, want := range map[string]string{
		`{`: `read the var_sources of pipeline "p": unexpected end of JSON input`,
		`{"var_sources": [{"name": "x", "type": "ssm"}]}`:                   `var source "x": type "ssm" is not supported by this server`,
		`{"var_sources": [{"name": "d", "type": "dummy", "config": "no"}]}`: "var source \"d\": config must be a map with `vars:`",
	} {
		if _, err := s.Resolvers(t.Context(), []byte(config)); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %q", config, err, want)
		}
	}
}
