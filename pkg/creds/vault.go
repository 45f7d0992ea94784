package creds

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/porter-ci/porter/pkg/creds/vaultconfig"
	"github.com/porter-ci/porter/pkg/vars"
)

// VaultConfig is a Vault credential manager's settings (pkg/creds/vaultconfig).
type VaultConfig = vaultconfig.Config

// Concourse's defaults, re-exported for the server's flags.
const (
	DefaultVaultPathPrefix   = vaultconfig.DefaultPathPrefix
	DefaultVaultQueryTimeout = vaultconfig.DefaultQueryTimeout
)

// DefaultVaultLookupTemplates is vaultconfig.DefaultLookupTemplates.
func DefaultVaultLookupTemplates() []string { return vaultconfig.DefaultLookupTemplates() }

// Vault reads ((vars)) from Vault's KV secrets engines (version 1 or 2),
// with Concourse's lookup rules: the lookup templates in order, then the
// shared path; a secret's "value" key is the var's value, or, without it,
// every key is a field of the var.
type Vault struct {
	base       *url.URL
	token      string
	namespace  string
	prefix     string
	templates  []*vaultconfig.Template
	sharedPath string
	client     *http.Client

	// mounts remembers the KV mounts seen (path -> version), so a lookup
	// costs one request, not two, once its mount is known. Mounts change
	// rarely; an entry is trusted for mountTTL.
	mu     sync.Mutex
	mounts map[string]kvMount
}

type kvMount struct {
	version int
	seen    time.Time
}

const mountTTL = time.Minute

// VaultOption changes how NewVault's client connects.
type VaultOption func(*vaultOptions)

type vaultOptions struct {
	control func(network, address string, c syscall.RawConn) error
}

// WithDialControl checks every connection the client makes before it is
// made (a net.Dialer Control, e.g. netguard.Guard.Control), and makes the
// client ignore proxy settings, which would hide the real address. A
// pipeline's var_source takes it: its URL is a user's, the connection the
// server's.
func WithDialControl(control func(network, address string, c syscall.RawConn) error) VaultOption {
	return func(o *vaultOptions) { o.control = control }
}

// NewVault checks c and prepares its client; it asks Vault nothing.
func NewVault(c VaultConfig, opts ...VaultOption) (*Vault, error) {
	var o vaultOptions
	for _, opt := range opts {
		opt(&o)
	}
	if problems := c.Validate(func(f string) string { return f }); len(problems) > 0 {
		return nil, fmt.Errorf("vault: %s", strings.Join(problems, "; "))
	}
	base, _ := url.Parse(c.URL)
	tmpls := c.LookupTemplates
	if tmpls == nil {
		tmpls = DefaultVaultLookupTemplates()
	}
	v := &Vault{base: base, token: c.ClientToken, namespace: c.Namespace, prefix: c.PathPrefix,
		sharedPath: c.SharedPath, mounts: map[string]kvMount{}}
	for _, t := range tmpls {
		lt, err := vaultconfig.NewTemplate(c.PathPrefix, t)
		if err != nil {
			return nil, fmt.Errorf("vault lookup template %q: %w", t, err)
		}
		v.templates = append(v.templates, lt)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if o.control != nil {
		tr.Proxy = nil
		tr.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: o.control}).DialContext
	}
	tr.TLSClientConfig = &tls.Config{ServerName: c.ServerName, InsecureSkipVerify: c.InsecureSkipVerify} //nolint:gosec // the operator's choice, as in Concourse
	if c.CACert != "" {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM([]byte(c.CACert))
		tr.TLSClientConfig.RootCAs = pool
	}
	timeout := c.QueryTimeout
	if timeout == 0 {
		timeout = DefaultVaultQueryTimeout
	}
	v.client = &http.Client{Transport: tr, Timeout: timeout}
	return v, nil
}

// Lookup finds team's var name as the team's credential manager does:
// the lookup templates, then the shared path. Like Kubernetes.Lookup,
// found is false when no path has it and err is a lookup that could not be
// made (Vault down, a token without the right), which fails the step.
func (v *Vault) Lookup(ctx context.Context, team, pipeline, name string) (any, bool, error) {
	return v.lookup(ctx, team, pipeline, name, false)
}

// Source is v as a pipeline's var_source: ((source:name)) is looked for as
// Lookup does, then at the path prefix itself, as in Concourse.
func (v *Vault) Source(team, pipeline string) vars.Resolver {
	return vaultSource{v: v, team: team, pipeline: pipeline}
}

type vaultSource struct {
	v              *Vault
	team, pipeline string
}

func (s vaultSource) Get(ctx context.Context, ref vars.Ref) (any, bool, error) {
	return s.v.lookup(ctx, s.team, s.pipeline, ref.Path, true)
}

func (v *Vault) lookup(ctx context.Context, team, pipeline, name string, root bool) (any, bool, error) {
	// A var's name becomes part of a path: one that climbs out of the
	// team's templates (((../other-team/x))) would read another team's
	// secrets.
	for seg := range strings.SplitSeq(name, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return nil, false, fmt.Errorf("var name %q cannot be read from Vault: empty, '.' and '..' path segments are refused", name)
		}
	}
	var paths []string
	for _, t := range v.templates {
		if t.PipelineDependent && pipeline == "" {
			continue
		}
		p, err := t.Path(team, pipeline, name)
		if err != nil {
			return nil, false, fmt.Errorf("vault lookup template for ((%s)): %w", name, err)
		}
		paths = append(paths, p)
	}
	if v.sharedPath != "" {
		paths = append(paths, path.Join(v.prefix, v.sharedPath, name))
	}
	if root {
		paths = append(paths, path.Join(v.prefix, name))
	}
	for _, p := range paths {
		data, found, err := v.read(ctx, strings.Trim(p, "/"))
		if err != nil {
			return nil, false, fmt.Errorf("read ((%s)) from Vault at %s: %w", name, p, err)
		}
		if !found {
			continue
		}
		if val, ok := data["value"]; ok {
			return val, true, nil
		}
		return data, true, nil
	}
	return nil, false, nil
}

// read returns the data of the secret at p (no leading slash), for KV
// version 1 or 2 alike.
func (v *Vault) read(ctx context.Context, p string) (map[string]any, bool, error) {
	mount, version, err := v.mount(ctx, p)
	if err != nil {
		return nil, false, err
	}
	apiPath := p
	if version == 2 {
		// KV v2 keeps a secret's data under <mount>/data/<rest>.
		apiPath = path.Join(mount, "data", strings.TrimPrefix(p, mount))
	}
	var body struct {
		Data map[string]any `json:"data"`
	}
	status, err := v.get(ctx, apiPath, &body)
	switch {
	case err != nil:
		return nil, false, err
	case status == http.StatusNotFound:
		return nil, false, nil
	}
	if version != 2 {
		return body.Data, body.Data != nil, nil
	}
	// A deleted (not destroyed) version has null data: not found.
	data, _ := body.Data["data"].(map[string]any)
	return data, data != nil, nil
}

// mount finds the KV mount p is under and its version, as Vault's own CLI
// does (sys/internal/ui/mounts): 1 when Vault will not say (an old server,
// or a token not allowed to ask), as Concourse does.
func (v *Vault) mount(ctx context.Context, p string) (string, int, error) {
	v.mu.Lock()
	for m, info := range v.mounts {
		if strings.HasPrefix(p, m) && time.Since(info.seen) < mountTTL {
			v.mu.Unlock()
			return m, info.version, nil
		}
	}
	v.mu.Unlock()
	var body struct {
		Data struct {
			Path    string            `json:"path"`
			Options map[string]string `json:"options"`
		} `json:"data"`
	}
	status, err := v.get(ctx, path.Join("sys/internal/ui/mounts", p), &body)
	switch {
	case err != nil:
		return "", 0, fmt.Errorf("find the KV mount of %s: %w", p, err)
	case status == http.StatusNotFound, status == http.StatusForbidden:
		return "", 1, nil
	}
	version := 1
	if body.Data.Options["version"] == "2" {
		version = 2
	}
	if body.Data.Path != "" {
		v.mu.Lock()
		v.mounts[body.Data.Path] = kvMount{version: version, seen: time.Now()}
		v.mu.Unlock()
	}
	return body.Data.Path, version, nil
}

// get GETs /v1/<p> into out. A 404 (and a 403 from the mounts endpoint) is
// returned as a status for the caller; other failures are errors that
// carry Vault's own message.
func (v *Vault) get(ctx context.Context, p string, out any) (int, error) {
	u := *v.base
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/" + p
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-Vault-Token", v.token)
	req.Header.Set("X-Vault-Request", "true")
	if v.namespace != "" {
		req.Header.Set("X-Vault-Namespace", v.namespace)
	}
	resp, err := v.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return 0, fmt.Errorf("read Vault's answer: %w", err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return resp.StatusCode, nil
	case resp.StatusCode == http.StatusForbidden && strings.HasPrefix(p, "sys/internal/ui/mounts/"):
		return resp.StatusCode, nil
	case resp.StatusCode != http.StatusOK:
		var e struct {
			Errors []string `json:"errors"`
		}
		msg := resp.Status
		if json.Unmarshal(body, &e) == nil && len(e.Errors) > 0 {
			msg += ": " + strings.Join(e.Errors, "; ")
		}
		return resp.StatusCode, errors.New(msg)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	// Numbers stay as written (a port, an id), not float64.
	dec.UseNumber()
	if err := dec.Decode(out); err != nil {
		return 0, fmt.Errorf("decode Vault's answer: %w", err)
	}
	return resp.StatusCode, nil
}
