package blobstore

import (
	"fmt"
	"path"
	"strings"
)

// Object layout (see DESIGN.md). Keys are built only here.

// ArtifactKey is the content-addressed key of an artifact whose stored
// (compressed) stream has the given "sha256:<hex>" digest.
func ArtifactKey(digest string) string {
	return "artifacts/" + strings.TrimPrefix(digest, "sha256:") + ".tar.zst"
}

// StagingKey is where an artifact is uploaded before its digest is known.
// Objects left here by interrupted uploads are garbage.
func StagingKey(id string) string { return "staging/" + id + ".tar.zst" }

// TaskCacheKey is the key of a task cache for one job/step/path.
func TaskCacheKey(team, pipeline, job, step, cachePath string) string {
	return path.Join("task-caches", team, orNone(pipeline), orNone(job), step, strings.Trim(path.Clean(cachePath), "/")) + ".tar.zst"
}

// BuildPrefix is the audit prefix of a build.
func BuildPrefix(buildID string) string { return fmt.Sprintf("builds/%s/", buildID) }

// StepPrefix is the audit prefix of one step of a build.
func StepPrefix(buildID, stepID string) string {
	return fmt.Sprintf("builds/%s/steps/%s/", buildID, stepID)
}

// Audit object names under StepPrefix.
const (
	ActionObject = "action.json"
	PodObject    = "pod.yaml"
	EventsObject = "events.jsonl.zst"
	ResultObject = "result.json"
)

func orNone(s string) string {
	if s == "" {
		return "_"
	}
	return s
}
