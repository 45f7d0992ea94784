// Package taskplan reads a task step's plan into its config, its
// platform and its event config, without running anything: what the
// executor needs before it declares the task's pod, and what plan
// validation checks before a build is recorded.
package taskplan

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atc/exec/stepplan"
	"github.com/porter-ci/porter/pkg/atc/exec/stepvars"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/pkg/taskconfig"
)

// Config reads a task step's config, with the step's mappings,
// container limits and params applied.
func Config(tp *concourse.TaskPlan) (*taskconfig.Config, map[string]string, error) {
	if tp.ConfigPath != "" {
		return nil, nil, fmt.Errorf("task %q: file: (a task config from an artifact) is not supported by this server yet", tp.Name)
	}
	if len(tp.Config) == 0 {
		return nil, nil, fmt.Errorf("task %q has no config", tp.Name)
	}
	cfg, err := taskconfig.Parse(tp.Config)
	if err != nil {
		return nil, nil, fmt.Errorf("task %q: %w", tp.Name, err)
	}
	if len(tp.Limits) > 0 && string(tp.Limits) != "null" {
		var limits taskconfig.ContainerLimits
		if err := json.Unmarshal(tp.Limits, &limits); err != nil {
			return nil, nil, fmt.Errorf("task %q: container_limits: %w", tp.Name, err)
		}
		cfg.Limits = &limits
	}
	taskconfig.ApplyInputMapping(cfg, tp.InputMapping)
	taskconfig.ApplyOutputMapping(cfg, tp.OutputMapping)
	var params taskconfig.Params
	if len(tp.Params) > 0 {
		body, err := json.Marshal(tp.Params)
		if err == nil {
			err = json.Unmarshal(body, &params)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("task %q: params: %w", tp.Name, err)
		}
	}
	return cfg, params, nil
}

// SplitConfigPath reads a task's `file:`, "<artifact>/<path in it>".
func SplitConfigPath(p string) (artifact, file string, err error) {
	artifact, file, ok := strings.Cut(p, "/")
	if !ok || artifact == "" || strings.Trim(file, "/") == "" {
		return "", "", fmt.Errorf("file %q: want <artifact>/<path to the task config in it>", p)
	}
	return artifact, file, nil
}

// Validate checks what can be checked of a task before its build is
// recorded: a config with ((vars)) or from a file is checked when it runs.
func Validate(tp *concourse.TaskPlan) error {
	if tp.ConfigPath != "" {
		if _, _, err := SplitConfigPath(tp.ConfigPath); err != nil {
			return fmt.Errorf("task %q: %w", tp.Name, err)
		}
		return nil
	}
	if stepvars.HasVars(tp.Config) || stepvars.HasVars(tp.Limits) {
		if len(tp.Config) == 0 {
			return fmt.Errorf("task %q has no config", tp.Name)
		}
		return nil
	}
	params, _ := json.Marshal(tp.Params)
	if stepvars.HasVars(params) {
		// Params are checked once they are filled in.
		cp := *tp
		cp.Params = nil
		tp = &cp
	}
	_, _, err := Config(tp)
	return err
}

// Platform is the platform of a task plan's inline config ("" when
// it has none yet: a config file, or one with ((vars))).
func Platform(tp *concourse.TaskPlan) string {
	var c struct {
		Platform string `json:"platform"`
	}
	_ = json.Unmarshal(tp.Config, &c)
	return c.Platform
}

// EventConfig summarises a task config the way Concourse's task events do.
func EventConfig(cfg *taskconfig.Config, image string) events.TaskConfig {
	tc := events.TaskConfig{Platform: cfg.Platform, Image: image,
		Run: events.TaskRunConfig{Path: cfg.Run.Path, Args: cfg.Run.Args, Dir: cfg.Run.Dir}}
	for _, in := range cfg.Inputs {
		tc.Inputs = append(tc.Inputs, events.TaskInputInfo{Name: in.Name, Path: in.DirPath()})
	}
	return tc
}

// CacheScope is what a task's caches are keyed by besides the task's name:
// its team, and its job and pipeline (empty for a one-off build).
type CacheScope struct{ Team, Pipeline, Job string }

// Action is the action of a task step whose config and params Config
// read: its process, params, inputs from the build's artifacts (artifact
// finds one; an input that is missing and not optional is an error),
// outputs and caches. Its image is set later, once resolved.
func Action(tp *concourse.TaskPlan, cfg *taskconfig.Config, params map[string]string, artifact func(name string) (api.ArtifactRef, bool),
	id stepplan.Identity, caches CacheScope,
) (*action.Action, error) {
	var missing []string
	inputs := map[string]api.ArtifactRef{}
	for _, in := range cfg.Inputs {
		if a, ok := artifact(in.Name); ok {
			inputs[in.Name] = a
		} else if !in.Optional {
			missing = append(missing, in.Name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("missing inputs: %s", strings.Join(missing, ", "))
	}
	var timeout time.Duration
	if tp.Timeout != "" {
		var err error
		if timeout, err = time.ParseDuration(tp.Timeout); err != nil || timeout <= 0 {
			return nil, fmt.Errorf("timeout %q is not a positive duration like \"30m\"", tp.Timeout)
		}
	}
	name := tp.Name
	if name == "" {
		name = string(concourse.KindTask)
	}
	a := &action.Action{
		StepID:   id.StepID(name),
		Build:    id.Build,
		StepName: name, Type: action.KindTask,
		Platform: cfg.Platform, Tags: tp.Tags,
		Run:        action.Run{Path: cfg.Run.Path, Args: cfg.Run.Args, Dir: cfg.Run.Dir, User: cfg.Run.User},
		Params:     taskconfig.MergeParams(cfg.Params, params),
		WorkDir:    "/tmp/build/" + stepplan.RandomSuffix(),
		Limits:     cfg.ActionLimits(),
		Privileged: tp.Privileged,
		Timeout:    action.Duration{Duration: timeout},
		KeepAlive:  action.Duration{Duration: id.KeepAlive},
	}
	for _, in := range cfg.Inputs {
		ref, ok := inputs[in.Name]
		a.Inputs = append(a.Inputs, action.Input{Name: in.Name, Path: in.DirPath(), Key: ref.Key, Digest: ref.Digest, Optional: in.Optional && !ok})
	}
	for _, out := range cfg.Outputs {
		a.Outputs = append(a.Outputs, action.Output{Name: out.Name, Path: out.DirPath()})
	}
	for _, c := range cfg.Caches {
		key, err := blobstore.CheckedTaskCacheKey(caches.Team, caches.Pipeline, caches.Job, name, c.Path)
		if err != nil {
			return nil, fmt.Errorf("task %q: %w", name, err)
		}
		a.Caches = append(a.Caches, action.Cache{Path: c.Path, Key: key})
	}
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return a, nil
}
