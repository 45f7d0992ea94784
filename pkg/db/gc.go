package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The queries of the garbage collector (pkg/gc).

// unfinished is the SQL condition of a build that is still running.
const unfinished = "status IN ('pending', 'started')"

// ExpiredArtifacts lists the artifact records created before cutoff whose
// build is gone, is none (an upload) or finished before cutoff.
func (d *DB) ExpiredArtifacts(ctx context.Context, cutoff time.Time) ([]Artifact, error) {
	rows, err := d.pool.Query(ctx, "SELECT "+artifactColumns+` FROM artifacts WHERE id IN (
		SELECT a.id FROM artifacts a LEFT JOIN builds b ON b.id = a.build_id WHERE `+artifactExpired+`)
		ORDER BY id`, cutoff)
	if err != nil {
		return nil, fmt.Errorf("list the expired artifacts: %w", err)
	}
	as, err := collectArtifacts(rows)
	if err != nil {
		return nil, fmt.Errorf("list the expired artifacts: %w", err)
	}
	return as, nil
}

// artifactExpired is the condition on artifacts a LEFT JOIN builds b ($1:
// the cutoff) under which a record may go, unless a build's plan names it
// (artifactInUse).
const artifactExpired = `a.create_time < $1 AND (b.id IS NULL OR (NOT b.` + unfinished + ` AND b.end_time < $1))`

// artifactInUse ($1: the cutoff): the plan of a build that is running, or
// that ended within the retention, takes the artifact as an input (`fly
// execute -i`), whatever its age. An upload has no build of its own, so
// without the second half it would go at the first pass after the build
// using it ended, before the retention that a build's outputs get.
const artifactInUse = `EXISTS (SELECT 1 FROM builds r WHERE (r.` + unfinished + ` OR r.end_time >= $1)
	AND r.plan IS NOT NULL
	AND jsonb_path_exists(r.plan, '$.**.artifact_id ? (@ == $id)', jsonb_build_object('id', a.id)))`

// DeleteExpiredArtifact removes artifact record id if it is still expired
// at cutoff and no running build uses it. It reports whether it did, and
// whether the blob under its key is still referenced by something else
// (another record, a resource cache, a recent build's step outputs), all
// read in one transaction with the delete.
//
// The record goes before its blob (the caller deletes the blob after this
// commits, and only if nothing references the key): a record without its
// blob would be a volume `fly volumes` shows and a build cannot read,
// whereas a blob without a record is mere garbage that the next pass's
// sweep of artifacts/ collects. A build created after this commit that
// names the id fails cleanly with "artifact not found" instead of reading
// a half-deleted artifact.
func (d *DB) DeleteExpiredArtifact(ctx context.Context, id int64, cutoff time.Time) (deleted, keyReferenced bool, err error) {
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		var key string
		err := tx.QueryRow(ctx, `DELETE FROM artifacts WHERE id = $2 AND id IN (
			SELECT a.id FROM artifacts a LEFT JOIN builds b ON b.id = a.build_id
			WHERE a.id = $2 AND `+artifactExpired+` AND NOT `+artifactInUse+`)
			RETURNING key`, cutoff, id).Scan(&key)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		deleted = true
		keyReferenced, err = keyReferencedIn(ctx, tx, key, cutoff)
		return err
	})
	if err != nil {
		return false, false, fmt.Errorf("delete expired artifact %d: %w", id, err)
	}
	return deleted, keyReferenced, nil
}

// ArtifactKeyReferenced reports whether anything still references the
// blob key: an artifact record, a resource cache, or the step outputs of
// a build that is running or finished at or after cutoff.
func (d *DB) ArtifactKeyReferenced(ctx context.Context, key string, cutoff time.Time) (bool, error) {
	ok, err := keyReferencedIn(ctx, d.pool, key, cutoff)
	if err != nil {
		return false, fmt.Errorf("look up the references to %s: %w", key, err)
	}
	return ok, nil
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func keyReferencedIn(ctx context.Context, q querier, key string, cutoff time.Time) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM artifacts WHERE key = $1)
		OR EXISTS (SELECT 1 FROM resource_caches WHERE artifact = $1)
		OR EXISTS (SELECT 1 FROM builds WHERE (`+unfinished+` OR end_time >= $2) AND state IS NOT NULL
			AND jsonb_path_exists(state, '$.steps.*.outputs.*.key ? (@ == $k)', jsonb_build_object('k', $1::text)))`,
		key, cutoff).Scan(&ok)
	return ok, err
}

// ReferencedArtifactKeys is every blob key ArtifactKeyReferenced would
// report, read at once for a sweep of the artifacts/ prefix.
func (d *DB) ReferencedArtifactKeys(ctx context.Context, cutoff time.Time) (map[string]bool, error) {
	rows, err := d.pool.Query(ctx, `SELECT key FROM artifacts
		UNION SELECT artifact FROM resource_caches
		UNION SELECT jsonb_path_query(state, '$.steps.*.outputs.*.key') #>> '{}' FROM builds
			WHERE (`+unfinished+` OR end_time >= $1) AND state IS NOT NULL`, cutoff)
	if err != nil {
		return nil, fmt.Errorf("list the referenced artifact keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list the referenced artifact keys: %w", err)
	}
	out := make(map[string]bool, len(keys))
	for _, k := range keys {
		out[k] = true
	}
	return out, nil
}

// DeleteExpiredResourceCaches forgets the resource caches last used before
// cutoff, except a pinned version's (pinned through the API or in the
// pipeline's config) and those a running build's get took: the next get
// of such a version fetches it again. It says how many went. A get reads
// its cache with ResourceCache, which marks it used, so a cache being
// taken now is never past the cutoff.
func (d *DB) DeleteExpiredResourceCaches(ctx context.Context, cutoff time.Time) (int64, error) {
	tag, err := d.pool.Exec(ctx, `DELETE FROM resource_caches rc WHERE rc.last_used < $1
		AND NOT EXISTS (SELECT 1 FROM resources r WHERE r.id = rc.resource_id
			AND (r.api_pinned_version = rc.version OR r.config->'version' = rc.version))
		AND NOT EXISTS (SELECT 1 FROM builds b WHERE b.`+unfinished+` AND b.state IS NOT NULL
			AND jsonb_path_exists(b.state, '$.steps.*.cache_key ? (@ == $k)', jsonb_build_object('k', rc.key)))`, cutoff)
	if err != nil {
		return 0, fmt.Errorf("delete the expired resource caches: %w", err)
	}
	return tag.RowsAffected(), nil
}

// UnreferencedEventObjects lists up to limit build log objects (chunks or
// segments) that lost their last index row: their builds were deleted, or
// a retried chunk moved to another segment. Noted keys a row still names
// (another build's chunk in the same segment) are forgotten first; the
// trigger notes them again when that row goes.
func (d *DB) UnreferencedEventObjects(ctx context.Context, limit int) ([]string, error) {
	if _, err := d.pool.Exec(ctx, `DELETE FROM unreferenced_event_objects u
		WHERE EXISTS (SELECT 1 FROM build_event_chunks c WHERE c.key = u.key)`); err != nil {
		return nil, fmt.Errorf("forget the build log objects still indexed: %w", err)
	}
	rows, err := d.pool.Query(ctx, `SELECT key FROM unreferenced_event_objects ORDER BY noted_at, key LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("list the unreferenced build log objects: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list the unreferenced build log objects: %w", err)
	}
	return keys, nil
}

// ForgetEventObject drops the note of a build log object the collector
// deleted (or found already gone).
func (d *DB) ForgetEventObject(ctx context.Context, key string) error {
	if _, err := d.pool.Exec(ctx, `DELETE FROM unreferenced_event_objects WHERE key = $1`, key); err != nil {
		return fmt.Errorf("forget build log object %s: %w", key, err)
	}
	return nil
}
