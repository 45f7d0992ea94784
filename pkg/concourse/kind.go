package concourse

// StepKind is the kind of a plan's step: its key in Concourse's plan JSON.
type StepKind string

// The kinds of steps, as their plans name them.
const (
	KindTask           StepKind = "task"
	KindGet            StepKind = "get"
	KindPut            StepKind = "put"
	KindCheck          StepKind = "check"
	KindLoadVar        StepKind = "load_var"
	KindSetPipeline    StepKind = "set_pipeline"
	KindArtifactInput  StepKind = "artifact_input"
	KindArtifactOutput StepKind = "artifact_output"
	KindRun            StepKind = "run"
	KindDo             StepKind = "do"
	KindInParallel     StepKind = "in_parallel"
	KindAcross         StepKind = "across"
	KindRetry          StepKind = "retry"
	KindTry            StepKind = "try"
	KindTimeout        StepKind = "timeout"
	KindEnsure         StepKind = "ensure"
	KindOnSuccess      StepKind = "on_success"
	KindOnFailure      StepKind = "on_failure"
	KindOnError        StepKind = "on_error"
	KindOnAbort        StepKind = "on_abort"
)

// Kind is the kind of p's step ("" for a plan with none). Hooks and
// modifiers wrap their step: a plan with a step and a hook is the hook's.
func (p *Plan) Kind() StepKind {
	switch {
	case p.Do != nil:
		return KindDo
	case p.InParallel != nil:
		return KindInParallel
	case p.Retry != nil:
		return KindRetry
	case p.Ensure != nil:
		return KindEnsure
	case p.OnSuccess != nil:
		return KindOnSuccess
	case p.OnFailure != nil:
		return KindOnFailure
	case p.OnError != nil:
		return KindOnError
	case p.OnAbort != nil:
		return KindOnAbort
	case p.Try != nil:
		return KindTry
	case p.Across != nil:
		return KindAcross
	case p.Timeout != nil:
		return KindTimeout
	case p.ArtifactInput != nil:
		return KindArtifactInput
	case p.ArtifactOutput != nil:
		return KindArtifactOutput
	case p.Task != nil:
		return KindTask
	case p.Get != nil:
		return KindGet
	case p.Put != nil:
		return KindPut
	case p.Check != nil:
		return KindCheck
	case p.LoadVar != nil:
		return KindLoadVar
	case p.SetPipeline != nil:
		return KindSetPipeline
	case p.Run != nil:
		return KindRun
	}
	return ""
}

// Composite reports whether steps of kind k only run other steps.
func (k StepKind) Composite() bool {
	switch k {
	case KindDo, KindInParallel, KindAcross, KindRetry, KindTry, KindTimeout,
		KindEnsure, KindOnSuccess, KindOnFailure, KindOnError, KindOnAbort:
		return true
	}
	return false
}

// RunsPod reports whether a step of kind k runs a pod of its own.
func (k StepKind) RunsPod() bool {
	switch k {
	case KindTask, KindGet, KindPut, KindCheck:
		return true
	}
	return false
}
