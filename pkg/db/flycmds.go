package db

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// TeamUnfinishedBuilds lists the ids of a team's pending and started
// builds (one-off, job and check builds).
func (d *DB) TeamUnfinishedBuilds(ctx context.Context, teamID int) ([]int64, error) {
	rows, err := d.pool.Query(ctx, `
		SELECT id FROM builds WHERE team_id = $1 AND status IN ('pending', 'started') ORDER BY id`, teamID)
	if err != nil {
		return nil, fmt.Errorf("unfinished builds of team %d: %w", teamID, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("unfinished builds of team %d: %w", teamID, err)
	}
	return ids, nil
}

// DeleteTeam deletes a team with its pipelines, builds, containers' and
// artifacts' records and resource caches' records.
func (d *DB) DeleteTeam(ctx context.Context, id int) error {
	return d.execOne(ctx, fmt.Sprintf("delete team %d", id), "DELETE FROM teams WHERE id = $1", id)
}

// RenameTeam renames a team; a name another team has is ErrConflict.
func (d *DB) RenameTeam(ctx context.Context, id int, name string) error {
	return d.execOne(ctx, fmt.Sprintf("rename team %d to %s", id, name), "UPDATE teams SET name = $2 WHERE id = $1", id, name)
}

// ArchivePipeline archives a pipeline: it is paused (by by, unless it was
// already) until set again.
func (d *DB) ArchivePipeline(ctx context.Context, id int64, by string) error {
	return d.execOne(ctx, fmt.Sprintf("archive pipeline %d", id), `
		UPDATE pipelines SET archived = true, paused = true,
			paused_by = CASE WHEN paused THEN paused_by ELSE $2 END,
			paused_at = CASE WHEN paused THEN paused_at ELSE now() END,
			last_updated = now()
		WHERE id = $1`, id, by)
}

// ClearResourceVersions deletes every version of a resource (with the
// builds' records of using them), and says how many.
func (d *DB) ClearResourceVersions(ctx context.Context, resourceID int64) (int64, error) {
	tag, err := d.pool.Exec(ctx, `DELETE FROM resource_versions WHERE resource_id = $1`, resourceID)
	if err != nil {
		return 0, fmt.Errorf("clear the versions of resource %d: %w", resourceID, err)
	}
	return tag.RowsAffected(), nil
}

// DeleteResourceVersionCaches deletes the caches of one version of a
// resource (the version exactly, as Concourse matches it), and says how many.
func (d *DB) DeleteResourceVersionCaches(ctx context.Context, resourceID int64, version map[string]string) (int64, error) {
	tag, err := d.pool.Exec(ctx, "DELETE FROM resource_caches WHERE resource_id = $1 AND version = $2::jsonb", resourceID, version)
	if err != nil {
		return 0, fmt.Errorf("delete the caches of a version of resource %d: %w", resourceID, err)
	}
	return tag.RowsAffected(), nil
}
