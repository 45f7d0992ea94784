package creds_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/porter-ci/porter/pkg/creds"
	"github.com/porter-ci/porter/pkg/netguard"
	"github.com/porter-ci/porter/pkg/vars"
	"github.com/porter-ci/porter/test/testenv"
)

// TestVaultLookup checks Concourse's lookup rules against a real
// `vault server -dev`: KV v2 and v1 mounts, the templates' order, the
// shared path, "value" against fields, team isolation, and lookups that
// fail rather than read as undefined.
func TestVaultLookup(t *testing.T) {
	ctx := context.Background()
	srv := testenv.Vault(t, "")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(srv.EnableKV(ctx, "concourse", 2))
	must(srv.EnableKV(ctx, "legacy", 1))
	for path, data := range map[string]map[string]any{
		"main/pipe/token":   {"value": "pipeline-only"},
		"main/token":        {"value": "team-wide"},
		"main/login":        {"username": "u", "password": "p", "port": 5432},
		"other/token":       {"value": "other-team"},
		"shared/registry":   {"value": "shared-registry"},
		"main/registry":     {"value": "team-registry"},
		"main/gone":         {"value": "deleted"},
		"root-only":         {"value": "at-the-prefix"},
		"main/nested/deep":  {"value": "nested"},
		"main/pipe/fielded": {"value": "v", "extra": "ignored"},
	} {
		must(srv.PutKV(ctx, "concourse", path, data))
	}
	must(srv.DeleteKV(ctx, "concourse", "main/gone"))
	must(srv.PutKV(ctx, "legacy", "teams/main/token", map[string]any{"value": "from-kv-v1"}))
	must(srv.PutKV(ctx, "legacy", "teams/main/db", map[string]any{"user": "admin", "password": "pw"}))

	v, err := creds.NewVault(creds.VaultConfig{URL: srv.Addr, ClientToken: srv.Token, PathPrefix: "/concourse", SharedPath: "shared"})
	must(err)
	for _, tc := range []struct {
		team, pipeline, name string
		want                 any
	}{
		{"main", "pipe", "token", "pipeline-only"},
		{"main", "another", "token", "team-wide"},
		// A one-off build has no pipeline: only the team's template.
		{"main", "", "token", "team-wide"},
		{"other", "pipe", "token", "other-team"},
		{"main", "pipe", "login", map[string]any{"username": "u", "password": "p", "port": json.Number("5432")}},
		// "value" is the var; other keys are not fields then, as in Concourse.
		{"main", "pipe", "fielded", "v"},
		// The team's secret comes before the shared one; the shared one
		// serves every team.
		{"main", "pipe", "registry", "team-registry"},
		{"other", "pipe", "registry", "shared-registry"},
		{"main", "pipe", "nested/deep", "nested"},
		// Team isolation: other has no login, and main's is not found.
		{"other", "pipe", "login", nil},
		// A deleted (not destroyed) KV v2 secret is not found.
		{"main", "pipe", "gone", nil},
		// The prefix itself is only for var_sources.
		{"main", "pipe", "root-only", nil},
		{"main", "pipe", "missing", nil},
	} {
		got, found, err := v.Lookup(ctx, tc.team, tc.pipeline, tc.name)
		if err != nil {
			t.Errorf("%s/%s ((%s)): %v", tc.team, tc.pipeline, tc.name, err)
			continue
		}
		if found != (tc.want != nil) || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s/%s ((%s)) = %#v (found %v), want %#v", tc.team, tc.pipeline, tc.name, got, found, tc.want)
		}
	}

	// A var_source also looks at the prefix itself.
	src := v.Source("main", "pipe")
	if got, found, err := src.Get(ctx, vars.Ref{Path: "root-only"}); err != nil || !found || got != "at-the-prefix" {
		t.Errorf("var source ((root-only)) = %v, %v, %v; want at-the-prefix", got, found, err)
	}
	if got, found, err := src.Get(ctx, vars.Ref{Path: "token"}); err != nil || !found || got != "pipeline-only" {
		t.Errorf("var source ((token)) = %v, %v, %v; want pipeline-only", got, found, err)
	}

	// KV v1, a custom prefix and custom templates.
	v1, err := creds.NewVault(creds.VaultConfig{URL: srv.Addr, ClientToken: srv.Token, PathPrefix: "legacy",
		LookupTemplates: []string{"/teams/{{.Team}}/{{.Secret}}"}})
	must(err)
	if got, found, err := v1.Lookup(ctx, "main", "pipe", "token"); err != nil || !found || got != "from-kv-v1" {
		t.Errorf("KV v1 ((token)) = %v, %v, %v; want from-kv-v1", got, found, err)
	}
	if got, found, err := v1.Lookup(ctx, "main", "", "db"); err != nil || !found ||
		!reflect.DeepEqual(got, map[string]any{"user": "admin", "password": "pw"}) {
		t.Errorf("KV v1 ((db)) = %v, %v, %v; want its fields", got, found, err)
	}

	// A name that climbs out of the team's path is refused, not looked up.
	for _, name := range []string{"../other/token", "a//b", "./token"} {
		if _, found, err := v.Lookup(ctx, "main", "pipe", name); err == nil || found {
			t.Errorf("((%s)): found %v, err %v; want a refusal", name, found, err)
		}
	}

	// A token that may not read fails the lookup: "undefined" would hide it.
	weak, err := srv.TokenWithPolicy(ctx, "other-only", `path "concourse/data/other/*" { capabilities = ["read"] }`)
	must(err)
	vw, err := creds.NewVault(creds.VaultConfig{URL: srv.Addr, ClientToken: weak, PathPrefix: "/concourse"})
	must(err)
	if got, found, err := vw.Lookup(ctx, "other", "", "token"); err != nil || !found || got != "other-team" {
		t.Errorf("limited token, allowed path: %v, %v, %v; want other-team", got, found, err)
	}
	if _, found, err := vw.Lookup(ctx, "main", "pipe", "token"); err == nil || found || !strings.Contains(err.Error(), "403") {
		t.Errorf("limited token, denied path: found %v, err %v; want a 403 error", found, err)
	}

	// Vault down: an error naming the var.
	srvDown := testenv.Vault(t, "")
	vd, err := creds.NewVault(creds.VaultConfig{URL: srvDown.Addr, ClientToken: srvDown.Token, PathPrefix: "/concourse"})
	must(err)
	must(srvDown.Stop())
	if _, _, err := vd.Lookup(ctx, "main", "pipe", "token"); err == nil || !strings.Contains(err.Error(), "((token))") {
		t.Errorf("Vault down: err %v; want one naming ((token))", err)
	}
}

func TestVaultConfigRefused(t *testing.T) {
	for _, tc := range []struct {
		cfg  creds.VaultConfig
		want string
	}{
		{creds.VaultConfig{ClientToken: "t", PathPrefix: "/c"}, "url is required"},
		{creds.VaultConfig{URL: "vault:8200", ClientToken: "t", PathPrefix: "/c"}, "must be http:// or https://"},
		{creds.VaultConfig{URL: "http://v", PathPrefix: "/c"}, "client_token is required"},
		{creds.VaultConfig{URL: "http://v", ClientToken: "t"}, "path_prefix cannot be empty"},
		{creds.VaultConfig{URL: "http://v", ClientToken: "t", PathPrefix: "/c", LookupTemplates: []string{"/{{.Team}}/{{.Secret"}}, "lookup_templates[0]"},
		{creds.VaultConfig{URL: "http://v", ClientToken: "t", PathPrefix: "/c", LookupTemplates: []string{"/{{.Team}}/{{.Who}}/{{.Secret}}"}}, "only {{.Team}}, {{.Pipeline}} and {{.Secret}}"},
	} {
		if _, err := creds.NewVault(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want one with %q", tc.cfg, err, tc.want)
		}
	}
}

// A var_source's Vault client checks each connection's address before it
// is made: a Vault URL on loopback is refused with an error naming the URL
// and the flag that would allow it, and no request reaches the listener;
// with the network allowed the same Vault is asked.
func TestVaultDialControl(t *testing.T) {
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		http.NotFound(w, r)
	}))
	defer srv.Close()
	cfg := creds.VaultConfig{URL: srv.URL, ClientToken: "the-token", PathPrefix: "/concourse"}

	refusing, err := creds.NewVault(cfg, creds.WithDialControl(netguard.Guard{Flag: "var-source-allowed-networks"}.Control))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = refusing.Lookup(context.Background(), "main", "p", "x")
	var refused *netguard.RefusedError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), srv.URL) || !strings.Contains(err.Error(), "--var-source-allowed-networks") {
		t.Fatalf("lookup through %s: %v; want refused, naming the URL and the flag", srv.URL, err)
	}
	t.Logf("refused: %v", err)
	if n := asked.Load(); n != 0 {
		t.Fatalf("a refused Vault was asked %d times", n)
	}

	allowed := netguard.Guard{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}
	allowing, err := creds.NewVault(cfg, creds.WithDialControl(allowed.Control))
	if err != nil {
		t.Fatal(err)
	}
	if _, found, err := allowing.Lookup(context.Background(), "main", "p", "x"); err != nil || found {
		t.Fatalf("lookup with loopback allowed: found=%v %v; want not found", found, err)
	}
	if asked.Load() == 0 {
		t.Fatal("the allowed Vault was never asked")
	}
}
