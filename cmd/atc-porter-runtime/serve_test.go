package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/porter-ci/porter/pkg/cli"
)

// runServe runs `atc-porter-runtime ARGS...` as main does, with serve
// defined here.
func runServe(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = cli.Run(context.Background(), args, cli.Env{Stdout: &out, Stderr: &errOut, Serve: newServeCommand})
	return code, out.String(), errOut.String()
}

// serveFlags parses args with serve's flags.
func serveFlags(t *testing.T, args ...string) (*serveOptions, error) {
	t.Helper()
	o := &serveOptions{}
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.SetOutput(&bytes.Buffer{})
	o.addFlags(fs)
	return o, fs.Parse(args)
}

// testdata/serve-flags.txt lists the flags serve had when they were parsed
// by the standard flag package in pkg/atc (atc-porter-runtime serve -h before the
// move): none may go missing.
func TestServeHelpListsEveryFlag(t *testing.T) {
	want, err := os.ReadFile("testdata/serve-flags.txt")
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runServe(t, "serve", "--help")
	if code != 0 {
		t.Fatalf("exit %d stderr %q", code, stderr)
	}
	var got []string
	for _, m := range regexp.MustCompile(`(?m)^\s+--([a-z0-9-]+)`).FindAllStringSubmatch(stdout, -1) {
		got = append(got, m[1])
	}
	names := strings.Fields(string(want))
	if len(names) != 73 {
		t.Fatalf("testdata lists %d flags, want 73", len(names))
	}
	for _, name := range names {
		if !slices.Contains(got, name) {
			t.Errorf("serve --help does not list --%s", name)
		}
	}
}

func TestServeRefusesBadValuesNamingTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-artifact-upload", "0"}, "--max-artifact-upload"},
		{[]string{"--max-artifact-upload=lots"}, "--max-artifact-upload"},
		{[]string{"--max-artifact-upload-entries", "-1"}, "--max-artifact-upload-entries"},
		{[]string{"--grpc-max-concurrent-streams", "0"}, "--grpc-max-concurrent-streams"},
		{[]string{"--grpc-max-unsynced-bytes", "1.5"}, "--grpc-max-unsynced-bytes"},
		{[]string{"--token-ttl", "soon"}, "--token-ttl"},
		{[]string{"--step-volume-size-limit", "-1Gi"}, "--step-volume-size-limit"},
		{[]string{"--native-sidecars=maybe"}, "--native-sidecars"},
		{[]string{"--max-active-tasks-per-worker", "x"}, "--max-active-tasks-per-worker"},
		{[]string{"--no-such-flag"}, "--no-such-flag"},
		{[]string{"--container-placement-strategy", "nope"}, "--container-placement-strategy"},
		{[]string{"--image-pull-policy", "Sometimes"}, "--image-pull-policy"},
		{[]string{"--dns-policy", "Nope"}, "--dns-policy"},
		{[]string{"--step-credentials", "magic"}, "--step-credentials"},
		{[]string{"--log-level", "loud"}, "--log-format/--log-level"},
		{[]string{"--base-resource-type", "git"}, "--base-resource-type"},
		{[]string{"--workers-config", "/nonexistent/workers.yaml"}, "--workers-config"},
		{[]string{"--base-resource-type-defaults", "/nonexistent/defaults.yml"}, "--base-resource-type-defaults"},
		{[]string{"--max-build-logs-to-retain", "-1"}, "--max-build-logs-to-retain -1: must not be negative"},
		{[]string{"--check-pod-max-checks", "-1"}, "--check-pod-max-checks -1: must not be negative"},
		{[]string{"--lookahead", "-1"}, "--lookahead -1: must not be negative"},
		{[]string{"--lookahead-per-worker", "-1"}, "--lookahead-per-worker -1: must not be negative"},
		{[]string{"--var-source-allowed-networks", "127.0.0.1/32,loopback"}, `--var-source-allowed-networks`},
		{[]string{"stray"}, `"stray"`},
		{[]string{"--vault-url", "http://vault:8200"}, "--vault-client-token is required"},
		{[]string{"--vault-url", "vault:8200", "--vault-client-token", "t"}, `--vault-url "vault:8200" must be http:// or https://`},
		{[]string{"--vault-url", "http://vault:8200", "--vault-client-token", "t", "--vault-lookup-templates", "/{{.Team}}/{{.Who}}"}, "--vault-lookup-templates[0]"},
		{[]string{"--vault-url", "http://vault:8200", "--vault-client-token", "t", "--vault-path-prefix", ""}, "--vault-path-prefix cannot be empty"},
		{[]string{"--vault-url", "http://vault:8200", "--vault-client-token", "t", "--vault-ca-cert", "/nonexistent/ca.pem"}, "--vault-ca-cert"},
		{[]string{"--vault-url", "http://vault:8200", "--vault-client-token", "t", "--kubernetes-credential-namespace-prefix", "creds-"},
			"only one credential manager can be configured"},
	} {
		code, _, stderr := runServe(t, append([]string{"serve", "--postgres-dsn", ""}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("serve %q: exit %d, stderr %q; want exit 2 naming %s", tc.args, code, stderr, tc.want)
		}
	}
}

// Good flags get past the command line: serve then fails for want of a
// database, with status 1.
func TestServeWithoutADatabaseFails(t *testing.T) {
	t.Setenv("PORTER_POSTGRES_DSN", "")
	code, _, stderr := runServe(t, "serve", "--postgres-dsn=", "--state-dir", t.TempDir(), "--ops-listen", "")
	if code != 1 || !strings.Contains(stderr, "no database") {
		t.Errorf("exit %d stderr %q", code, stderr)
	}
}

func TestByteSizeFlag(t *testing.T) {
	o, err := serveFlags(t)
	if err != nil {
		t.Fatal(err)
	}
	c := o.cfg.Limits
	if c.MaxArtifactUpload != 10<<30 || c.MaxRequestBody != 8<<20 || c.GRPC.Unsynced != 32<<20 {
		t.Fatalf("defaults %d, %d, %d", c.MaxArtifactUpload, c.MaxRequestBody, c.GRPC.Unsynced)
	}
	o, err = serveFlags(t, "--max-artifact-upload", "500Mi", "--max-request-body=1000", "--grpc-max-unsynced-bytes", "64Mi")
	if err != nil {
		t.Fatal(err)
	}
	c = o.cfg.Limits
	if c.MaxArtifactUpload != 500<<20 || c.MaxRequestBody != 1000 || c.GRPC.Unsynced != 64<<20 {
		t.Fatalf("parsed %d, %d, %d", c.MaxArtifactUpload, c.MaxRequestBody, c.GRPC.Unsynced)
	}
	for _, bad := range []string{"0", "-1", "lots", "1.5"} {
		for _, name := range []string{"--max-artifact-upload", "--grpc-max-unsynced-bytes"} {
			if _, err := serveFlags(t, name, bad); err == nil {
				t.Errorf("%s %s accepted", name, bad)
			}
		}
	}
}

func TestUploadLimitFlags(t *testing.T) {
	o, err := serveFlags(t)
	if err != nil {
		t.Fatal(err)
	}
	if c := o.cfg.Limits; c.Upload.MaxInflated != 1<<30 || c.Upload.MaxEntries != 500_000 {
		t.Fatalf("defaults %+v", c.Upload)
	}
	o, err = serveFlags(t, "--max-artifact-upload-inflated", "4Gi", "--max-artifact-upload-entries", "1000")
	if err != nil {
		t.Fatal(err)
	}
	if c := o.cfg.Limits; c.Upload.MaxInflated != 4<<30 || c.Upload.MaxEntries != 1000 {
		t.Fatalf("parsed %+v", c.Upload)
	}
	for _, name := range []string{"--max-artifact-upload-inflated", "--max-artifact-upload-entries"} {
		for _, bad := range []string{"0", "-1", "lots"} {
			if _, err := serveFlags(t, name, bad); err == nil {
				t.Errorf("%s %s accepted", name, bad)
			}
		}
	}
}

// Repeatable flags add up, in both forms, and a value's commas stay in it.
func TestRepeatableFlags(t *testing.T) {
	o, err := serveFlags(t, "--tag", "a", "--tag=b,c",
		"--add-local-user", "x:p,q", "--add-local-user=y:r",
		"--main-team-local-user", "x", "--main-team-local-user=y",
		"--grpc-cert-host", "h1", "--grpc-cert-host=h2",
		"--base-resource-type", "git=g:1", "--base-resource-type=time=t:1")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.config()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ got, want []string }{
		{cfg.WorkerTags, []string{"a", "b,c"}},
		{o.localUsers, []string{"x:p,q", "y:r"}},
		{o.mainTeamUsers, []string{"x", "y"}},
		{cfg.GRPCCertHosts, []string{"h1", "h2"}},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	if cfg.BaseResourceTypes["git"] != "g:1" || cfg.BaseResourceTypes["time"] != "t:1" {
		t.Errorf("base resource types %v", cfg.BaseResourceTypes)
	}
	// Networks a var_source may reach: CIDRs or addresses, comma-separated
	// or repeated.
	o, err = serveFlags(t, "--var-source-allowed-networks", "127.0.0.1, 10.96.0.0/12", "--var-source-allowed-networks=::1")
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = o.config(); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(cfg.VarSourceAllowedNetworks); got != "[127.0.0.1/32 10.96.0.0/12 ::1/128]" {
		t.Errorf("var source networks %s", got)
	}
}

// deploy/atc/statefulset.yaml's command line parses (--flag=value forms).
func TestStatefulSetArgsParse(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/atc/statefulset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, line := range strings.Split(string(raw), "\n") {
		if a, ok := strings.CutPrefix(strings.TrimSpace(line), "- --"); ok {
			args = append(args, "--"+a)
		}
	}
	if len(args) < 20 {
		t.Fatalf("found %d args in the StatefulSet", len(args))
	}
	o, err := serveFlags(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.DatabaseWait.String() != "2m0s" || o.cfg.LeaderElectionNamespace != "$(PORTER_NAMESPACE)" || len(o.baseTypes) != 4 {
		t.Errorf("parsed %+v", o.cfg.InClusterConfig)
	}
}

// The --oidc-* flags, as Concourse's: all or none of issuer, client ID and
// secret; team main's OIDC owners need the connector.
func TestOIDCFlags(t *testing.T) {
	o, err := serveFlags(t, "--oidc-issuer", "https://idp.test/dex", "--oidc-client-id", "porter", "--oidc-client-secret", "s",
		"--oidc-display-name", "Corp", "--oidc-scope", "groups", "--oidc-scope=profile",
		"--main-team-oidc-user", "alice", "--main-team-oidc-group=admins")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.config()
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.OIDC
	if c == nil || c.Issuer != "https://idp.test/dex" || c.DisplayName != "Corp" || !slices.Equal(c.Scopes, []string{"groups", "profile"}) ||
		c.GroupsKey != "groups" || c.UserNameKey != "username" {
		t.Fatalf("OIDC config %+v", c)
	}
	if !slices.Equal(o.mainTeamOIDCUsers, []string{"alice"}) || !slices.Equal(o.mainTeamOIDCGroups, []string{"admins"}) {
		t.Fatalf("main team OIDC owners %v %v", o.mainTeamOIDCUsers, o.mainTeamOIDCGroups)
	}

	if o, err := serveFlags(t); err != nil {
		t.Fatal(err)
	} else if cfg, err := o.config(); err != nil || cfg.OIDC != nil {
		t.Fatalf("no OIDC flags: %+v %v", cfg.OIDC, err)
	}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--oidc-issuer", "https://idp"}, "--oidc-client-id is required"},
		{[]string{"--oidc-issuer", "idp.test", "--oidc-client-id", "c", "--oidc-client-secret", "s"}, "is not an http(s) URL"},
		{[]string{"--main-team-oidc-group", "admins"}, "need the OIDC connector"},
		{[]string{"--oidc-issuer", "https://idp", "--oidc-client-id", "c", "--oidc-client-secret", "s", "--oidc-ca-cert", "/nonexistent.pem"}, "--oidc-ca-cert"},
	} {
		o, err := serveFlags(t, tc.args...)
		if err == nil {
			_, err = o.config()
		}
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%q: %v, want an error saying %q", tc.args, err, tc.says)
		}
	}
}

// --vault-* flags make Vault the credential manager, with Concourse's
// defaults; a given --vault-lookup-templates replaces the defaults.
func TestVaultFlags(t *testing.T) {
	o, err := serveFlags(t)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := o.config(); err != nil || cfg.Vault != nil {
		t.Fatalf("without --vault-url: Vault %+v, err %v; want none", cfg.Vault, err)
	}
	o, err = serveFlags(t, "--vault-url", "https://vault:8200", "--vault-client-token", "tok", "--vault-shared-path", "shared",
		"--vault-lookup-templates", "/{{.Team}}/{{.Secret}}", "--vault-namespace", "ns")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.config()
	if err != nil {
		t.Fatal(err)
	}
	v := cfg.Vault
	if v == nil || v.URL != "https://vault:8200" || v.ClientToken != "tok" || v.PathPrefix != "/concourse" || v.SharedPath != "shared" ||
		v.Namespace != "ns" || !slices.Equal(v.LookupTemplates, []string{"/{{.Team}}/{{.Secret}}"}) {
		t.Errorf("Vault config %+v", v)
	}
	o, _ = serveFlags(t, "--vault-url", "http://vault:8200", "--vault-client-token", "tok")
	if cfg, err := o.config(); err != nil || !slices.Equal(cfg.Vault.LookupTemplates, []string{"/{{.Team}}/{{.Pipeline}}/{{.Secret}}", "/{{.Team}}/{{.Secret}}"}) {
		t.Errorf("default templates: %+v, %v", cfg.Vault, err)
	}
}
