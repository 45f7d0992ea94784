package creds

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/porter-ci/porter/pkg/vars"
)

func secret(ns, name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func TestKubernetesLookup(t *testing.T) {
	client := fake.NewSimpleClientset(
		secret("concourse-main", "token", map[string]string{"value": "team-wide"}),
		secret("concourse-main", "pipe.token", map[string]string{"value": "pipeline-only"}),
		secret("concourse-main", "login", map[string]string{"username": "u", "password": "p"}),
		secret("concourse-other", "token", map[string]string{"value": "other-team"}),
	)
	k := &Kubernetes{Client: client, NamespacePrefix: DefaultNamespacePrefix}
	for _, tc := range []struct {
		team, pipeline, name string
		want                 any
		found                bool
	}{
		{"main", "", "token", "team-wide", true},
		{"main", "pipe", "token", "pipeline-only", true},
		{"main", "another", "token", "team-wide", true},
		{"other", "pipe", "token", "other-team", true},
		{"main", "", "login", map[string]any{"username": "u", "password": "p"}, true},
		{"main", "", "missing", nil, false},
		// Not a valid Secret name: never asked for, never found.
		{"main", "", "Bad_Name", nil, false},
		// Team isolation: team other has no login.
		{"other", "", "login", nil, false},
	} {
		got, found, err := k.Lookup(context.Background(), tc.team, tc.pipeline, tc.name)
		if err != nil {
			t.Fatalf("%s/%s/%s: %v", tc.team, tc.pipeline, tc.name, err)
		}
		if found != tc.found {
			t.Errorf("%s/%s/%s: found = %v, want %v", tc.team, tc.pipeline, tc.name, found, tc.found)
			continue
		}
		if m, ok := tc.want.(map[string]any); ok {
			gm, _ := got.(map[string]any)
			if len(gm) != len(m) || gm["username"] != m["username"] || gm["password"] != m["password"] {
				t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
			}
		} else if got != tc.want {
			t.Errorf("%s/%s/%s: got %v, want %v", tc.team, tc.pipeline, tc.name, got, tc.want)
		}
	}
}

func TestRedact(t *testing.T) {
	r := NewRedactor([]string{"s3cr3t", "s3cr3t-longer", "  ", "line1\nline2"})
	for in, want := range map[string]string{
		"token=s3cr3t-longer end": "token=((redacted)) end",
		"s3cr3t and s3cr3t":       "((redacted)) and ((redacted))",
		"line2 printed alone":     "((redacted)) printed alone",
		"nothing secret here":     "nothing secret here",
	} {
		if got := r.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
	if got := (&Redactor{}).Redact("s3cr3t"); got != "s3cr3t" {
		t.Errorf("zero Redactor changed text: %q", got)
	}
}

func TestResolverInterpolates(t *testing.T) {
	client := fake.NewSimpleClientset(
		secret("concourse-main", "login", map[string]string{"username": "ursula", "password": "p4ss"}),
		secret("concourse-main", "pipe.token", map[string]string{"value": "t0ken"}),
	)
	r := Resolver{K: &Kubernetes{Client: client, NamespacePrefix: DefaultNamespacePrefix}, Team: "main", Pipeline: "pipe"}
	in := map[string]any{"user": "((login.username))", "auth": "Bearer ((token))", "missing": "((nope))"}
	_, _, err := vars.Interpolate(context.Background(), in, r)
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("undefined var not reported: %v", err)
	}
	delete(in, "missing")
	out, used, err := vars.Interpolate(context.Background(), in, r)
	if err != nil {
		t.Fatal(err)
	}
	m := out.(map[string]any)
	if m["user"] != "ursula" || m["auth"] != "Bearer t0ken" {
		t.Errorf("interpolated %v", m)
	}
	red := NewRedactor(used.Redactions())
	if got := red.Redact("ursula said Bearer t0ken"); got != "((redacted)) said Bearer ((redacted))" {
		t.Errorf("redacted %q", got)
	}
	if _, _, err := (Resolver{K: r.K, Team: "main"}).Get(context.Background(), vars.Ref{Source: "vault", Path: "x"}); err == nil {
		t.Error("a var source was accepted")
	}
}

func TestLookupForbiddenIsAnErrorNotUndefined(t *testing.T) {
	client := fake.NewSimpleClientset()
	client.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "token", nil)
	})
	k := &Kubernetes{Client: client, NamespacePrefix: "creds-"}
	_, found, err := k.Lookup(context.Background(), "main", "", "token")
	if found || err == nil || !strings.Contains(err.Error(), "cannot read Secret token in namespace creds-main") ||
		!strings.Contains(err.Error(), "forbidden") {
		t.Errorf("Lookup = found %v, err %v", found, err)
	}
}
