package concourse

import "fmt"

// Info is GET /api/v1/info.
type Info struct {
	Version       string          `json:"version"`
	WorkerVersion string          `json:"worker_version"`
	FeatureFlags  map[string]bool `json:"feature_flags"`
	ExternalURL   string          `json:"external_url,omitempty"`
	ClusterName   string          `json:"cluster_name,omitempty"`
}

// BuildStatus is a build's state.
type BuildStatus string

// Build statuses.
const (
	StatusPending   BuildStatus = "pending"
	StatusStarted   BuildStatus = "started"
	StatusSucceeded BuildStatus = "succeeded"
	StatusFailed    BuildStatus = "failed"
	StatusErrored   BuildStatus = "errored"
	StatusAborted   BuildStatus = "aborted"
)

// Finished reports whether the status is final.
func (s BuildStatus) Finished() bool {
	switch s {
	case StatusSucceeded, StatusFailed, StatusErrored, StatusAborted:
		return true
	}
	return false
}

// Build is a build as the API shows it.
type Build struct {
	ID           int64       `json:"id"`
	TeamName     string      `json:"team_name"`
	Name         string      `json:"name"`
	Status       BuildStatus `json:"status"`
	APIURL       string      `json:"api_url"`
	Comment      string      `json:"comment,omitempty"`
	JobName      string      `json:"job_name,omitempty"`
	ResourceName string      `json:"resource_name,omitempty"`
	PipelineID   int         `json:"pipeline_id,omitempty"`
	PipelineName string      `json:"pipeline_name,omitempty"`
	// PipelineInstanceVars tell an instance of an instanced pipeline apart.
	PipelineInstanceVars map[string]any `json:"pipeline_instance_vars,omitempty"`
	StartTime            int64          `json:"start_time,omitempty"`
	EndTime              int64          `json:"end_time,omitempty"`
	ReapTime             int64          `json:"reap_time,omitempty"`
	CreatedBy            *string        `json:"created_by,omitempty"`
}

// BuildAPIURL is a build's api_url.
func BuildAPIURL(id int64) string { return fmt.Sprintf("/api/v1/builds/%d", id) }

// UserInfo is GET /api/v1/user: who a token belongs to.
type UserInfo struct {
	Sub           string              `json:"sub"`
	Name          string              `json:"name"`
	UserID        string              `json:"user_id"`
	UserName      string              `json:"user_name"`
	Email         string              `json:"email"`
	IsAdmin       bool                `json:"is_admin"`
	IsSystem      bool                `json:"is_system"`
	Teams         map[string][]string `json:"teams"`
	Connector     string              `json:"connector"`
	DisplayUserID string              `json:"display_user_id"`
}

// TeamAuth maps a role to its "users" and "groups".
type TeamAuth map[string]map[string][]string

// Team is a team as the API shows it.
type Team struct {
	ID   int      `json:"id,omitempty"`
	Name string   `json:"name,omitempty"`
	Auth TeamAuth `json:"auth,omitempty"`
}

// Container is a step's container; in Porter, a step pod.
type Container struct {
	ID               string         `json:"id"`
	WorkerName       string         `json:"worker_name"`
	State            ContainerState `json:"state,omitempty"`
	Type             string         `json:"type,omitempty"`
	StepName         string         `json:"step_name,omitempty"`
	Attempt          string         `json:"attempt,omitempty"`
	PipelineID       int            `json:"pipeline_id,omitempty"`
	JobID            int            `json:"job_id,omitempty"`
	BuildID          int64          `json:"build_id,omitempty"`
	ResourceID       int            `json:"resource_id,omitempty"`
	PipelineName     string         `json:"pipeline_name,omitempty"`
	JobName          string         `json:"job_name,omitempty"`
	BuildName        string         `json:"build_name,omitempty"`
	ResourceName     string         `json:"resource_name,omitempty"`
	User             string         `json:"user,omitempty"`
	WorkingDirectory string         `json:"working_directory,omitempty"`
	ExpiresIn        string         `json:"expires_in,omitempty"`
	// KeptReason (Porter's): why garbage collection keeps the finished
	// step's pod (latest-check, latest-failed-build, one-off, intercepted,
	// retention).
	KeptReason string `json:"kept_reason,omitempty"`
	// PlanID (Porter's) is the step's plan ID in its build: the web UI
	// marks the steps whose pods wait, declared ahead of their turn.
	PlanID string `json:"plan_id,omitempty"`
}

// ContainerState is a container's state, as fly shows it.
type ContainerState string

// Container states.
const (
	ContainerCreating   ContainerState = "creating"
	ContainerCreated    ContainerState = "created"
	ContainerDestroying ContainerState = "destroying"
	ContainerFailed     ContainerState = "failed"
	// ContainerWaiting is Porter's: a task's pod declared ahead of its
	// turn, waiting for the go-ahead.
	ContainerWaiting ContainerState = "waiting"
)

// WorkerState is a worker's state, as fly shows it.
type WorkerState string

// Worker states.
const (
	WorkerRunning  WorkerState = "running"
	WorkerStalled  WorkerState = "stalled"
	WorkerLanding  WorkerState = "landing"
	WorkerLanded   WorkerState = "landed"
	WorkerRetiring WorkerState = "retiring"
)

// VolumeBaseResourceType names a base resource type of a volume.
type VolumeBaseResourceType struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// VolumeResourceType is the resource type a resource cache volume came from.
type VolumeResourceType struct {
	ResourceType     *VolumeResourceType     `json:"resource_type"`
	BaseResourceType *VolumeBaseResourceType `json:"base_resource_type"`
	Version          map[string]string       `json:"version"`
}

// Volume is a stored artifact, task cache or resource cache; in Porter,
// an object in the blobstore.
type Volume struct {
	ID               string                  `json:"id"`
	WorkerName       string                  `json:"worker_name"`
	Type             string                  `json:"type"`
	ContainerHandle  string                  `json:"container_handle"`
	Path             string                  `json:"path"`
	ParentHandle     string                  `json:"parent_handle"`
	ResourceType     *VolumeResourceType     `json:"resource_type"`
	BaseResourceType *VolumeBaseResourceType `json:"base_resource_type"`
	PipelineID       int                     `json:"pipeline_id"`
	PipelineName     string                  `json:"pipeline_name"`
	// PipelineInstanceVars name the pipeline's instance (null: none).
	PipelineInstanceVars map[string]any `json:"pipeline_instance_vars"`
	JobName              string         `json:"job_name"`
	StepName             string         `json:"step_name"`
}

// WorkerResourceType is a base resource type a worker provides.
type WorkerResourceType struct {
	Type                 string `json:"type"`
	Image                string `json:"image"`
	Version              string `json:"version"`
	Privileged           bool   `json:"privileged"`
	UniqueVersionHistory bool   `json:"unique_version_history"`
}

// Worker is a worker as the API shows it; in Porter, a (cluster, namespace).
type Worker struct {
	GardenAddr       string               `json:"addr"`
	BaggageclaimURL  string               `json:"baggageclaim_url"`
	ActiveContainers int                  `json:"active_containers"`
	ActiveVolumes    int                  `json:"active_volumes"`
	ActiveTasks      int                  `json:"active_tasks"`
	ResourceTypes    []WorkerResourceType `json:"resource_types"`
	Platform         string               `json:"platform"`
	Tags             []string             `json:"tags"`
	Team             string               `json:"team"`
	Name             string               `json:"name"`
	Version          string               `json:"version"`
	StartTime        int64                `json:"start_time"`
	Ephemeral        bool                 `json:"ephemeral"`
	State            WorkerState          `json:"state"`
}

// WorkerArtifact is an artifact uploaded by `fly execute -i` or produced by
// an artifact_output step.
type WorkerArtifact struct {
	ID        int64  `json:"id"`
	Name      string `json:"name"`
	BuildID   int64  `json:"build_id"`
	CreatedAt int64  `json:"created_at"`
}

// HijackProcessSpec is the first message of an intercept session.
type HijackProcessSpec struct {
	Path       string         `json:"path"`
	Args       []string       `json:"args"`
	Env        []string       `json:"env"`
	Dir        string         `json:"dir"`
	Privileged bool           `json:"privileged"`
	User       string         `json:"user"`
	TTY        *HijackTTYSpec `json:"tty"`
}

// HijackTTYSpec asks for a terminal of a size.
type HijackTTYSpec struct {
	WindowSize HijackWindowSize `json:"window_size"`
}

// HijackWindowSize is a terminal's size.
type HijackWindowSize struct {
	Columns uint16 `json:"columns"`
	Rows    uint16 `json:"rows"`
}

// HijackInput is a client message after the process spec.
type HijackInput struct {
	Closed  bool           `json:"closed,omitempty"`
	Stdin   []byte         `json:"stdin,omitempty"`
	TTYSpec *HijackTTYSpec `json:"tty,omitempty"`
}

// HijackOutput is a server message of an intercept session.
type HijackOutput struct {
	Stdout             []byte `json:"stdout,omitempty"`
	Stderr             []byte `json:"stderr,omitempty"`
	Error              string `json:"error,omitempty"`
	ExitStatus         *int   `json:"exit_status,omitempty"`
	ExecutableNotFound bool   `json:"executable_not_found,omitempty"`
}
