package taskplan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"sigs.k8s.io/yaml"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atc/exec/stepvars"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/vars"
)

// maxFile bounds a task config read from an artifact: the ATC holds it in
// memory.
const maxFile = 1 << 20

// ReadFile reads a task's `file:` from the build's artifact (found by
// artifact in store), without a pod: the config is needed before the pod
// can be declared.
func ReadFile(ctx context.Context, store blobstore.Store, artifact func(string) (api.ArtifactRef, bool), tp *concourse.TaskPlan) ([]byte, error) {
	name, file, err := SplitConfigPath(tp.ConfigPath)
	if err != nil {
		return nil, fmt.Errorf("task %q: %w", tp.Name, err)
	}
	a, ok := artifact(name)
	if !ok {
		return nil, fmt.Errorf("task %q: file %s: the build has no artifact %q (no earlier step produced it)", tp.Name, tp.ConfigPath, name)
	}
	body, err := blobstore.ReadFile(ctx, store, a.Key, file, maxFile)
	switch {
	case errors.Is(err, blobstore.ErrFileNotFound):
		return nil, fmt.Errorf("task %q: file %s: artifact %q has no file %q", tp.Name, tp.ConfigPath, name, file)
	case err != nil:
		return nil, fmt.Errorf("task %q: file %s: %w", tp.Name, tp.ConfigPath, err)
	}
	return body, nil
}

// Prepare is the task as it runs: its config read (read) from its `file:`
// when it has one, and the ((vars)) of the config and the step's params
// filled in by sv (the task's `vars:` first, then the team's
// credentials). The plan itself is left as written.
func Prepare(ctx context.Context, tp *concourse.TaskPlan, sv *stepvars.Step, read func(context.Context, *concourse.TaskPlan) ([]byte, error)) (*concourse.TaskPlan, error) {
	out := *tp
	if tp.ConfigPath != "" {
		body, err := read(ctx, tp)
		if err != nil {
			return nil, err
		}
		doc, err := yaml.YAMLToJSON(body)
		if err != nil {
			return nil, fmt.Errorf("task %q: file %s: %w", tp.Name, tp.ConfigPath, err)
		}
		if string(doc) == "null" {
			return nil, fmt.Errorf("task %q: file %s is empty", tp.Name, tp.ConfigPath)
		}
		out.Config, out.ConfigPath = doc, ""
	}
	// The config, params and limits are filled in together, so that one
	// error lists every undefined var, in Concourse's words.
	whole := map[string]any{"config": json.RawMessage(out.Config), "params": tp.Params, "limits": json.RawMessage(tp.Limits)}
	if len(out.Config) == 0 {
		whole["config"] = nil
	}
	if len(tp.Limits) == 0 {
		whole["limits"] = nil
	}
	body, err := json.Marshal(whole)
	if err != nil {
		return nil, fmt.Errorf("task %q: %w", tp.Name, err)
	}
	filled, err := sv.InterpolateJSON(ctx, body)
	var undefined *vars.UndefinedVarsError
	switch {
	case errors.As(err, &undefined):
		return nil, undefined
	case err != nil:
		return nil, fmt.Errorf("task %q: %w", tp.Name, err)
	}
	var parts struct {
		Config json.RawMessage `json:"config"`
		Params map[string]any  `json:"params"`
		Limits json.RawMessage `json:"limits"`
	}
	if err := json.Unmarshal(filled, &parts); err != nil {
		return nil, fmt.Errorf("task %q: %w", tp.Name, err)
	}
	out.Params = parts.Params
	if len(out.Config) > 0 {
		out.Config = parts.Config
	}
	if len(tp.Limits) > 0 {
		out.Limits = parts.Limits
	}
	return &out, nil
}
