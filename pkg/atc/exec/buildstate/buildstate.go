// Package buildstate is a running build as the server holds it: who it
// is, its event log, and the record of its steps, saved in the database
// after every change so that a restarted server resumes the build
// (finished steps are not run again, running pods are followed again).
package buildstate

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atc/buildlog"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/creds"
	"github.com/porter-ci/porter/pkg/events"
)

// Why a build's context ended: an abort, a step's timeout, or (any other
// cause) the server shutting down, after which the build is resumed.
var (
	ErrAborted = errors.New("aborted")
	ErrTimeout = errors.New("timeout exceeded")
	// ErrShutdown is the cause of a build context ended by the server
	// stopping.
	ErrShutdown = errors.New("the server is stopping")
)

// Build is a build being run: who it is, its log and its steps' state.
type Build struct {
	ID     int64
	Name   string
	Team   string
	TeamID int
	// Pipeline and Job name a job build's (empty for one-off builds): task
	// caches are keyed by them, and by the pipeline's InstanceVars.
	Pipeline, Job string
	InstanceVars  map[string]any
	// PipelineID is the build's pipeline's (0 for one-off builds): check
	// pods are never shared across pipelines.
	PipelineID int64
	// Created is when the build was created: with ID, it names the
	// build's audit records (AuditID).
	Created time.Time
	Log     *buildlog.Log
	// Abort cancels the build's run context (with ErrAborted).
	Abort context.CancelCauseFunc
	Done  chan struct{}

	// ResumedFrom is the failed build this one resumes (nil: none).
	ResumedFrom *BuildRef

	mu sync.Mutex
	// State is guarded by Update once the build runs.
	State BuildState
}

// BuildState is the server's record of a build's steps, saved in the
// database after every change, so a restarted server resumes the build:
// finished steps are not run again and running pods are followed again.
type BuildState struct {
	Steps map[concourse.PlanID]*StepRecord `json:"steps"`
	// Ahead are the pods declared ahead of their tasks' turn (exec's
	// declareAhead) and not yet given the go-ahead: a server that resumes
	// the build deletes them, as it did not declare them.
	Ahead map[concourse.PlanID]AheadPod `json:"ahead,omitempty"`
}

// AheadPod is a pod declared ahead of its task's turn.
type AheadPod struct {
	StepID    string `json:"step_id"`
	Worker    string `json:"worker"`
	Container string `json:"container"`
}

// StepRecord is what is known of one step of a build.
type StepRecord struct {
	Name   string             `json:"name"`
	Type   concourse.StepKind `json:"type"`
	StepID string             `json:"step_id,omitempty"` // the pod's step ID
	// Worker runs the step's pod ("": the server's first, as before there
	// were several).
	Worker string `json:"worker,omitempty"`
	// Container is the step pod's handle in the API.
	Container   string                `json:"container,omitempty"`
	EventConfig events.TaskConfig     `json:"event_config"`
	Status      concourse.BuildStatus `json:"status"` // started, succeeded, failed, errored, aborted
	ExitStatus  *int                  `json:"exit_status,omitempty"`
	Error       string                `json:"error,omitempty"`
	// Outputs maps the build's artifact names to what the step produced.
	Outputs  map[string]api.ArtifactRef `json:"outputs,omitempty"`
	AuditKey string                     `json:"audit_key,omitempty"`
	EndTime  int64                      `json:"end_time,omitempty"`
	// Version is what a get fetched or a put made (a check: the latest
	// version it found), with the metadata; Versions is all a check found.
	Version  map[string]string         `json:"version,omitempty"`
	Metadata []concourse.MetadataField `json:"metadata,omitempty"`
	Versions []Version                 `json:"versions,omitempty"`
	// Attempt is the step's pod attempt when a lost pod was replaced (0:
	// the first).
	Attempt int `json:"attempt,omitempty"`
	// CacheKey is a get's resource cache key.
	CacheKey string `json:"cache_key,omitempty"`
	// Gated: the step runs in a pod declared ahead, which a server that
	// resumes the step gives the go-ahead again (it may have been lost).
	Gated bool `json:"gated,omitempty"`
	// ReusedFrom names the failed build (its name, "3") whose outcome of
	// the step this build reuses instead of running it (package reuse);
	// ReuseShown: the build's log shows it already.
	ReusedFrom string `json:"reused_from,omitempty"`
	ReuseShown bool   `json:"reuse_shown,omitempty"`
}

// Finished reports whether the step has ended.
func (r *StepRecord) Finished() bool { return r.Status.Finished() }

// Record returns the step's record, creating it.
func (b *Build) Record(id concourse.PlanID, name string, typ concourse.StepKind) *StepRecord {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.State.Steps == nil {
		b.State.Steps = map[concourse.PlanID]*StepRecord{}
	}
	r, ok := b.State.Steps[id]
	if !ok {
		r = &StepRecord{Name: name, Type: typ}
		b.State.Steps[id] = r
	}
	return r
}

// Update changes (or reads) the build's state under its lock.
func (b *Build) Update(f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f()
}

// Ended reports whether the build has ended (Done is closed).
func (b *Build) Ended() bool {
	select {
	case <-b.Done:
		return true
	default:
		return false
	}
}

// SecretRedactor redacts the credentials the build has read (nil: none).
func (b *Build) SecretRedactor() *creds.Redactor {
	if b.Log == nil {
		return nil
	}
	return b.Log.Redactor()
}

// AuditID names b's audit records (builds/<AuditID>/): its ID and its
// creation time, unique even when a database reset or restore gives an
// ID out again (the records are write-once). A build without a creation
// time keeps its ID.
func (b *Build) AuditID() string {
	return blobstore.AuditID(b.ID, b.Created)
}

// MarshalState is the build's state as it is saved.
func (b *Build) MarshalState() ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return json.Marshal(b.State)
}

// BuildRef names another build: its ID, name and audit records' ID
// (builds/<AuditID>/).
type BuildRef struct {
	ID      int64  `json:"id"`
	Name    string `json:"name"`
	AuditID string `json:"audit_id"`
}

// Version is a version as a check, get or put step reports it.
type Version struct {
	Version  map[string]string         `json:"version"`
	Metadata []concourse.MetadataField `json:"metadata,omitempty"`
}
