package db

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/porter-ci/porter/pkg/db/internal/pg"
)

// Artifact is a blobstore object known to the API: Concourse's worker
// artifacts and Porter's output volumes.
type Artifact struct {
	ID         int64
	TeamID     int
	BuildID    int64 // 0: none
	Name       string
	Key        string // blobstore key
	Digest     string
	Size       int64
	CreateTime time.Time
	WorkerName string
}

const artifactColumns = "id, team_id, coalesce(build_id, 0), name, key, digest, size, create_time, worker_name"

func scanArtifact(row pgx.Row) (Artifact, error) {
	var a Artifact
	err := row.Scan(&a.ID, &a.TeamID, &a.BuildID, &a.Name, &a.Key, &a.Digest, &a.Size, &a.CreateTime, &a.WorkerName)
	return a, err
}

func collectArtifacts(rows pgx.Rows) ([]Artifact, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Artifact, error) { return scanArtifact(r) })
}

// CreateArtifact records an artifact; its ID and CreateTime are assigned here.
func (d *DB) CreateArtifact(ctx context.Context, a Artifact) (Artifact, error) {
	out, err := scanArtifact(d.pool.QueryRow(ctx, `
		INSERT INTO artifacts (team_id, build_id, name, key, digest, size, worker_name)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		RETURNING `+artifactColumns,
		a.TeamID, pg.ZeroNull(a.BuildID), a.Name, a.Key, a.Digest, a.Size, a.WorkerName))
	if err != nil {
		return Artifact{}, pg.Classify(err, "create artifact %s of team %d", a.Key, a.TeamID)
	}
	return out, nil
}

// Artifact looks an artifact up by id.
func (d *DB) Artifact(ctx context.Context, id int64) (Artifact, error) {
	a, err := scanArtifact(d.pool.QueryRow(ctx, "SELECT "+artifactColumns+" FROM artifacts WHERE id = $1", id))
	if err != nil {
		return Artifact{}, pg.Classify(err, "artifact %d", id)
	}
	return a, nil
}

// BuildArtifacts lists a build's artifacts in creation order.
func (d *DB) BuildArtifacts(ctx context.Context, buildID int64) ([]Artifact, error) {
	rows, err := d.pool.Query(ctx, "SELECT "+artifactColumns+" FROM artifacts WHERE build_id = $1 ORDER BY id", buildID)
	if err != nil {
		return nil, fmt.Errorf("artifacts of build %d: %w", buildID, err)
	}
	as, err := collectArtifacts(rows)
	if err != nil {
		return nil, fmt.Errorf("artifacts of build %d: %w", buildID, err)
	}
	return as, nil
}

// Artifacts lists the artifacts of a team (0: every team) in creation order.
func (d *DB) Artifacts(ctx context.Context, teamID int) ([]Artifact, error) {
	rows, err := d.pool.Query(ctx, "SELECT "+artifactColumns+" FROM artifacts WHERE $1 = 0 OR team_id = $1 ORDER BY id", teamID)
	if err != nil {
		return nil, fmt.Errorf("artifacts of team %d: %w", teamID, err)
	}
	as, err := collectArtifacts(rows)
	if err != nil {
		return nil, fmt.Errorf("artifacts of team %d: %w", teamID, err)
	}
	return as, nil
}
