// Package api defines Porter's own additions to Concourse's HTTP API (which
// is in pkg/concourse) and the records the runtime shares with the sidecar:
//
//	GET /api/v1/builds/{id}/audit    Audit: the build's audit objects in the blobstore
//	GET /api/v1/builds/{id}/audit/steps/{step}/{object}    one audit object of a step (pod.yaml, action.json, result.json, timeline.json)
//	GET /api/v1/builds/{id}/outputs/{step}/{output}    a step's output artifact as a tar
package api

import (
	"encoding/json"
	"time"
)

// ArtifactRef names a stored artifact.
type ArtifactRef struct {
	Key    string `json:"key"`
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}

// Audit is a finished build's audit trail, read back from the blobstore.
type Audit struct {
	// Objects are every object under the build's audit prefix.
	Objects []AuditObject `json:"objects"`
	// Build is builds/<id>/build.json.
	Build json.RawMessage `json:"build,omitempty"`
	// Steps maps step IDs to their result.json.
	Steps map[string]json.RawMessage `json:"steps,omitempty"`
	// Timelines maps step IDs to their timeline.json (PodTimeline).
	Timelines map[string]json.RawMessage `json:"timelines,omitempty"`
}

// AuditObject is one stored audit object.
type AuditObject struct {
	Key          string    `json:"key"`
	Size         int64     `json:"size"`
	LastModified time.Time `json:"last_modified"`
}
