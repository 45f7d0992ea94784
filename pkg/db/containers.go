package db

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db/internal/pg"
)

// Container is a step pod as Concourse's API shows it.
type Container struct {
	Handle           string // a UUID
	TeamID           int    // 0: none
	BuildID          int64  // 0: none
	BuildName        string
	PlanID           string
	StepName         string
	Type             concourse.StepKind // task, get, put, check
	WorkerName       string
	Namespace        string
	PodName          string
	StepID           string
	State            concourse.ContainerState
	WorkingDirectory string
	User             string
	CreateTime       time.Time
	// Where its build belongs (Containers fills them): a job's build's
	// pipeline and job, a check's pipeline and resource.
	PipelineID                      int64
	PipelineName, JobName, Resource string
	JobID                           int64
	// KeptReason says why GC keeps the finished step's pod ('' while the
	// step runs, or before GC's first pass over it).
	KeptReason string
}

const containerColumns = `handle, coalesce(team_id, 0), coalesce(build_id, 0), build_name, plan_id,
	step_name, type, worker_name, namespace, pod_name, step_id, state, working_directory, "user", create_time, kept_reason`

func scanContainer(row pgx.Row) (Container, error) {
	var c Container
	err := row.Scan(&c.Handle, &c.TeamID, &c.BuildID, &c.BuildName, &c.PlanID, &c.StepName, &c.Type,
		&c.WorkerName, &c.Namespace, &c.PodName, &c.StepID, &c.State, &c.WorkingDirectory, &c.User, &c.CreateTime, &c.KeptReason)
	return c, err
}

// CreateContainer records a container; an empty Handle gets a new UUID, an
// empty State is "creating". A handle in use is ErrConflict.
func (d *DB) CreateContainer(ctx context.Context, c Container) (Container, error) {
	if c.State == "" {
		c.State = "creating"
	}
	out, err := scanContainer(d.pool.QueryRow(ctx, `
		INSERT INTO containers (handle, team_id, build_id, build_name, plan_id, step_name, type,
			worker_name, namespace, pod_name, step_id, state, working_directory, "user")
		VALUES (coalesce(nullif($1, ''), gen_random_uuid()::text), $2, $3, $4, $5, $6, $7,
			$8, $9, $10, $11, $12, $13, $14)
		RETURNING `+containerColumns,
		c.Handle, pg.ZeroNull(c.TeamID), pg.ZeroNull(c.BuildID), c.BuildName, c.PlanID, c.StepName, c.Type,
		c.WorkerName, c.Namespace, c.PodName, c.StepID, c.State, c.WorkingDirectory, c.User))
	if err != nil {
		return Container{}, pg.Classify(err, "create container %s (%s %s of build %d)", c.Handle, c.Type, c.StepName, c.BuildID)
	}
	return out, nil
}

// SetContainerState moves a container to state (creating, created, destroying).
func (d *DB) SetContainerState(ctx context.Context, handle string, state concourse.ContainerState) error {
	tag, err := d.pool.Exec(ctx, "UPDATE containers SET state = $2 WHERE handle = $1", handle, state)
	if err != nil {
		return fmt.Errorf("set container %s %s: %w", handle, state, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("set container %s %s: %w", handle, state, ErrNotFound)
	}
	return nil
}

// Container looks a container up by handle.
func (d *DB) Container(ctx context.Context, handle string) (Container, error) {
	c, err := scanContainer(d.pool.QueryRow(ctx, "SELECT "+containerColumns+" FROM containers WHERE handle = $1", handle))
	if err != nil {
		return Container{}, pg.Classify(err, "container %s", handle)
	}
	return c, nil
}

// ContainerFilter selects containers; zero fields match everything.
type ContainerFilter struct {
	TeamID   int
	BuildID  int64
	StepName string
	Type     string
	PlanID   string
	// Where the container's build belongs (fly intercept -j P/J, --check).
	PipelineName, JobName, BuildName, ResourceName string
	// InstanceVars name the instance of PipelineName (none: the pipeline
	// that is no instance), as in Concourse.
	InstanceVars map[string]any
}

// Containers lists the containers that match f, oldest first, with
// where their builds belong.
func (d *DB) Containers(ctx context.Context, f ContainerFilter) ([]Container, error) {
	instanceVars, err := instanceVarsJSON(f.InstanceVars)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	rows, err := d.pool.Query(ctx, "SELECT "+containerColumns+`, pipeline_id, pipeline_name, job_id, job_name, resource_name FROM (
			SELECT containers.*, COALESCE(b.pipeline_id, 0) AS pipeline_id, COALESCE(p.name, '') AS pipeline_name,
				COALESCE(p.instance_vars, '{}') AS pipeline_instance_vars, COALESCE(b.job_id, 0) AS job_id, COALESCE(j.name, '') AS job_name, COALESCE(r.name, '') AS resource_name
			FROM containers LEFT JOIN builds b ON b.id = containers.build_id
				LEFT JOIN pipelines p ON p.id = b.pipeline_id LEFT JOIN jobs j ON j.id = b.job_id
				LEFT JOIN resources r ON r.id = b.resource_id) c
		WHERE ($1 = 0 OR team_id = $1)
		  AND ($2 = 0 OR build_id = $2)
		  AND ($3 = '' OR step_name = $3)
		  AND ($4 = '' OR type = $4)
		  AND ($5 = '' OR plan_id = $5)
		  AND ($6 = '' OR (pipeline_name = $6 AND pipeline_instance_vars = $10::jsonb))
		  AND ($7 = '' OR job_name = $7)
		  AND ($8 = '' OR build_name = $8)
		  AND ($9 = '' OR resource_name = $9)
		ORDER BY create_time, handle`,
		f.TeamID, f.BuildID, f.StepName, f.Type, f.PlanID, f.PipelineName, f.JobName, f.BuildName, f.ResourceName, instanceVars)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Container, error) {
		var c Container
		err := r.Scan(&c.Handle, &c.TeamID, &c.BuildID, &c.BuildName, &c.PlanID, &c.StepName, &c.Type,
			&c.WorkerName, &c.Namespace, &c.PodName, &c.StepID, &c.State, &c.WorkingDirectory, &c.User, &c.CreateTime, &c.KeptReason,
			&c.PipelineID, &c.PipelineName, &c.JobID, &c.JobName, &c.Resource)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	return cs, nil
}

// DeleteContainer forgets a container (its pod is gone).
func (d *DB) DeleteContainer(ctx context.Context, handle string) error {
	tag, err := d.pool.Exec(ctx, "DELETE FROM containers WHERE handle = $1", handle)
	if err != nil {
		return fmt.Errorf("delete container %s: %w", handle, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("delete container %s: %w", handle, ErrNotFound)
	}
	return nil
}
