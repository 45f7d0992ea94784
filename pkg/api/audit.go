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
	// Usage is what the step's container used until its process exited
	// (nil: the process never ran, or its entrypoint was older).
	Usage *ResourceUsage `json:"usage,omitempty"`
	// Phases are the step's moments as its sidecar saw them, in order.
	Phases []Phase `json:"phases,omitempty"`
}

// ResourceUsage is what a step's container used, as its cgroup counts it
// (the step's process tree and the entrypoint). A field the kernel does not
// offer is left out, never guessed.
type ResourceUsage struct {
	// MemoryPeakBytes is the container's memory high-water mark, page
	// cache included.
	MemoryPeakBytes int64 `json:"memory_peak_bytes,omitempty"`
	// CPUSeconds is the CPU time (user and system) it used.
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`
}

// Phase names, in the order a step passes them (a step skips those it has
// no part in: waiting_for_turn is only for a step declared ahead).
const (
	PhaseSidecarStarted   = "sidecar_started"
	PhaseFetchingInputs   = "fetching_inputs"
	PhaseWaitingForTurn   = "waiting_for_turn"
	PhaseInputsFetched    = "inputs_fetched"
	PhaseRunning          = "running"
	PhaseProcessExited    = "process_exited"
	PhaseUploadingOutputs = "uploading_outputs"
	PhaseOutputsUploaded  = "outputs_uploaded"
	PhaseFinished         = "finished"
)

// Phase is a moment of a step.
type Phase struct {
	Name string    `json:"name"`
	At   time.Time `json:"at"`
}

// PodTimeline is a step pod's start as the ATC saw it and as the pod's
// status recorded it (timeline.json in the step's audit record, written by
// the ATC once the step has ended). The kubelet's times have second
// resolution; a zero time is one that did not happen or was not seen.
type PodTimeline struct {
	StepID string `json:"step_id"`
	// Queued is when the server began the step, before it waited for room
	// and declared the pod.
	Queued     time.Time `json:"queued,omitzero"`
	PodCreated time.Time `json:"pod_created,omitzero"`
	// Scheduled: the pod was bound to a node.
	Scheduled time.Time `json:"scheduled,omitzero"`
	// Initialized: the sidecar was running; the kubelet now pulls the
	// step's image.
	Initialized time.Time `json:"initialized,omitzero"`
	// StepContainerStarted: the step's image was pulled and its container
	// started.
	StepContainerStarted time.Time `json:"step_container_started,omitzero"`
	Node                 string    `json:"node,omitempty"`
}

// StepArtifact is one artifact moved into or out of a step.
type StepArtifact struct {
	Name    string  `json:"name"`
	Key     string  `json:"key"`
	Size    int64   `json:"size"`
	Digest  string  `json:"digest"`
	Seconds float64 `json:"seconds"`
}
