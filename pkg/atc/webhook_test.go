package atc

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/porter-ci/porter/pkg/creds"
	"github.com/porter-ci/porter/pkg/db"
)

// TestInterpolateStringFillsInAWebhookToken: a webhook_token's ((vars))
// come from the team's credentials (the pipeline's own Secret first) and
// the pipeline's dummy var_sources, as a check's would.
func TestInterpolateStringFillsInAWebhookToken(t *testing.T) {
	secret := func(name, value string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: creds.DefaultNamespacePrefix + "main", Name: name},
			Data: map[string][]byte{"value": []byte(value)}}
	}
	s := &Server{kube: fake.NewSimpleClientset(secret("token", "team-wide"), secret("p.token", "pipeline-only"))}
	e := APIEngine{s}
	p := db.Pipeline{ID: 1, TeamName: "main", Name: "p",
		Config: json.RawMessage(`{"var_sources":[{"name":"d","type":"dummy","config":{"vars":{"hook":"from-dummy","n":42}}}]}`)}
	for in, want := range map[string]string{
		"plain":                "plain",
		"((token))":            "pipeline-only",
		"x-((token))-y":        "x-pipeline-only-y",
		"((d:hook))":           "from-dummy",
		"((d:n))":              "42",
		"((d:hook))/((token))": "from-dummy/pipeline-only",
	} {
		got, err := e.InterpolateString(t.Context(), p, in)
		if err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", in, got, err, want)
		}
	}
	other := db.Pipeline{ID: 2, TeamName: "main", Name: "q", Config: json.RawMessage(`{}`)}
	if got, err := e.InterpolateString(t.Context(), other, "((token))"); err != nil || got != "team-wide" {
		t.Errorf("another pipeline: %q, %v; want the team's", got, err)
	}
	for in, says := range map[string]string{
		"((missing))":   "missing",
		"((nowhere:x))": `var source "nowhere"`,
	} {
		if _, err := e.InterpolateString(t.Context(), p, in); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: %v, want an error saying %q", in, err, says)
		}
	}
}
