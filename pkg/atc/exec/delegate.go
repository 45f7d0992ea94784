package exec

import "github.com/porter-ci/porter/pkg/atc/exec/delegate"

// The steps' delegates (package delegate), by the names the engine knows.
type (
	DelegateFactory = delegate.Factory
	BuildDelegate   = delegate.Build
	StepDelegate    = delegate.Step
)
