package credcheck

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/concourse"
)

// manager holds team main's secrets, by pipeline ("" for the team's).
type manager map[string]map[string]any

func (m manager) Lookup(_ context.Context, team, pipeline, name string) (any, bool, error) {
	if name == "broken" {
		return nil, false, errors.New("vault is down")
	}
	if team != "main" {
		return nil, false, nil
	}
	if v, ok := m[pipeline][name]; ok {
		return v, true, nil
	}
	v, ok := m[""][name]
	return v, ok, nil
}

var secrets = manager{
	"":  {"token": "t0k3n", "login": map[string]any{"user": "u"}, "platform": "linux"},
	"p": {"only-p": "x"},
}

func config(t *testing.T) concourse.Config {
	t.Helper()
	return concourse.Config{
		ResourceTypes: []concourse.ResourceType{{Name: "rt", Type: "registry-image", Source: map[string]any{"password": "((token))"}}},
		Resources: []concourse.ResourceConfig{{Name: "r", Type: "mock", WebhookToken: "((token))",
			Source: map[string]any{"user": "((login.user))", "nested": []any{map[string]any{"k": "p-((only-p))"}}}}},
		Jobs: []concourse.JobConfig{{Name: "j", Plan: []concourse.Step{{Get: "r"}, {
			Task:   "t",
			Params: map[string]any{"TOKEN": "((token))"},
			Vars:   map[string]any{"v": "((token))"},
			Config: json.RawMessage(`{"platform":"((platform))","image_resource":{"type":"mock","source":{"mirror_self":true}},"run":{"path":"true"}}`),
		}}}},
	}
}

func TestAllPresent(t *testing.T) {
	if err := Check(context.Background(), secrets, "main", "p", config(t)); err != nil {
		t.Fatalf("every var is there, yet: %v", err)
	}
}

func TestMissing(t *testing.T) {
	cfg := config(t)
	cfg.ResourceTypes[0].Source["other"] = "((nope))"
	cfg.Resources[0].WebhookToken = "((hook))"
	cfg.Resources[0].Source["user"] = "((login.name))"
	hook := &concourse.Step{Task: "notify", Params: map[string]any{"A": "((b)) and ((a))"}}
	cfg.Jobs[0].Plan[1].Ensure = hook
	cfg.Jobs[0].Plan[1].Vars = map[string]any{"v": "((vs:secret))", "w": "((.:local))"}
	cfg.Jobs[0].Plan[1].Config = json.RawMessage(`{"platform":"((os))","run":{"path":"true"}}`)

	// Pipeline q does not see p's secret.
	err := Check(context.Background(), secrets, "main", "q", cfg)
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("want an *Error, got %v", err)
	}
	want := []string{
		`resource type "rt" source: undefined vars: nope`,
		`resource "r" source: `, // a missing field or a missing var: whichever the map yields first
		`resource "r" webhook_token: undefined vars: hook`,
		`job "j" task "t" vars: undefined vars: .:local, vs:secret`,
		`job "j" task "t" config: undefined vars: os`,
		`job "j" task "notify" params: undefined vars: a, b`,
	}
	if len(ce.Problems) != len(want) {
		t.Fatalf("problems:\n%v\nwant %d", err, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(ce.Problems[i].Error(), w) {
			t.Errorf("problem %d is %q, want %q", i, ce.Problems[i], w)
		}
	}
	text := err.Error()
	if !strings.HasPrefix(text, "credential validation failed\n\n6 errors occurred:\n\t* resource type") || !strings.HasSuffix(text, "a, b\n\n") {
		t.Errorf("message %q is not in Concourse's shape", text)
	}
}

func TestOneProblemAndLookupErrors(t *testing.T) {
	cfg := concourse.Config{Resources: []concourse.ResourceConfig{{Name: "r", Type: "mock", Source: map[string]any{"x": "((broken))"}}}}
	err := Check(context.Background(), secrets, "main", "p", cfg)
	if err == nil || err.Error() != "credential validation failed\n\n1 error occurred:\n\t* resource \"r\" source: get var broken: vault is down\n\n" {
		t.Errorf("got %q", err)
	}
	// Another team's secrets are not this one's.
	cfg.Resources[0].Source["x"] = "((token))"
	if err := Check(context.Background(), secrets, "other", "p", cfg); err == nil || !strings.Contains(err.Error(), "undefined vars: token") {
		t.Errorf("team other: %v", err)
	}
	// No credential manager: every var is undefined.
	if err := Check(context.Background(), nil, "main", "p", cfg); err == nil || !strings.Contains(err.Error(), "undefined vars: token") {
		t.Errorf("no manager: %v", err)
	}
}

// An embedded task config that its credentials make invalid is an error, as
// in Concourse.
func TestTaskConfigInvalidOnceFilled(t *testing.T) {
	cfg := concourse.Config{Jobs: []concourse.JobConfig{{Name: "j", Plan: []concourse.Step{{Task: "t",
		Config: json.RawMessage(`{"platform":"((token))","run":{"path":"true"}}`)}}}}}
	err := Check(context.Background(), secrets, "main", "p", cfg)
	// The credential is redacted from the answer, as from a build log.
	if err == nil || !strings.Contains(err.Error(), `job "j" task "t" config: invalid task configuration: platform "((redacted))" is not supported`) ||
		strings.Contains(err.Error(), "t0k3n") {
		t.Errorf("got %v", err)
	}
}
