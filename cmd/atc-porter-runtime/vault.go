package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/porter-ci/porter/pkg/creds"
)

// vaultFlags are serve's --vault-* flags, Concourse's names: Vault as the
// credential manager instead of Kubernetes Secrets.
type vaultFlags struct {
	url, clientToken, pathPrefix, sharedPath, namespace string
	caCertFile, serverName                              string
	lookupTemplates                                     []string
	insecure                                            bool
	queryTimeout                                        time.Duration
}

func (v *vaultFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&v.url, "vault-url", "", "Vault's address: ((vars)) are read from Vault's KV secrets engines (v1 or v2) instead of Kubernetes Secrets")
	fs.StringVar(&v.clientToken, "vault-client-token", "", "token for reading secrets from Vault (env PORTER_VAULT_CLIENT_TOKEN; auth backends are not supported yet)")
	fs.StringVar(&v.pathPrefix, "vault-path-prefix", creds.DefaultVaultPathPrefix, "path under which every lookup template and the shared path are")
	fs.StringVar(&v.sharedPath, "vault-shared-path", "", "path under the prefix looked in after the lookup templates, for every team")
	fs.StringArrayVar(&v.lookupTemplates, "vault-lookup-templates", creds.DefaultVaultLookupTemplates(), "where ((name)) is looked for under the prefix, in order: text/template with {{.Team}}, {{.Pipeline}}, {{.Secret}}; repeatable")
	fs.StringVar(&v.namespace, "vault-namespace", "", "Vault (Enterprise) namespace of the secrets")
	fs.StringVar(&v.caCertFile, "vault-ca-cert", "", "PEM file of the CAs that sign Vault's certificate (default: the system's)")
	fs.StringVar(&v.serverName, "vault-server-name", "", "TLS server name to verify in Vault's certificate (default: the URL's host)")
	fs.BoolVar(&v.insecure, "vault-insecure-skip-verify", false, "do not verify Vault's certificate")
	fs.DurationVar(&v.queryTimeout, "vault-query-timeout", creds.DefaultVaultQueryTimeout, "longest one request to Vault may take")
}

// config is the Vault configuration the flags give, nil without
// --vault-url. prefixSet says --kubernetes-credential-namespace-prefix was
// given: one credential manager at a time, as in Concourse.
func (v *vaultFlags) config(prefixSet bool) (*creds.VaultConfig, error) {
	if v.url == "" {
		return nil, nil
	}
	if prefixSet {
		return nil, errors.New("--vault-url and --kubernetes-credential-namespace-prefix: only one credential manager can be configured (Vault replaces Kubernetes Secrets)")
	}
	token := v.clientToken
	if token == "" {
		// Read here, not as the flag's default: --help would print it.
		token = os.Getenv("PORTER_VAULT_CLIENT_TOKEN")
	}
	c := &creds.VaultConfig{URL: v.url, ClientToken: token, PathPrefix: v.pathPrefix, LookupTemplates: v.lookupTemplates,
		SharedPath: v.sharedPath, Namespace: v.namespace, ServerName: v.serverName, InsecureSkipVerify: v.insecure,
		QueryTimeout: v.queryTimeout}
	if v.caCertFile != "" {
		pem, err := os.ReadFile(v.caCertFile)
		if err != nil {
			return nil, fmt.Errorf("--vault-ca-cert: %w", err)
		}
		c.CACert = string(pem)
	}
	flag := func(f string) string { return "--vault-" + strings.ReplaceAll(f, "_", "-") }
	if problems := c.Validate(flag); len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	return c, nil
}
