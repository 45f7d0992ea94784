// Package vaultconfig is the configuration of a Vault credential manager
// (the server's --vault-* flags, a var_source of type vault), apart from
// its client so that pipeline validation can check it without the client's
// dependencies.
package vaultconfig

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"sort"
	"strings"
	"text/template"
	"text/template/parse"
	"time"
)

// Concourse's defaults for a Vault credential manager.
const (
	DefaultPathPrefix   = "/concourse"
	DefaultQueryTimeout = 60 * time.Second
)

// DefaultLookupTemplates are where ((name)) is looked for, in order:
// the pipeline's own secret, then the team's.
func DefaultLookupTemplates() []string {
	return []string{"/{{.Team}}/{{.Pipeline}}/{{.Secret}}", "/{{.Team}}/{{.Secret}}"}
}

// Config is a Vault credential manager's settings: the server's
// --vault-* flags, or a var_source of type vault.
type Config struct {
	// URL is the server's address (http or https).
	URL string
	// ClientToken is the token sent with every request. Auth backends
	// (approle, cert, ...) are not supported yet.
	ClientToken string
	// PathPrefix is put in front of every lookup template and the shared path.
	PathPrefix string
	// LookupTemplates are text/template paths with .Team, .Pipeline and
	// .Secret; nil is DefaultLookupTemplates.
	LookupTemplates []string
	// SharedPath, under PathPrefix, is looked in after the templates.
	SharedPath string
	// Namespace is Vault Enterprise's X-Vault-Namespace.
	Namespace string
	// CACert is PEM: the CAs that sign the server's certificate (none: the
	// system's).
	CACert string
	// ServerName is the TLS server name to verify, when not the URL's host.
	ServerName string
	// InsecureSkipVerify does not verify the server's certificate.
	InsecureSkipVerify bool
	// QueryTimeout bounds one request (0: DefaultQueryTimeout).
	QueryTimeout time.Duration
}

// Validate lists what is wrong with c, by setting name (flag or var_source
// key, as name gives it), or returns nil.
func (c Config) Validate(name func(field string) string) []string {
	var problems []string
	if c.URL == "" {
		problems = append(problems, name("url")+" is required")
	} else if hasVar(c.URL) {
		// Filled in from the team's credentials when a build reads the source.
	} else if u, err := url.Parse(c.URL); err != nil {
		problems = append(problems, fmt.Sprintf("%s %q is not a URL: %v", name("url"), c.URL, err))
	} else if u.Scheme != "http" && u.Scheme != "https" {
		problems = append(problems, fmt.Sprintf("%s %q must be http:// or https://", name("url"), c.URL))
	} else if u.Hostname() == "" {
		problems = append(problems, fmt.Sprintf("%s %q has no host", name("url"), c.URL))
	}
	if c.ClientToken == "" {
		problems = append(problems, name("client_token")+" is required (auth backends are not supported yet)")
	}
	if c.PathPrefix == "" {
		problems = append(problems, fmt.Sprintf("%s cannot be empty (default %s)", name("path_prefix"), DefaultPathPrefix))
	}
	if c.LookupTemplates != nil && len(c.LookupTemplates) == 0 {
		problems = append(problems, name("lookup_templates")+" cannot be an empty list")
	}
	for i, t := range c.LookupTemplates {
		if _, err := NewTemplate(c.PathPrefix, t); err != nil {
			problems = append(problems, fmt.Sprintf("%s[%d] %q: %v", name("lookup_templates"), i, t, err))
		}
	}
	if c.CACert != "" && !hasVar(c.CACert) && !x509.NewCertPool().AppendCertsFromPEM([]byte(c.CACert)) {
		problems = append(problems, name("ca_cert")+" holds no PEM certificate")
	}
	if c.QueryTimeout < 0 {
		problems = append(problems, fmt.Sprintf("%s %s cannot be negative", name("query_timeout"), c.QueryTimeout))
	}
	return problems
}

// Template is one of a manager's lookup templates, with its prefix.
type Template struct {
	t *template.Template
	// PipelineDependent templates name .Pipeline: a one-off build, which
	// has none, skips them.
	PipelineDependent bool
}

// NewTemplate parses a lookup template under prefix, checking it uses
// only .Team, .Pipeline and .Secret.
func NewTemplate(prefix, text string) (*Template, error) {
	t, err := template.New("lookup").Option("missingkey=error").Parse(path.Join(prefix, text))
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(text) == "" || parse.IsEmptyTree(t.Root) {
		return nil, errors.New("empty template")
	}
	if !strings.Contains(text, "{{") || !strings.Contains(text, ".Secret") {
		return nil, errors.New("the template must use {{.Secret}}")
	}
	all := struct{ Team, Pipeline, Secret string }{"team", "pipeline", "secret"}
	if err := t.Execute(io.Discard, all); err != nil {
		return nil, fmt.Errorf("only {{.Team}}, {{.Pipeline}} and {{.Secret}} can be used: %w", err)
	}
	noPipeline := struct{ Team, Secret string }{"team", "secret"}
	return &Template{t: t, PipelineDependent: t.Execute(io.Discard, noPipeline) != nil}, nil
}

// Path is the template's secret path for team's pipeline's var secret.
func (l *Template) Path(team, pipeline, secret string) (string, error) {
	var b strings.Builder
	err := l.t.Execute(&b, struct{ Team, Pipeline, Secret string }{team, pipeline, secret})
	return b.String(), err
}

// hasVar says whether s names a ((var)), which a var_source's config may
// do: it is filled in from the team's credential manager when a build
// first reads the source, as in Concourse.
func hasVar(s string) bool { return strings.Contains(s, "((") && strings.Contains(s, "))") }

// Keys of a var_source of type vault that Concourse has and this server
// does not (yet): refused by name rather than ignored.
var unsupportedKeys = map[string]string{
	"client_token_path":    "read the token with ((var)) in client_token instead",
	"auth_backend":         "auth backends are not supported yet: use client_token",
	"auth_backend_max_ttl": "auth backends are not supported yet: use client_token",
	"auth_retry_max":       "auth backends are not supported yet: use client_token",
	"auth_retry_initial":   "auth backends are not supported yet: use client_token",
	"auth_params":          "auth backends are not supported yet: use client_token",
	"login_timeout":        "auth backends are not supported yet: use client_token",
	"client_cert":          "TLS client certificates are not supported yet",
	"client_key":           "TLS client certificates are not supported yet",
}

// FromVarSource reads the config of a var_source of type vault (Concourse's
// keys: url, client_token, path_prefix, lookup_templates, shared_path,
// namespace, ca_cert, server_name, insecure_skip_verify, query_timeout)
// and lists every problem of it by key; the defaults are Concourse's.
func FromVarSource(config any) (Config, []string) {
	c := Config{PathPrefix: DefaultPathPrefix}
	m, ok := config.(map[string]any)
	if !ok {
		return c, []string{"config must be a map with at least url and client_token"}
	}
	var problems []string
	str := func(k string, dst *string) {
		switch v := m[k].(type) {
		case nil:
		case string:
			*dst = v
		default:
			problems = append(problems, fmt.Sprintf("config.%s must be a string", k))
		}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch k {
		case "url":
			str(k, &c.URL)
		case "client_token":
			str(k, &c.ClientToken)
		case "path_prefix":
			if m[k] == nil {
				continue
			}
			str(k, &c.PathPrefix)
		case "shared_path":
			str(k, &c.SharedPath)
		case "namespace":
			str(k, &c.Namespace)
		case "ca_cert":
			str(k, &c.CACert)
		case "server_name":
			str(k, &c.ServerName)
		case "insecure_skip_verify":
			if b, ok := m[k].(bool); ok {
				c.InsecureSkipVerify = b
			} else if m[k] != nil {
				problems = append(problems, "config.insecure_skip_verify must be true or false")
			}
		case "query_timeout":
			var d string
			str(k, &d)
			if d == "" {
				continue
			}
			var err error
			if c.QueryTimeout, err = time.ParseDuration(d); err != nil {
				problems = append(problems, fmt.Sprintf("config.query_timeout %q is not a duration (e.g. 30s)", d))
			}
		case "lookup_templates":
			list, ok := m[k].([]any)
			if !ok {
				problems = append(problems, "config.lookup_templates must be a list of strings")
				continue
			}
			c.LookupTemplates = []string{}
			for i, x := range list {
				t, ok := x.(string)
				if !ok {
					problems = append(problems, fmt.Sprintf("config.lookup_templates[%d] must be a string", i))
					continue
				}
				c.LookupTemplates = append(c.LookupTemplates, t)
			}
		case "enable_kv_mount_cache", "disable_srv_lookup":
			// Concourse's tuning: mounts are always cached here (a
			// minute) and the URL's host is never looked up by SRV.
		default:
			if why, ok := unsupportedKeys[k]; ok {
				problems = append(problems, fmt.Sprintf("config.%s is not supported by this server: %s", k, why))
			} else {
				problems = append(problems, fmt.Sprintf("config: unknown key %q", k))
			}
		}
	}
	problems = append(problems, c.Validate(func(f string) string { return "config." + f })...)
	return c, problems
}
