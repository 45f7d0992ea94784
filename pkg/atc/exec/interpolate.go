package exec

import (
	"github.com/porter-ci/porter/pkg/atc/exec/stepvars"
	"github.com/porter-ci/porter/pkg/creds"
	"github.com/porter-ci/porter/pkg/vars"
)

// stepVars fills in the ((vars)) of one step: static ones (a task's
// `vars:`) first, then the build's local vars, the pipeline's var_sources
// and the team's credentials; what these gave is redacted from the build's
// events.
func (x *RunState) stepVars(static map[string]any) *stepvars.Step {
	return &stepvars.Step{Static: static, Locals: x.locals, Sources: x.varSources,
		Credentials: func() vars.Resolver {
			return creds.Resolver{K: x.r.creds, Team: x.b.Team, Pipeline: x.b.Pipeline}
		},
		Redact: func(secrets []string) { x.d.Redact(secrets) }}
}
