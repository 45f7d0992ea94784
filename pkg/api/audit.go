package api

import "time"

// StepRecord is a step's result.json in the audit trail
// (builds/<build>/steps/<step>/result.json), written once by its sidecar.
type StepRecord struct {
	StepID        string    `json:"step_id"`
	BuildID       string    `json:"build_id"`
	StepName      string    `json:"step_name"`
	Pod           string    `json:"pod,omitempty"`
	Image         string    `json:"image"`
	PorterVersion string    `json:"porter_version"`
	StartedAt     time.Time `json:"started_at"`
	FinishedAt    time.Time `json:"finished_at"`
	StepResult
	EventsKey    string `json:"events_key,omitempty"`
	EventsDigest string `json:"events_digest,omitempty"`
}

// Outcome is how a step ended in one word. Its strings are what audit
// records hold and the ATC reads: they must not change.
type Outcome string

const (
	Succeeded Outcome = "SUCCEEDED"
	Failed    Outcome = "FAILED"  // the process failed: non-zero exit, timeout, out of memory
	Errored   Outcome = "ERRORED" // porter or the infrastructure failed
	Aborted   Outcome = "ABORTED"
)

// StepResult is how a step ended.
type StepResult struct {
	Result     Outcome `json:"result"`
	ExitStatus int32   `json:"exit_status"`
	Error      string  `json:"error,omitempty"`
	TimedOut   bool    `json:"timed_out,omitempty"`
	Signal     string  `json:"signal,omitempty"`
	OOMKilled  bool    `json:"oom_killed,omitempty"`
	// EntrypointLost: the step's container was stopped from outside before
	// the process exited (an eviction, a kill); the pod's status says why.
	EntrypointLost bool           `json:"entrypoint_lost,omitempty"`
	Inputs         []StepArtifact `json:"inputs,omitempty"`
	Outputs        []StepArtifact `json:"outputs,omitempty"`
	Caches         []StepArtifact `json:"caches,omitempty"`
}

// StepArtifact is one artifact moved into or out of a step.
type StepArtifact struct {
	Name    string  `json:"name"`
	Key     string  `json:"key"`
	Size    int64   `json:"size"`
	Digest  string  `json:"digest"`
	Seconds float64 `json:"seconds"`
}
