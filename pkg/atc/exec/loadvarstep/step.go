// Package loadvarstep is the load_var step, as Concourse's
// atc/exec/load_var_step.go: it reads a file of an artifact into a local
// var of the build. What it needs of the build it runs in (its artifacts,
// its local vars, its delegate and its step's record) comes through small
// interfaces, which exec implements.
package loadvarstep

import (
	"context"
	"fmt"

	"github.com/porter-ci/porter/pkg/atc/exec/stepplan"
	"github.com/porter-ci/porter/pkg/atc/exec/stepvars"
	"github.com/porter-ci/porter/pkg/concourse"
)

// Delegate reports what the step does (exec's StepDelegate).
type Delegate interface {
	Initializing()
	Starting()
	Stdout(msg string)
}

// Ender ends the step: its delegate's Finished or Errored, and its record.
type Ender interface {
	// Finished ends the step as succeeded or failed: (succeeded, nil).
	Finished(ctx context.Context, succeeded bool) (bool, error)
	// Errored ends the step as errored with err: (false, err).
	Errored(ctx context.Context, err error) (bool, error)
}

// FileReader reads "<artifact>/<path>" from the build's artifacts; what
// names the step for errors.
type FileReader interface {
	ReadArtifactFile(ctx context.Context, what, file string) ([]byte, error)
}

// Locals are the build's local vars: those of the across run the step
// running under ctx is in.
type Locals interface {
	SetVar(ctx context.Context, name string, value any)
}

// Redactor hides secrets from the build's events from now on.
type Redactor interface {
	Redact(secrets []string)
}

// Step reads a file of an artifact into a local var of the build (of the
// across run it is in), redacted from the build's log unless reveal. A
// step finished before a restart is read again, silently (Quiet): local
// vars are not kept in the database, since they may be secrets.
type Step struct {
	Plan *concourse.LoadVarPlan
	// Quiet: the step finished before a restart.
	Quiet bool

	Delegate Delegate
	End      Ender
	Files    FileReader
	Locals   Locals
	Redactor Redactor
}

// Run runs the step.
func (s Step) Run(ctx context.Context) (bool, error) {
	lv, d := s.Plan, s.Delegate
	if !s.Quiet {
		d.Initializing()
	}
	value, err := s.read(ctx, lv)
	if err != nil {
		return s.End.Errored(ctx, err)
	}
	if !lv.Reveal {
		s.Redactor.Redact(stepvars.Secrets(value))
	}
	s.Locals.SetVar(ctx, lv.Name, value)
	if !s.Quiet {
		d.Starting()
		d.Stdout(fmt.Sprintf("var %s fetched.\n", lv.Name))
		d.Stdout(fmt.Sprintf("added var %s to build.\n", lv.Name))
		return s.End.Finished(ctx, true)
	}
	return true, nil
}

func (s Step) read(ctx context.Context, lv *concourse.LoadVarPlan) (any, error) {
	format, err := stepplan.LoadVarFormat(lv)
	if err != nil {
		return nil, err
	}
	what := "load_var " + lv.Name
	body, err := s.Files.ReadArtifactFile(ctx, what, lv.File)
	if err != nil {
		return nil, err
	}
	value, err := stepplan.ParseVarFile(body, format)
	if err != nil {
		return nil, fmt.Errorf("%s: file %s: %w", what, lv.File, err)
	}
	return value, nil
}
