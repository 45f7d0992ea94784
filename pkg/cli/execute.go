package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/porter-ci/porter/pkg/atcclient"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/taskconfig"
)

// executeFlags are fly execute's flags (less --inputs-from and --image,
// which need a pipeline's job), plus --timeout.
type executeFlags struct {
	config         string
	privileged     bool
	includeIgnored bool
	background     bool
	inputs         []string
	mappings       []string
	outputs        []string
	tags           []string
	team           string
	vars           []string
	yamlVars       []string
	varFiles       []string
	timeout        string
}

func (a *app) executeCommand() *cobra.Command {
	var f executeFlags
	cmd := &cobra.Command{
		Use:   "execute -c TASK.yml [flags] [-- ARGS...]",
		Short: "Run a task file as a one-off build with local inputs",
		Long: `Runs a task file as a one-off build with local directories as its
inputs, streams its output, and downloads the outputs asked for, as fly
execute does. ARGS are appended to the task's run.args. A task param whose
name is set in the environment takes the environment's value.

Exit status: 0 when the build succeeded; when it failed, the task's exit
status; 2 when it errored, 3 when it was aborted; 1 when the command could
not do its job. Ctrl-C aborts the build and follows it until it stopped.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.execute(cmd.Context(), &f, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.config, "config", "c", "", "the task config to execute (required)")
	fl.BoolVarP(&f.privileged, "privileged", "p", false, "run the task with full privileges")
	fl.BoolVar(&f.includeIgnored, "include-ignored", false, "upload .gitignored paths too")
	fl.BoolVarP(&f.background, "background", "b", false, "create the build and exit, i.e. neither watch logs nor retrieve outputs")
	fl.StringArrayVarP(&f.inputs, "input", "i", nil, "NAME=PATH: an input to provide to the task (repeatable)")
	fl.StringArrayVarP(&f.mappings, "input-mapping", "m", nil, "NAME=STRING: give the task's input NAME the artifact STRING (repeatable)")
	fl.StringArrayVarP(&f.outputs, "output", "o", nil, "NAME=PATH: an output to fetch from the task (repeatable)")
	fl.StringArrayVar(&f.tags, "tag", nil, "a worker tag (repeatable)")
	fl.StringVar(&f.team, "team", "", "the team to run the build in, if not the target's")
	fl.StringArrayVarP(&f.vars, "var", "v", nil, "NAME=STRING: a value for ((NAME)) in the task config (repeatable)")
	fl.StringArrayVarP(&f.yamlVars, "yaml-var", "y", nil, "NAME=YAML: a YAML value for ((NAME)) (repeatable)")
	fl.StringArrayVarP(&f.varFiles, "load-vars-from", "l", nil, "a YAML file of values for ((vars)) (repeatable)")
	fl.StringVar(&f.timeout, "timeout", "", "stop the task after this long, e.g. 30m (Porter's, not fly's)")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}

// localInput is a directory uploaded as the build's artifact Name.
type localInput struct{ Name, Path string }

// localOutput is a task output downloaded into Path.
type localOutput struct{ Name, Path string }

// executeSpec is everything execute sends, checked before anything is
// uploaded.
type executeSpec struct {
	config  *taskconfig.Config
	inputs  []localInput
	mapping map[string]string
	outputs []localOutput
}

func (a *app) execute(ctx context.Context, f *executeFlags, args []string) error {
	spec, err := a.prepareExecute(f, args)
	if err != nil {
		return err
	}
	c, err := a.client(f.team)
	if err != nil {
		return err
	}

	artifacts, err := a.uploadInputs(ctx, c, spec.inputs, f)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(a.stderr, "interrupted before the build started")
			return exitStatus(ExitAborted)
		}
		return err
	}
	plan, err := executePlan(newPlanIDs(time.Now()), spec, artifacts, f)
	if err != nil {
		return err
	}

	// An interrupt must not leave a build behind that nobody knows of: the
	// request runs to its end, and the build is aborted below.
	createCtx, cancel := withTimeout(context.WithoutCancel(ctx))
	b, err := c.CreateBuild(createCtx, "", plan)
	cancel()
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "executing build %d at %s\n", b.ID, c.BuildURL(b.ID))
	if f.background {
		return nil
	}

	res, err := a.follow(ctx, c, b.ID, true)
	if err != nil {
		return err
	}
	if len(spec.outputs) > 0 {
		if err := a.downloadOutputs(context.WithoutCancel(ctx), c, b.ID, spec.outputs); err != nil {
			return fmt.Errorf("downloading failed: %w", err)
		}
	}
	if code := res.exitCode(); code != 0 {
		return exitStatus(code)
	}
	return nil
}

// prepareExecute reads and checks everything local: the task file (with
// its vars, the environment's params and ARGS), -i, -m and -o.
func (a *app) prepareExecute(f *executeFlags, args []string) (executeSpec, error) {
	if f.background && len(f.outputs) > 0 {
		return executeSpec{}, errors.New("background execution cannot withstand outputs")
	}
	if f.timeout != "" {
		if d, err := time.ParseDuration(f.timeout); err != nil || d <= 0 {
			return executeSpec{}, fmt.Errorf("--timeout %q is not a positive duration such as 30m", f.timeout)
		}
	}
	tv, err := loadVars(f.vars, f.yamlVars, f.varFiles)
	if err != nil {
		return executeSpec{}, err
	}
	cfg, err := readTaskConfig(f.config, tv, a.env.LookupEnv, args)
	if err != nil {
		return executeSpec{}, err
	}
	workDir := a.env.WorkDir
	if workDir == "" {
		if workDir, err = os.Getwd(); err != nil {
			return executeSpec{}, fmt.Errorf("find the current directory: %w", err)
		}
	}
	spec := executeSpec{config: cfg}
	if spec.inputs, spec.mapping, err = determineInputs(cfg, f.inputs, f.mappings, workDir); err != nil {
		return executeSpec{}, err
	}
	if spec.outputs, err = determineOutputs(cfg, f.outputs); err != nil {
		return executeSpec{}, err
	}
	return spec, nil
}

// readTaskConfig reads a task file as fly does: ((vars)) filled, then
// validated (so that a bad file uploads nothing), then every param whose
// name is set in the environment takes its value, and args are appended to
// run.args.
func readTaskConfig(file string, tv templateVars, lookupEnv func(string) (string, bool), args []string) (*taskconfig.Config, error) {
	text, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("could not read file: %w", err)
	}
	doc, err := tv.interpolate(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	cfg, err := taskconfig.Parse(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	for k := range cfg.Params {
		if v, ok := lookupEnv(k); ok {
			cfg.Params[k] = v
		}
	}
	cfg.Run.Args = append(cfg.Run.Args, args...)
	return cfg, nil
}

// splitPair splits NAME=VALUE.
func splitPair(flag, form, s string) (string, string, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return "", "", fmt.Errorf("%s %q is not %s", flag, s, form)
	}
	return k, v, nil
}

// determineInputs checks -i and -m against the task's inputs as fly does
// and returns the directories to upload, named as the build's artifacts.
// -i takes a task input's name, or the name -m maps it to. A required
// input named like the current directory defaults to it.
func determineInputs(cfg *taskconfig.Config, inputFlags, mappingFlags []string, workDir string) ([]localInput, map[string]string, error) {
	mapping := map[string]string{}
	for _, m := range mappingFlags {
		k, v, err := splitPair("-m", "NAME=STRING", m)
		if err != nil {
			return nil, nil, err
		}
		if !slices.ContainsFunc(cfg.Inputs, func(in taskconfig.Input) bool { return in.Name == k }) {
			return nil, nil, fmt.Errorf("unknown input `%s` in -m %s", k, m)
		}
		mapping[k] = v
	}
	artifactName := func(in taskconfig.Input) string {
		if m, ok := mapping[in.Name]; ok {
			return m
		}
		return in.Name
	}
	known := map[string]bool{}
	for _, in := range cfg.Inputs {
		known[artifactName(in)] = true
	}

	var inputs []localInput
	given := map[string]bool{}
	for _, i := range inputFlags {
		name, dir, err := splitPair("-i", "NAME=PATH", i)
		if err != nil {
			return nil, nil, err
		}
		if !known[name] {
			return nil, nil, fmt.Errorf("unknown input `%s`", name)
		}
		if given[name] {
			return nil, nil, fmt.Errorf("input `%s` is given more than once", name)
		}
		fi, err := os.Stat(dir)
		if err != nil {
			return nil, nil, err
		}
		if !fi.IsDir() {
			return nil, nil, errors.New(dir + " not a folder")
		}
		given[name] = true
		inputs = append(inputs, localInput{Name: name, Path: dir})
	}
	// fly's convenience: an input named like the current directory is it.
	if base := filepath.Base(workDir); known[base] && !given[base] {
		given[base] = true
		inputs = append(inputs, localInput{Name: base, Path: "."})
	}
	for _, in := range cfg.Inputs {
		if !in.Optional && !given[artifactName(in)] {
			return nil, nil, fmt.Errorf("missing required input `%s`", artifactName(in))
		}
	}
	if len(mapping) == 0 {
		mapping = nil
	}
	return inputs, mapping, nil
}

// determineOutputs checks -o against the task's outputs.
func determineOutputs(cfg *taskconfig.Config, outputFlags []string) ([]localOutput, error) {
	var outputs []localOutput
	for _, o := range outputFlags {
		name, dir, err := splitPair("-o", "NAME=PATH", o)
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(cfg.Outputs, func(out taskconfig.Output) bool { return out.Name == name }) {
			return nil, fmt.Errorf("unknown output '%s'", name)
		}
		if dir == "" {
			return nil, fmt.Errorf("-o %s: no path", o)
		}
		outputs = append(outputs, localOutput{Name: name, Path: dir})
	}
	return outputs, nil
}

// planIDs hands out unique plan IDs, as fly's plan factory does: hex
// numbers counting up from the time.
type planIDs struct{ next int64 }

func newPlanIDs(now time.Time) *planIDs { return &planIDs{next: now.Unix()} }

func (p *planIDs) id() concourse.PlanID {
	p.next++
	return concourse.PlanID(strconv.FormatInt(p.next, 16))
}

// executePlan is the plan fly execute sends:
//
//	do: [in_parallel: [artifact_input...], task: one-off]
//
// wrapped in ensure: in_parallel: [artifact_output...] when outputs are
// asked for, so that they are kept whatever the task does.
func executePlan(ids *planIDs, spec executeSpec, artifacts map[string]int64, f *executeFlags) (concourse.Plan, error) {
	config, err := json.Marshal(spec.config)
	if err != nil {
		return concourse.Plan{}, fmt.Errorf("encode task config: %w", err)
	}
	var inputSteps []concourse.Plan
	for _, in := range spec.inputs {
		inputSteps = append(inputSteps, concourse.Plan{ID: ids.id(), ArtifactInput: &concourse.ArtifactInputPlan{ArtifactID: artifacts[in.Name], Name: in.Name}})
	}
	task := concourse.Plan{ID: ids.id(), Task: &concourse.TaskPlan{
		Name:         "one-off",
		Privileged:   f.privileged,
		Config:       config,
		InputMapping: spec.mapping,
		Tags:         f.tags,
		Timeout:      f.timeout,
	}}
	do := concourse.DoPlan{{ID: ids.id(), InParallel: &concourse.InParallelPlan{Steps: inputSteps}}, task}
	if len(spec.outputs) == 0 {
		return concourse.Plan{ID: ids.id(), Do: &do}, nil
	}
	var outputSteps []concourse.Plan
	for _, out := range spec.outputs {
		outputSteps = append(outputSteps, concourse.Plan{ID: ids.id(), ArtifactOutput: &concourse.ArtifactOutputPlan{Name: out.Name}})
	}
	return concourse.Plan{ID: ids.id(), Ensure: &concourse.HookPlan{
		Hook: concourse.HookEnsure,
		Step: concourse.Plan{ID: ids.id(), Do: &do},
		Next: concourse.Plan{ID: ids.id(), InParallel: &concourse.InParallelPlan{Steps: outputSteps}},
	}}, nil
}

// uploadInputs uploads the input directories in parallel, showing their
// progress on one line when stderr is a terminal, and returns the
// artifacts' IDs by name.
func (a *app) uploadInputs(ctx context.Context, c *atcclient.Client, inputs []localInput, f *executeFlags) (map[string]int64, error) {
	if len(inputs) == 0 {
		return nil, nil
	}
	var prog *progressLine
	if a.stderrTTY {
		names := make([]string, len(inputs))
		for i, in := range inputs {
			names[i] = in.Name
		}
		prog = newProgressLine(a.stderr, "uploading", names)
		defer prog.stop()
	}
	var mu sync.Mutex
	ids := make(map[string]int64, len(inputs))
	g, gctx := errgroup.WithContext(ctx)
	// Compression is the bottleneck; more at once would only share the cores.
	g.SetLimit(4)
	for _, in := range inputs {
		g.Go(func() error {
			opts := atcclient.UploadOptions{IncludeIgnored: f.includeIgnored, Tags: f.tags}
			if prog != nil {
				opts.Progress = func(n int64) { prog.set(in.Name, n) }
			}
			art, err := c.UploadArtifact(gctx, "", in.Path, opts)
			if err != nil {
				return fmt.Errorf("upload input %q: %w", in.Name, err)
			}
			mu.Lock()
			ids[in.Name] = art.ID
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return ids, nil
}

// downloadOutputs fetches the outputs asked for that the build kept, in
// parallel, as fly does (one the build did not produce is skipped), and
// reports every failure.
func (a *app) downloadOutputs(ctx context.Context, c *atcclient.Client, id int64, outputs []localOutput) error {
	lctx, cancel := withTimeout(ctx)
	list, err := c.BuildArtifacts(lctx, id)
	cancel()
	if err != nil {
		return err
	}
	byName := map[string]concourse.WorkerArtifact{}
	for _, art := range list {
		byName[art.Name] = art
	}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for _, out := range outputs {
		art, ok := byName[out.Name]
		if !ok {
			continue
		}
		wg.Go(func() {
			if err := c.DownloadArtifact(ctx, "", art.ID, out.Path, nil); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("output %q: %w", out.Name, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
