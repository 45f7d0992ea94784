// Package api defines the ATC runtime's HTTP API: the JSON shapes and the
// routes shared by `atc-porter-runtime serve` and its client commands.
//
//	POST /api/v1/artifacts               body: a tar+zstd stream → ArtifactRef
//	GET  /api/v1/artifacts/{key...}      the stored tar+zstd stream of an artifact
//	POST /api/v1/builds                  CreateBuildRequest → Build (201); 400 {"error"} on bad input
//	GET  /api/v1/builds                  []Build, newest first
//	GET  /api/v1/builds/{id}             Build
//	GET  /api/v1/builds/{id}/events      server-sent events in Concourse's shapes, ending with "end"
//	PUT  /api/v1/builds/{id}/abort       204
//	GET  /api/v1/builds/{id}/audit       Audit: the build's audit objects in the blobstore
package api

import (
	"encoding/json"
	"fmt"
	"time"
)

// Build statuses, as Concourse names them.
const (
	StatusPending   = "pending"
	StatusStarted   = "started"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
	StatusErrored   = "errored"
	StatusAborted   = "aborted"
)

// Finished reports whether a build status is final.
func Finished(status string) bool {
	switch status {
	case StatusSucceeded, StatusFailed, StatusErrored, StatusAborted:
		return true
	}
	return false
}

// ArtifactRef names a stored artifact.
type ArtifactRef struct {
	Key    string `json:"key"`
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}

// TaskStep is a one-off task step, as `execute` sends it.
type TaskStep struct {
	// Name is the task's name in the build (default "one-off").
	Name string `json:"name,omitempty"`
	// Config is the task config's YAML text (Concourse's task file).
	Config string `json:"config"`
	// Inputs maps the step's input names (after input_mapping) to artifacts.
	Inputs        map[string]ArtifactRef `json:"inputs,omitempty"`
	InputMapping  map[string]string      `json:"input_mapping,omitempty"`
	OutputMapping map[string]string      `json:"output_mapping,omitempty"`
	// Params override the config's params.
	Params     map[string]string `json:"params,omitempty"`
	Privileged bool              `json:"privileged,omitempty"`
	// Timeout is Go duration text, e.g. "30m".
	Timeout string `json:"timeout,omitempty"`
	// Image overrides the config's image_resource.
	Image string `json:"image,omitempty"`
}

// CreateBuildRequest starts a one-off build.
type CreateBuildRequest struct {
	Team string   `json:"team,omitempty"`
	Task TaskStep `json:"task"`
}

// Build is a build and its steps.
type Build struct {
	ID        int64  `json:"id"`
	Name      string `json:"name"`
	Team      string `json:"team_name"`
	Status    string `json:"status"`
	CreatedAt int64  `json:"create_time,omitempty"`
	StartTime int64  `json:"start_time,omitempty"`
	EndTime   int64  `json:"end_time,omitempty"`
	Steps     []Step `json:"steps,omitempty"`
}

// Step is one step of a build.
type Step struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	Type       string `json:"type"`
	Pod        string `json:"pod,omitempty"`
	Status     string `json:"status"`
	ExitStatus *int   `json:"exit_status,omitempty"`
	Error      string `json:"error,omitempty"`
	// Outputs maps the step's output names (after output_mapping) to artifacts.
	Outputs map[string]ArtifactRef `json:"outputs,omitempty"`
	// AuditKey is the blobstore key of the step's result.json.
	AuditKey string `json:"audit_key,omitempty"`
}

// Error is the body of every 4xx/5xx answer.
type Error struct {
	Error string `json:"error"`
}

// BuildPath is the path of a build's resource.
func BuildPath(id int64) string { return fmt.Sprintf("/api/v1/builds/%d", id) }

// Audit is a finished build's audit trail, read back from the blobstore.
type Audit struct {
	// Objects are every object under the build's audit prefix.
	Objects []AuditObject `json:"objects"`
	// Build is builds/<id>/build.json.
	Build json.RawMessage `json:"build,omitempty"`
	// Steps maps step IDs to their result.json.
	Steps map[string]json.RawMessage `json:"steps,omitempty"`
}

// AuditObject is one stored audit object.
type AuditObject struct {
	Key          string    `json:"key"`
	Size         int64     `json:"size"`
	LastModified time.Time `json:"last_modified"`
}
