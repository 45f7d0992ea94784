// Package varsources makes the resolvers of a pipeline's var_sources, as
// Concourse's var sources: a build's steps read ((source:vars)) from them.
package varsources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/porter-ci/porter/pkg/atc/exec/stepvars"
	"github.com/porter-ci/porter/pkg/creds"
	"github.com/porter-ci/porter/pkg/creds/vaultconfig"
	"github.com/porter-ci/porter/pkg/netguard"
	"github.com/porter-ci/porter/pkg/pipeline"
	"github.com/porter-ci/porter/pkg/vars"
)

// Redactor hides secrets from the build's events from now on (exec's
// BuildDelegate).
type Redactor interface {
	Redact(secrets []string)
}

// Sources are the var_sources of the pipeline of a team's build.
type Sources struct {
	Team, Pipeline string
	// Credentials is the team's credential manager, for the ((vars)) of
	// a source's config.
	Credentials creds.Manager
	// Redactor redacts the credentials a source's config uses.
	Redactor Redactor
	// Guard checks the connections to the sources: their URLs are
	// users', the connections the server's.
	Guard netguard.Guard
}

// Resolvers are the resolvers of the var_sources of the pipeline's config.
func (s Sources) Resolvers(ctx context.Context, config json.RawMessage) (map[string]vars.Resolver, error) {
	var cfg struct {
		VarSources []map[string]any `json:"var_sources"`
	}
	if err := json.Unmarshal(config, &cfg); err != nil {
		return nil, fmt.Errorf("read the var_sources of pipeline %q: %w", s.Pipeline, err)
	}
	out := map[string]vars.Resolver{}
	for _, src := range cfg.VarSources {
		name, _ := src["name"].(string)
		typ, _ := src["type"].(string)
		switch typ {
		case "dummy":
			values, err := pipeline.DummyVars(src["config"])
			if err != nil {
				return nil, fmt.Errorf("var source %q: %w", name, err)
			}
			out[name] = vars.Static(values)
		case "vault":
			v, err := s.vault(ctx, src["config"])
			if err != nil {
				return nil, fmt.Errorf("var source %q: %w", name, err)
			}
			out[name] = v
		default:
			// Validation refuses these when the pipeline is set.
			return nil, fmt.Errorf("var source %q: type %q is not supported by this server", name, typ)
		}
	}
	return out, nil
}

// vault is a var_source of type vault. Its config may name ((vars)) (its
// client_token above all): they come from the team's credential manager,
// as in Concourse, and are redacted like any credential.
func (s Sources) vault(ctx context.Context, config any) (vars.Resolver, error) {
	if m, ok := config.(map[string]any); ok && stepvars.ContainsVars(m) {
		filled, used, err := vars.Interpolate(ctx, m, creds.Resolver{K: s.Credentials, Team: s.Team, Pipeline: s.Pipeline})
		if used != nil {
			s.Redactor.Redact(used.Redactions())
		}
		if err != nil {
			return nil, fmt.Errorf("fill in the ((vars)) of its config: %w", err)
		}
		config = filled
	}
	cfg, problems := vaultconfig.FromVarSource(config)
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	v, err := creds.NewVault(cfg, creds.WithDialControl(s.Guard.Control))
	if err != nil {
		return nil, err
	}
	return v.Source(s.Team, s.Pipeline), nil
}
