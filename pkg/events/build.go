// Package events holds the two event models of Porter: the gRPC protocol
// between a step's sidecar and the ATC (package eventspb), and the build
// events shown to people, which follow Concourse's event names and JSON shapes
// (this file) so that they read like Concourse's and tools that know
// Concourse's build event stream can follow Porter's.
package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/porter-ci/porter/pkg/concourse"
)

// EventType is the name of a build event, the "event" of its envelope.
type EventType string

// Event types, as Concourse names them.
const (
	EventTypeStatus          EventType = "status"
	EventTypeLog             EventType = "log"
	EventTypeError           EventType = "error"
	EventTypeSelectedWorker  EventType = "selected-worker"
	EventTypeInitializeTask  EventType = "initialize-task"
	EventTypeStartTask       EventType = "start-task"
	EventTypeFinishTask      EventType = "finish-task"
	EventTypeInitializeGet   EventType = "initialize-get"
	EventTypeStartGet        EventType = "start-get"
	EventTypeFinishGet       EventType = "finish-get"
	EventTypeInitializePut   EventType = "initialize-put"
	EventTypeStartPut        EventType = "start-put"
	EventTypeFinishPut       EventType = "finish-put"
	EventTypeInitializeCheck EventType = "initialize-check"
	EventTypeImageCheck      EventType = "image-check"
	// The generic step events of steps that run no process of their own
	// (load_var, set_pipeline), and set_pipeline's outcome.
	EventTypeInitialize         EventType = "initialize"
	EventTypeStart              EventType = "start"
	EventTypeFinish             EventType = "finish"
	EventTypeSetPipelineChanged EventType = "set-pipeline-changed"
	// EventTypeAcrossSubsteps announces an across step's runs.
	EventTypeAcrossSubsteps EventType = "across-substeps"
)

// Event is the payload of one build event, the "data" of its envelope.
type Event interface {
	EventType() EventType
	// Version is the payload's schema version ("major.minor"); readers
	// accept any payload of the same major version.
	EventVersion() string
}

// ErrUnknownEvent is returned for an event type or major version this
// package does not know. A reader of a stream should skip such events: newer
// servers may send more than it understands.
var ErrUnknownEvent = errors.New("unknown build event")

// Origin says which step (plan ID) an event comes from and, for logs, which
// stream.
type Origin struct {
	ID     string `json:"id,omitempty"`
	Source string `json:"source,omitempty"`
}

// Log origin sources.
const (
	OriginSourceStdout = "stdout"
	OriginSourceStderr = "stderr"
)

// Status is a change of the build's status. Times in all events are Unix
// seconds, as in Concourse.
type Status struct {
	Status concourse.BuildStatus `json:"status"`
	Time   int64                 `json:"time"`
}

// Log is a chunk of a step's output.
type Log struct {
	Time    int64  `json:"time"`
	Origin  Origin `json:"origin"`
	Payload string `json:"payload"`
}

// Error is an error of a step (or of the build when Origin is empty) that is
// not the process's own failure.
type Error struct {
	Message string `json:"message"`
	Origin  Origin `json:"origin"`
	Time    int64  `json:"time"`
}

// SelectedWorker says on which worker a step runs.
type SelectedWorker struct {
	Time       int64  `json:"time"`
	Origin     Origin `json:"origin"`
	WorkerName string `json:"selected_worker"`
}

// TaskConfig is the summary of a task's config that Concourse puts in its
// task events.
type TaskConfig struct {
	Platform string          `json:"platform"`
	Image    string          `json:"image"`
	Run      TaskRunConfig   `json:"run"`
	Inputs   []TaskInputInfo `json:"inputs"`
}

// TaskRunConfig is the process a task runs.
type TaskRunConfig struct {
	Path string   `json:"path"`
	Args []string `json:"args"`
	Dir  string   `json:"dir"`
}

// TaskInputInfo is one input of a task.
type TaskInputInfo struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// InitializeTask: the task's step is being prepared (pod being created,
// inputs being fetched).
type InitializeTask struct {
	Time   int64      `json:"time"`
	Origin Origin     `json:"origin"`
	Config TaskConfig `json:"config"`
}

// StartTask: the task's process started.
type StartTask struct {
	Time   int64      `json:"time"`
	Origin Origin     `json:"origin"`
	Config TaskConfig `json:"config"`
}

// FinishTask: the task's process exited.
type FinishTask struct {
	Time       int64  `json:"time"`
	ExitStatus int    `json:"exit_status"`
	Origin     Origin `json:"origin"`
}

// InitializeGet: a get step is being prepared.
type InitializeGet struct {
	Origin Origin `json:"origin"`
	Time   int64  `json:"time,omitempty"`
}

// StartGet: a get step's resource script started.
type StartGet struct {
	Origin Origin `json:"origin"`
	Time   int64  `json:"time,omitempty"`
}

// FinishGet: a get step fetched a version.
type FinishGet struct {
	Origin     Origin            `json:"origin"`
	Time       int64             `json:"time"`
	ExitStatus int               `json:"exit_status"`
	Version    map[string]string `json:"version"`
	Metadata   []MetadataField   `json:"metadata,omitempty"`
}

// InitializePut: a put step is being prepared.
type InitializePut struct {
	Origin Origin `json:"origin"`
	Time   int64  `json:"time,omitempty"`
}

// StartPut: a put step's resource script started.
type StartPut struct {
	Origin Origin `json:"origin"`
	Time   int64  `json:"time,omitempty"`
}

// FinishPut: a put step created a version.
type FinishPut struct {
	Origin     Origin            `json:"origin"`
	Time       int64             `json:"time"`
	ExitStatus int               `json:"exit_status"`
	Version    map[string]string `json:"version"`
	Metadata   []MetadataField   `json:"metadata,omitempty"`
}

// InitializeCheck: a check step is being prepared.
type InitializeCheck struct {
	Origin Origin `json:"origin"`
	Time   int64  `json:"time,omitempty"`
	Name   string `json:"name"`
}

// ImageCheck: a task's image is being checked; Plan is the check's public
// plan, whose id is the origin of the check's own events.
type ImageCheck struct {
	Time   int64           `json:"time"`
	Origin Origin          `json:"origin"`
	Plan   json.RawMessage `json:"plan"`
}

// Initialize: a step without a process of its own is being prepared.
type Initialize struct {
	Origin Origin `json:"origin"`
	Time   int64  `json:"time,omitempty"`
}

// Start: such a step started.
type Start struct {
	Origin Origin `json:"origin"`
	Time   int64  `json:"time,omitempty"`
}

// Finish: such a step ended.
type Finish struct {
	Origin    Origin `json:"origin"`
	Time      int64  `json:"time"`
	Succeeded bool   `json:"succeeded"`
}

// SetPipelineChanged says whether a set_pipeline step changed the
// pipeline's config.
type SetPipelineChanged struct {
	Origin  Origin `json:"origin"`
	Changed bool   `json:"changed"`
}

// AcrossSubsteps lists the public plans of an across step's runs, once its
// values are known.
type AcrossSubsteps struct {
	Time     int64             `json:"time"`
	Origin   Origin            `json:"origin"`
	Substeps []json.RawMessage `json:"substeps"`
}

// MetadataField is one line of a resource version's metadata.
type MetadataField struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Each payload's version is Concourse's current one for it, so that clients
// built for Concourse accept Porter's events.

func (Status) EventType() EventType          { return EventTypeStatus }
func (Status) EventVersion() string          { return "1.0" }
func (Log) EventType() EventType             { return EventTypeLog }
func (Log) EventVersion() string             { return "5.1" }
func (Error) EventType() EventType           { return EventTypeError }
func (Error) EventVersion() string           { return "4.1" }
func (SelectedWorker) EventType() EventType  { return EventTypeSelectedWorker }
func (SelectedWorker) EventVersion() string  { return "1.0" }
func (InitializeTask) EventType() EventType  { return EventTypeInitializeTask }
func (InitializeTask) EventVersion() string  { return "4.0" }
func (StartTask) EventType() EventType       { return EventTypeStartTask }
func (StartTask) EventVersion() string       { return "5.0" }
func (FinishTask) EventType() EventType      { return EventTypeFinishTask }
func (FinishTask) EventVersion() string      { return "4.0" }
func (InitializeGet) EventType() EventType   { return EventTypeInitializeGet }
func (InitializeGet) EventVersion() string   { return "2.0" }
func (StartGet) EventType() EventType        { return EventTypeStartGet }
func (StartGet) EventVersion() string        { return "1.0" }
func (FinishGet) EventType() EventType       { return EventTypeFinishGet }
func (FinishGet) EventVersion() string       { return "5.1" }
func (InitializePut) EventType() EventType   { return EventTypeInitializePut }
func (InitializePut) EventVersion() string   { return "2.0" }
func (StartPut) EventType() EventType        { return EventTypeStartPut }
func (StartPut) EventVersion() string        { return "1.0" }
func (FinishPut) EventType() EventType       { return EventTypeFinishPut }
func (FinishPut) EventVersion() string       { return "5.1" }
func (InitializeCheck) EventType() EventType { return EventTypeInitializeCheck }
func (InitializeCheck) EventVersion() string { return "1.0" }
func (ImageCheck) EventType() EventType      { return EventTypeImageCheck }
func (ImageCheck) EventVersion() string      { return "1.1" }
func (Initialize) EventType() EventType      { return EventTypeInitialize }
func (Initialize) EventVersion() string      { return "1.0" }
func (Start) EventType() EventType           { return EventTypeStart }
func (Start) EventVersion() string           { return "1.0" }
func (Finish) EventType() EventType          { return EventTypeFinish }
func (Finish) EventVersion() string          { return "1.0" }
func (SetPipelineChanged) EventType() EventType {
	return EventTypeSetPipelineChanged
}
func (SetPipelineChanged) EventVersion() string { return "1.0" }
func (AcrossSubsteps) EventType() EventType     { return EventTypeAcrossSubsteps }
func (AcrossSubsteps) EventVersion() string     { return "1.0" }

// Envelope is a build event as it travels: its type, payload version and
// payload. It marshals to Concourse's {"data":...,"event":...,"version":...}.
type Envelope struct {
	Data    json.RawMessage `json:"data"`
	Event   EventType       `json:"event"`
	Version string          `json:"version"`
}

// NewEnvelope wraps a payload.
func NewEnvelope(e Event) (Envelope, error) {
	data, err := json.Marshal(e)
	if err != nil {
		return Envelope{}, fmt.Errorf("encode %s event: %w", e.EventType(), err)
	}
	return Envelope{Data: data, Event: e.EventType(), Version: e.EventVersion()}, nil
}

// Encode renders a payload as an envelope's JSON.
func Encode(e Event) ([]byte, error) {
	env, err := NewEnvelope(e)
	if err != nil {
		return nil, err
	}
	return json.Marshal(env)
}

// Decode parses an envelope's JSON and its payload.
func Decode(data []byte) (Event, error) {
	var env Envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, fmt.Errorf("decode build event: %w", err)
	}
	return env.Decode()
}

// Decode parses the envelope's payload into the struct for its event type,
// returned by value (e.g. events.Log, not *events.Log), the same types
// Encode takes. Unknown types and incompatible major versions give an error
// wrapping ErrUnknownEvent.
func (env Envelope) Decode() (Event, error) {
	switch env.Event {
	case EventTypeStatus:
		return decodePayload[Status](env)
	case EventTypeLog:
		return decodePayload[Log](env)
	case EventTypeError:
		return decodePayload[Error](env)
	case EventTypeSelectedWorker:
		return decodePayload[SelectedWorker](env)
	case EventTypeInitializeTask:
		return decodePayload[InitializeTask](env)
	case EventTypeStartTask:
		return decodePayload[StartTask](env)
	case EventTypeFinishTask:
		return decodePayload[FinishTask](env)
	case EventTypeInitializeGet:
		return decodePayload[InitializeGet](env)
	case EventTypeStartGet:
		return decodePayload[StartGet](env)
	case EventTypeFinishGet:
		return decodePayload[FinishGet](env)
	case EventTypeInitializePut:
		return decodePayload[InitializePut](env)
	case EventTypeStartPut:
		return decodePayload[StartPut](env)
	case EventTypeFinishPut:
		return decodePayload[FinishPut](env)
	case EventTypeInitializeCheck:
		return decodePayload[InitializeCheck](env)
	case EventTypeImageCheck:
		return decodePayload[ImageCheck](env)
	case EventTypeInitialize:
		return decodePayload[Initialize](env)
	case EventTypeStart:
		return decodePayload[Start](env)
	case EventTypeFinish:
		return decodePayload[Finish](env)
	case EventTypeSetPipelineChanged:
		return decodePayload[SetPipelineChanged](env)
	case EventTypeAcrossSubsteps:
		return decodePayload[AcrossSubsteps](env)
	}
	return nil, fmt.Errorf("%w: type %q", ErrUnknownEvent, env.Event)
}

func decodePayload[T Event](env Envelope) (Event, error) {
	var e T
	// Like Concourse, any minor version of the same major one is readable.
	if major(env.Version) != major(e.EventVersion()) {
		return nil, fmt.Errorf("%w: %s version %q (supported: %s)", ErrUnknownEvent, env.Event, env.Version, e.EventVersion())
	}
	if len(env.Data) == 0 {
		return nil, fmt.Errorf("decode %s event: no data", env.Event)
	}
	if err := json.Unmarshal(env.Data, &e); err != nil {
		return nil, fmt.Errorf("decode %s event: %w", env.Event, err)
	}
	return e, nil
}

func major(version string) string {
	m, _, _ := strings.Cut(version, ".")
	return m
}
