package stepvars

import (
	"slices"
	"testing"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/creds"
)

// A run of an across step sees its own values over the build's local
// vars; what it sets stays in its scope.
func TestLocalScopes(t *testing.T) {
	root := NewScope()
	root.Set("a", "build")
	run := root.Child()
	run.Set("b", "run")
	if v, _ := run.Get("a"); v != "build" {
		t.Errorf("a in the run = %v", v)
	}
	if _, ok := root.Get("b"); ok {
		t.Error("the run's var leaked into the build")
	}
}

func TestSplitSecretParams(t *testing.T) {
	a := &action.Action{Params: map[string]string{"A": "plain", "B": "Bearer s3cr3t", "C": "s3cr3t", "D": ""}}
	got := SplitSecretParams(a, creds.NewRedactor([]string{"s3cr3t"}))
	if len(got) != 2 || got["B"] != "Bearer s3cr3t" || got["C"] != "s3cr3t" {
		t.Errorf("secret params = %v", got)
	}
	if !slices.Equal(a.SecretParams, []string{"B", "C"}) || len(a.Params) != 2 || a.Params["A"] != "plain" {
		t.Errorf("action params = %v, secret %v", a.Params, a.SecretParams)
	}
	b := &action.Action{Params: map[string]string{"A": "x"}}
	if got := SplitSecretParams(b, nil); got != nil || len(b.Params) != 1 {
		t.Errorf("without credentials: %v %v", got, b.Params)
	}
}

func TestSecretsOfNestedValues(t *testing.T) {
	got := Secrets(map[string]any{"a": "x", "b": []any{"y", 3, nil, ""}}, "x")
	if !slices.Equal(got, []string{"3", "x", "y"}) {
		t.Fatalf("Secrets = %v", got)
	}
}
