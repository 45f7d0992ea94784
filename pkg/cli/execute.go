package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-multierror"
	"golang.org/x/sync/errgroup"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atcclient"
	"github.com/porter-ci/porter/pkg/taskconfig"
)

const executeUsage = `usage: ` + Program + ` execute -c TASK.yml [options]

Runs a task file as a one-off build with local directories as its inputs,
streams its output, and downloads the outputs asked for.

options:
  -c, --config FILE              the task's config file (required)
  -i, --input NAME=DIR           use DIR as the input NAME (repeatable); a task
                                 with exactly one input gets the current
                                 directory when no -i is given
  -m, --input-mapping TASK=NAME  give the task's input TASK the artifact that
                                 -i NAME provides (repeatable)
  -o, --output NAME=DIR          download the output NAME into DIR when the
                                 build is over (repeatable)
  -p, --param KEY=VALUE          set the task's param KEY (repeatable)
      --image REF                run in image REF instead of image_resource
      --privileged               run the task privileged
      --timeout DURATION         stop the task after DURATION, e.g. 30m
      --atc URL                  the ATC (default: $` + ATCURLEnv + `, else ` + DefaultATCURL + `)

Exit status: the task's when it failed, 0 when it succeeded, 2 when the
build errored or could not be started, 3 when it was aborted.
Ctrl-C aborts the build and follows it until it has stopped.
`

// keyValues is a repeatable NAME=VALUE flag, kept in order.
type keyValues struct {
	form  string // "NAME=DIR", for errors
	pairs [][2]string
}

func (kv *keyValues) String() string { return "" }

func (kv *keyValues) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not %s", s, kv.form)
	}
	kv.pairs = append(kv.pairs, [2]string{k, v})
	return nil
}

// toMap returns the pairs as a map; a key given twice is an error.
func (kv *keyValues) toMap(flagName string) (map[string]string, error) {
	if len(kv.pairs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(kv.pairs))
	for _, p := range kv.pairs {
		if _, dup := m[p[0]]; dup {
			return nil, fmt.Errorf("%s %s is given more than once", flagName, p[0])
		}
		m[p[0]] = p[1]
	}
	return m, nil
}

type executeFlags struct {
	config     string
	inputs     keyValues
	outputs    keyValues
	params     keyValues
	mappings   keyValues
	image      string
	privileged bool
	timeout    string
	atc        *string
}

func (a *app) execute(ctx context.Context, args []string) int {
	f := executeFlags{
		inputs:   keyValues{form: "NAME=DIR"},
		outputs:  keyValues{form: "NAME=DIR"},
		params:   keyValues{form: "KEY=VALUE"},
		mappings: keyValues{form: "TASK=NAME"},
	}
	fs := flag.NewFlagSet("execute", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, name := range []string{"c", "config"} {
		fs.StringVar(&f.config, name, "", "")
	}
	for _, name := range []string{"i", "input"} {
		fs.Var(&f.inputs, name, "")
	}
	for _, name := range []string{"o", "output"} {
		fs.Var(&f.outputs, name, "")
	}
	for _, name := range []string{"p", "param"} {
		fs.Var(&f.params, name, "")
	}
	for _, name := range []string{"m", "input-mapping"} {
		fs.Var(&f.mappings, name, "")
	}
	fs.StringVar(&f.image, "image", "", "")
	fs.BoolVar(&f.privileged, "privileged", false, "")
	fs.StringVar(&f.timeout, "timeout", "", "")
	f.atc = addATCFlag(fs)
	rest, err := parseFlags(fs, args)
	if err != nil {
		return a.usageError(fmt.Errorf("execute: %w", err), executeUsage)
	}
	if len(rest) > 0 {
		return a.usageError(fmt.Errorf("execute: unexpected argument %q", rest[0]), executeUsage)
	}
	if f.config == "" {
		return a.usageError(errors.New("execute: -c TASK.yml is required"), executeUsage)
	}
	if f.timeout != "" {
		if d, err := time.ParseDuration(f.timeout); err != nil || d <= 0 {
			return a.usageError(fmt.Errorf("execute: --timeout %q is not a positive duration such as 30m", f.timeout), executeUsage)
		}
	}

	// Everything that can be checked here is, before anything is uploaded.
	text, err := os.ReadFile(f.config)
	if err != nil {
		a.printError("execute", fmt.Errorf("read task config: %w", err))
		return ExitErrored
	}
	cfg, err := taskconfig.Parse(text)
	if err != nil {
		a.printError(f.config, err)
		return ExitErrored
	}
	plan, err := planExecute(cfg, &f)
	if err != nil {
		a.printError("execute", err)
		return ExitErrored
	}
	c, err := a.client(*f.atc)
	if err != nil {
		a.printError("execute", err)
		return ExitErrored
	}

	refs, err := a.uploadInputs(ctx, c, plan.inputs)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(a.stderr, "interrupted before the build started")
			return ExitAborted
		}
		a.printError("execute", err)
		return ExitErrored
	}

	req := api.CreateBuildRequest{Task: api.TaskStep{
		Config:       string(text),
		Inputs:       refs,
		InputMapping: plan.mapping,
		Params:       plan.params,
		Privileged:   f.privileged,
		Timeout:      f.timeout,
		Image:        f.image,
	}}
	// An interrupt must not leave a build behind that nobody knows of: the
	// request runs to its end, and the build is aborted below.
	createCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	b, err := c.CreateBuild(createCtx, req)
	cancel()
	if err != nil {
		a.printError("execute", err)
		return ExitErrored
	}
	fmt.Fprintf(a.stderr, "executing build %d at %s\n", b.ID, c.BuildURL(b.ID))

	res, err := a.follow(ctx, c, b.ID, true)
	if err != nil {
		a.printError("execute", err)
		return ExitErrored
	}
	code := res.exitCode()
	if len(plan.outputs) > 0 {
		if err := a.downloadOutputs(ctx, c, b.ID, res, plan.outputs); err != nil {
			a.printError("execute: outputs", err)
			if code == ExitSucceeded {
				code = ExitErrored
			}
		}
	}
	return code
}

// executePlan is what execute sends and fetches, checked against the task.
type executePlan struct {
	// inputs maps artifact names (the task's input names after
	// --input-mapping) to local directories.
	inputs  map[string]string
	mapping map[string]string
	params  map[string]string
	// outputs maps the task's output names to local directories.
	outputs map[string]string
}

// planExecute checks the flags against the task config the way fly does.
func planExecute(cfg *taskconfig.Config, f *executeFlags) (executePlan, error) {
	var errs *multierror.Error
	bad := func(format string, args ...any) { errs = multierror.Append(errs, fmt.Errorf(format, args...)) }

	var p executePlan
	var err error
	if p.mapping, err = f.mappings.toMap("--input-mapping"); err != nil {
		bad("%v", err)
	}
	if p.params, err = f.params.toMap("-p"); err != nil {
		bad("%v", err)
	}
	inputs, err := f.inputs.toMap("-i")
	if err != nil {
		bad("%v", err)
	}
	outputs, err := f.outputs.toMap("-o")
	if err != nil {
		bad("%v", err)
	}

	taskInputs := map[string]bool{}
	for _, in := range cfg.Inputs {
		taskInputs[in.Name] = true
	}
	for _, task := range slices.Sorted(maps.Keys(p.mapping)) {
		if !taskInputs[task] {
			bad("--input-mapping %s=%s: the task has no input %q", task, p.mapping[task], task)
		}
	}
	// The names -i takes: the task's inputs, renamed by the mapping.
	var names []string
	known := map[string]bool{}
	for _, in := range cfg.Inputs {
		name := in.Name
		if m, ok := p.mapping[in.Name]; ok {
			name = m
		}
		if !known[name] {
			known[name] = true
			names = append(names, name)
		}
	}
	p.inputs = map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(inputs)) {
		if !known[name] {
			bad("-i %s: the task has no input %q (its inputs: %s)", name, name, listOrNone(names))
			continue
		}
		dir := inputs[name]
		if fi, err := os.Stat(dir); err != nil {
			bad("-i %s=%s: %v", name, dir, err)
		} else if !fi.IsDir() {
			bad("-i %s=%s: not a directory", name, dir)
		}
		p.inputs[name] = dir
	}
	if len(inputs) == 0 && len(names) == 1 {
		// fly's convenience: a task with one input runs on the current directory.
		p.inputs[names[0]] = "."
	}
	provided := map[string]bool{}
	for name := range p.inputs {
		provided[name] = true
	}
	for _, name := range taskconfig.MissingInputs(cfg, provided, p.mapping) {
		bad("missing input %q: give it with -i %s=DIR", name, name)
	}

	taskOutputs := map[string]bool{}
	var outNames []string
	for _, out := range cfg.Outputs {
		taskOutputs[out.Name] = true
		outNames = append(outNames, out.Name)
	}
	p.outputs = map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(outputs)) {
		if !taskOutputs[name] {
			bad("-o %s: the task has no output %q (its outputs: %s)", name, name, listOrNone(outNames))
			continue
		}
		if outputs[name] == "" {
			bad("-o %s=: no directory", name)
			continue
		}
		p.outputs[name] = outputs[name]
	}
	return p, errs.ErrorOrNil()
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// uploadInputs uploads the input directories in parallel, showing their
// progress on one line when stderr is a terminal.
func (a *app) uploadInputs(ctx context.Context, c *atcclient.Client, inputs map[string]string) (map[string]api.ArtifactRef, error) {
	if len(inputs) == 0 {
		return nil, nil
	}
	names := slices.Sorted(maps.Keys(inputs))
	var prog *progressLine
	if a.stderrTTY {
		prog = newProgressLine(a.stderr, "uploading", names)
		defer prog.stop()
	}
	var mu sync.Mutex
	refs := make(map[string]api.ArtifactRef, len(inputs))
	g, gctx := errgroup.WithContext(ctx)
	// Compression is the bottleneck; more at once would only share the cores.
	g.SetLimit(4)
	for _, name := range names {
		g.Go(func() error {
			var progress func(int64)
			if prog != nil {
				progress = func(n int64) { prog.set(name, n) }
			}
			ref, err := c.UploadArtifact(gctx, inputs[name], progress)
			if err != nil {
				return fmt.Errorf("upload input %q from %s: %w", name, inputs[name], err)
			}
			mu.Lock()
			refs[name] = ref
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return refs, nil
}

// downloadOutputs fetches the outputs asked for into their directories, in
// parallel, and reports every failure.
func (a *app) downloadOutputs(ctx context.Context, c *atcclient.Client, id int64, res buildResult, outputs map[string]string) error {
	if res.Status == api.StatusAborted || ctx.Err() != nil {
		fmt.Fprintln(a.stderr, "outputs not downloaded: the build was aborted")
		return nil
	}
	b, err := c.Build(ctx, id)
	if err != nil {
		return err
	}
	artifacts := map[string]api.ArtifactRef{}
	for _, st := range b.Steps {
		maps.Copy(artifacts, st.Outputs)
	}
	var (
		mu   sync.Mutex
		errs *multierror.Error
		wg   sync.WaitGroup
	)
	for _, name := range slices.Sorted(maps.Keys(outputs)) {
		ref, ok := artifacts[name]
		if !ok {
			if res.Status == api.StatusSucceeded {
				errs = multierror.Append(errs, fmt.Errorf("output %q: the build has no such artifact", name))
			} else {
				fmt.Fprintf(a.stderr, "output %q not downloaded: the build %s before producing it\n", name, res.Status)
			}
			continue
		}
		wg.Go(func() {
			if err := c.DownloadArtifact(ctx, ref, outputs[name]); err != nil {
				mu.Lock()
				errs = multierror.Append(errs, fmt.Errorf("download output %q into %s: %w", name, outputs[name], err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if errs != nil {
		slices.SortFunc(errs.Errors, func(x, y error) int { return strings.Compare(x.Error(), y.Error()) })
	}
	return errs.ErrorOrNil()
}
