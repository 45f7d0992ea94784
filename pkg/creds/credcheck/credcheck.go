// Package credcheck is `fly set-pipeline --check-creds`: before a pipeline
// is saved, every ((var)) its credentials are written with is looked up in
// the team's credential manager, so a missing secret shows now rather than
// in the first build that needs it.
//
// It checks what Concourse 8.2.5 checks (atc/api/configserver): the sources
// of resource types and resources, resources' webhook_token, and each task
// step's params, vars and embedded config. As in Concourse, a var is looked
// up by its path alone, whatever source it names: ((vs:x)) (a var_source)
// and ((.:x)) (a load_var or across var) pass only when the credential
// manager holds x, since what those give is only known when a build runs
// (Concourse's known limitation, concourse/concourse#6636).
package credcheck

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/creds"
	"github.com/porter-ci/porter/pkg/taskconfig"
	"github.com/porter-ci/porter/pkg/vars"
)

// Error lists every problem found; its text is Concourse's.
type Error struct {
	Problems []error
}

// Error is "credential validation failed" and the problems, in the list
// format Concourse answers with.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("credential validation failed\n\n")
	if len(e.Problems) == 1 {
		fmt.Fprintf(&b, "1 error occurred:\n\t* %s\n\n", e.Problems[0])
		return b.String()
	}
	fmt.Fprintf(&b, "%d errors occurred:", len(e.Problems))
	for _, p := range e.Problems {
		fmt.Fprintf(&b, "\n\t* %s", p)
	}
	b.WriteString("\n\n")
	return b.String()
}

// Unwrap gives the problems to errors.Is and errors.As.
func (e *Error) Unwrap() []error { return e.Problems }

// Check looks up the vars of cfg's credentials for team's pipeline in m.
// It returns nil when every one is there, else an *Error with what is
// missing and what could not be looked up, each naming where it is used.
func Check(ctx context.Context, m creds.Manager, team, pipeline string, cfg concourse.Config) error {
	c := checker{r: pathOnly{m: m, team: team, pipeline: pipeline}}
	for _, rt := range cfg.ResourceTypes {
		c.value(ctx, fmt.Sprintf("resource type %q source", rt.Name), rt.Source)
	}
	for _, r := range cfg.Resources {
		c.value(ctx, fmt.Sprintf("resource %q source", r.Name), r.Source)
		if r.WebhookToken != "" {
			c.value(ctx, fmt.Sprintf("resource %q webhook_token", r.Name), r.WebhookToken)
		}
	}
	for i := range cfg.Jobs {
		job := &cfg.Jobs[i]
		job.EachStep(func(s *concourse.Step) {
			if s.Task == "" {
				return
			}
			at := fmt.Sprintf("job %q task %q", job.Name, s.Task)
			c.value(ctx, at+" params", s.Params)
			c.value(ctx, at+" vars", s.Vars)
			if len(s.Config) > 0 {
				c.taskConfig(ctx, at+" config", s.Config)
			}
		})
	}
	if len(c.problems) == 0 {
		return nil
	}
	return &Error{Problems: c.problems}
}

type checker struct {
	r        vars.Resolver
	problems []error
}

func (c *checker) value(ctx context.Context, at string, v any) {
	if _, _, err := vars.Interpolate(ctx, v, c.r); err != nil {
		c.problems = append(c.problems, fmt.Errorf("%s: %w", at, err))
	}
}

// taskConfig fills an embedded task config in with the credentials alone
// (not the step's vars, as in Concourse) and checks it is still valid.
func (c *checker) taskConfig(ctx context.Context, at string, raw json.RawMessage) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		c.problems = append(c.problems, fmt.Errorf("%s: read it: %w", at, err))
		return
	}
	filled, used, err := vars.Interpolate(ctx, tree, c.r)
	if err != nil {
		c.problems = append(c.problems, fmt.Errorf("%s: %w", at, err))
		return
	}
	js, err := json.Marshal(filled)
	if err != nil {
		c.problems = append(c.problems, fmt.Errorf("%s: write it filled in: %w", at, err))
		return
	}
	if _, err := taskconfig.Parse(js); err != nil {
		// The config's problems may quote the credentials filled in: the
		// answer shows them no more than a build log does.
		c.problems = append(c.problems, fmt.Errorf("%s: %s", at, creds.NewRedactor(used.Redactions()).Redact(err.Error())))
	}
}

// pathOnly looks a var up in the credential manager by its path, ignoring
// its source, as Concourse's check does.
type pathOnly struct {
	m              creds.Manager
	team, pipeline string
}

func (p pathOnly) Get(ctx context.Context, ref vars.Ref) (any, bool, error) {
	if p.m == nil {
		return nil, false, nil
	}
	return p.m.Lookup(ctx, p.team, p.pipeline, ref.Path)
}
