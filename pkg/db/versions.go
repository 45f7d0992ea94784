package db

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db/internal/pg"
)

// ResourceRef is what the scheduler, the checker and the version routes
// need of a pipeline's resource.
type ResourceRef struct {
	ID           int64
	PipelineID   int64
	PipelineName string
	TeamID       int
	TeamName     string
	Name         string
	Type         string
	Config       json.RawMessage // concourse.ResourceConfig
	ConfigHash   string
	Active       bool
	// PipelinePaused: a paused pipeline's resources are not checked.
	PipelinePaused bool

	CheckError       string
	LastCheckStart   time.Time // zero when never
	LastCheckEnd     time.Time
	LastCheckBuild   int64 // 0 when never
	NextCheck        time.Time
	CheckRequested   bool
	CheckFromVersion map[string]string
	APIPinnedVersion map[string]string // nil when not pinned through the API
	PinComment       string
}

const resourceRefColumns = `r.id, r.pipeline_id, p.name, p.team_id, t.name, r.name, r.type, r.config, r.config_hash,
	r.active, p.paused, r.check_error, r.last_check_start, r.last_check_end, r.last_check_build, r.next_check,
	r.check_requested, r.check_from_version, r.api_pinned_version, r.pin_comment`

const resourceRefFrom = ` FROM resources r JOIN pipelines p ON p.id = r.pipeline_id JOIN teams t ON t.id = p.team_id `

func scanResourceRef(row pgx.Row) (ResourceRef, error) {
	var r ResourceRef
	var start, end *time.Time
	var lastBuild *int64
	var from, pinned []byte
	err := row.Scan(&r.ID, &r.PipelineID, &r.PipelineName, &r.TeamID, &r.TeamName, &r.Name, &r.Type, &r.Config, &r.ConfigHash,
		&r.Active, &r.PipelinePaused, &r.CheckError, &start, &end, &lastBuild, &r.NextCheck,
		&r.CheckRequested, &from, &pinned, &r.PinComment)
	if err != nil {
		return ResourceRef{}, err
	}
	r.LastCheckStart, r.LastCheckEnd = pg.NullTime(start), pg.NullTime(end)
	if lastBuild != nil {
		r.LastCheckBuild = *lastBuild
	}
	if r.CheckFromVersion, err = decodeVersion(from); err != nil {
		return ResourceRef{}, fmt.Errorf("resource %s: check_from_version: %w", r.Name, err)
	}
	if r.APIPinnedVersion, err = decodeVersion(pinned); err != nil {
		return ResourceRef{}, fmt.Errorf("resource %s: api_pinned_version: %w", r.Name, err)
	}
	return r, nil
}

func decodeVersion(b []byte) (map[string]string, error) {
	if len(b) == 0 || string(b) == "null" {
		return nil, nil
	}
	var v map[string]string
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return v, nil
}

// LookupResource finds an active resource of a team's pipeline by name.
func (d *DB) LookupResource(ctx context.Context, teamID int, pipeline, resource string) (ResourceRef, error) {
	r, err := scanResourceRef(d.pool.QueryRow(ctx, "SELECT "+resourceRefColumns+resourceRefFrom+`
		WHERE p.team_id = $1 AND p.name = $2 AND r.name = $3 AND r.active`, teamID, pipeline, resource))
	if err != nil {
		return ResourceRef{}, pg.Classify(err, "resource %s/%s", pipeline, resource)
	}
	return r, nil
}

// LookupPipelineResource finds an active resource of a pipeline (an
// instance of an instanced pipeline, say) by name.
func (d *DB) LookupPipelineResource(ctx context.Context, pipelineID int64, resource string) (ResourceRef, error) {
	r, err := scanResourceRef(d.pool.QueryRow(ctx, "SELECT "+resourceRefColumns+resourceRefFrom+`
		WHERE r.pipeline_id = $1 AND r.name = $2 AND r.active`, pipelineID, resource))
	if err != nil {
		return ResourceRef{}, pg.Classify(err, "resource %s of pipeline %d", resource, pipelineID)
	}
	return r, nil
}

// ResourceByID looks a resource up by id.
func (d *DB) ResourceByID(ctx context.Context, id int64) (ResourceRef, error) {
	r, err := scanResourceRef(d.pool.QueryRow(ctx, "SELECT "+resourceRefColumns+resourceRefFrom+"WHERE r.id = $1", id))
	if err != nil {
		return ResourceRef{}, pg.Classify(err, "resource %d", id)
	}
	return r, nil
}

// PipelineResources lists the active resources of a pipeline.
func (d *DB) PipelineResources(ctx context.Context, pipelineID int64) ([]ResourceRef, error) {
	rows, err := d.pool.Query(ctx, "SELECT "+resourceRefColumns+resourceRefFrom+"WHERE r.pipeline_id = $1 AND r.active ORDER BY r.id", pipelineID)
	if err != nil {
		return nil, fmt.Errorf("resources of pipeline %d: %w", pipelineID, err)
	}
	rs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ResourceRef, error) { return scanResourceRef(r) })
	if err != nil {
		return nil, fmt.Errorf("resources of pipeline %d: %w", pipelineID, err)
	}
	return rs, nil
}

// ResourcesToCheck lists the active resources of unpaused pipelines whose
// periodic check is due or that someone asked to check, and whose last
// check build has ended.
func (d *DB) ResourcesToCheck(ctx context.Context, now time.Time) ([]ResourceRef, error) {
	rows, err := d.pool.Query(ctx, "SELECT "+resourceRefColumns+resourceRefFrom+`
		LEFT JOIN builds lb ON lb.id = r.last_check_build
		WHERE r.active AND NOT p.paused AND (r.next_check <= $1 OR r.check_requested)
		  AND (lb.id IS NULL OR lb.status NOT IN ('pending', 'started'))
		ORDER BY r.next_check`, now)
	if err != nil {
		return nil, fmt.Errorf("resources to check: %w", err)
	}
	rs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ResourceRef, error) { return scanResourceRef(r) })
	if err != nil {
		return nil, fmt.Errorf("resources to check: %w", err)
	}
	return rs, nil
}

// RequestCheck asks for an immediate check of the resource, from a version
// (nil: from the latest).
func (d *DB) RequestCheck(ctx context.Context, resourceID int64, from map[string]string) error {
	tag, err := d.pool.Exec(ctx, `
		UPDATE resources SET check_requested = true, check_from_version = $2::jsonb WHERE id = $1`,
		resourceID, versionArg(from))
	if err != nil {
		return fmt.Errorf("request a check of resource %d: %w", resourceID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("request a check of resource %d: %w", resourceID, ErrNotFound)
	}
	return nil
}

// CheckStarted records a check build of the resource: the request it
// answers is cleared and the next periodic check is due at next.
func (d *DB) CheckStarted(ctx context.Context, resourceID, buildID int64, at, next time.Time) error {
	_, err := d.pool.Exec(ctx, `
		UPDATE resources SET last_check_build = $2, last_check_start = $3, next_check = $4,
			check_requested = false, check_from_version = NULL
		WHERE id = $1`, resourceID, pg.ZeroNull(buildID), at, next)
	if err != nil {
		return fmt.Errorf("record the check of resource %d: %w", resourceID, err)
	}
	return nil
}

// PipelineConfigOf is a pipeline's config (concourse.Config as JSON).
func (d *DB) PipelineConfigOf(ctx context.Context, pipelineID int64) (json.RawMessage, error) {
	var cfg []byte
	if err := d.pool.QueryRow(ctx, "SELECT config FROM pipelines WHERE id = $1", pipelineID).Scan(&cfg); err != nil {
		return nil, pg.Classify(err, "pipeline %d", pipelineID)
	}
	return cfg, nil
}

// CheckFinished records the end of a check: checkErr is empty when it
// succeeded.
func (d *DB) CheckFinished(ctx context.Context, resourceID int64, at time.Time, checkErr string) error {
	_, err := d.pool.Exec(ctx, `
		UPDATE resources SET last_check_end = $2, check_error = $3 WHERE id = $1`, resourceID, at, checkErr)
	if err != nil {
		return fmt.Errorf("record the end of the check of resource %d: %w", resourceID, err)
	}
	return nil
}

// CreateCheckBuild records a started check build of a resource (Concourse
// names them "check"), running on server.
func (d *DB) CreateCheckBuild(ctx context.Context, r ResourceRef, plan json.RawMessage, server string, at time.Time) (JobBuild, error) {
	var id int64
	err := d.pool.QueryRow(ctx, `
		INSERT INTO builds (team_id, name, status, plan, server, pipeline_id, resource_id, start_time, inputs_ready)
		VALUES ($1, 'check', 'started', $2::jsonb, $3, $4, $5, $6, true)
		RETURNING id`, r.TeamID, pg.JSONArg(plan), server, r.PipelineID, r.ID, at).Scan(&id)
	if err != nil {
		return JobBuild{}, pg.Classify(err, "create a check build of resource %s", r.Name)
	}
	return d.JobBuildByID(ctx, id)
}

// Version is one saved version of a resource.
type Version struct {
	ID         int64
	ResourceID int64
	Version    map[string]string
	Metadata   []concourse.MetadataField
	Enabled    bool
	CheckOrder int64
	CreateTime time.Time
}

// NewVersion is a version as a check, get or put reports it.
type NewVersion struct {
	Version  map[string]string
	Metadata []concourse.MetadataField
}

const versionColumns = "v.id, v.resource_id, v.version, v.metadata, v.enabled, v.check_order, v.create_time"

func scanVersion(row pgx.Row) (Version, error) {
	var v Version
	var version, meta []byte
	if err := row.Scan(&v.ID, &v.ResourceID, &version, &meta, &v.Enabled, &v.CheckOrder, &v.CreateTime); err != nil {
		return Version{}, err
	}
	if err := json.Unmarshal(version, &v.Version); err != nil {
		return Version{}, fmt.Errorf("version %d: decode: %w", v.ID, err)
	}
	if len(meta) > 0 && string(meta) != "null" {
		if err := json.Unmarshal(meta, &v.Metadata); err != nil {
			return Version{}, fmt.Errorf("version %d: decode metadata: %w", v.ID, err)
		}
	}
	return v, nil
}

func collectVersions(rows pgx.Rows) ([]Version, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Version, error) { return scanVersion(r) })
}

// VersionHash is the sha256 of a version's canonical JSON (encoding/json
// writes map keys sorted, so equal versions hash equally).
func VersionHash(v map[string]string) string {
	b, _ := json.Marshal(v) // a map of strings always encodes
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func versionArg(v map[string]string) any {
	if v == nil {
		return nil
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// SaveVersions saves what a check of the resource reported, oldest first,
// under the resource's current config hash. A version saved before keeps
// its id; one that is not already the newest becomes the newest again (a
// check's order wins, as in Concourse). It returns how many versions were
// new or moved, so the caller knows whether to wake the scheduler.
func (d *DB) SaveVersions(ctx context.Context, resourceID int64, versions []NewVersion) (changed int, err error) {
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		var hash string
		// The row lock serialises savers of one resource, so check orders
		// stay unique and increasing.
		if err := tx.QueryRow(ctx, "SELECT config_hash FROM resources WHERE id = $1 FOR UPDATE", resourceID).Scan(&hash); err != nil {
			return pg.Classify(err, "resource %d", resourceID)
		}
		var top int64
		var topID *int64
		if err := tx.QueryRow(ctx, `
			SELECT COALESCE(MAX(check_order), 0), (SELECT id FROM resource_versions
				WHERE resource_id = $1 AND config_hash = $2 ORDER BY check_order DESC LIMIT 1)
			FROM resource_versions WHERE resource_id = $1 AND config_hash = $2`, resourceID, hash).Scan(&top, &topID); err != nil {
			return err
		}
		for _, v := range versions {
			if v.Version == nil {
				return fmt.Errorf("a version must be an object of strings, not null")
			}
			meta, err := json.Marshal(nonNilMetadata(v.Metadata))
			if err != nil {
				return fmt.Errorf("encode metadata: %w", err)
			}
			var id int64
			var inserted bool
			err = tx.QueryRow(ctx, `
				INSERT INTO resource_versions (resource_id, config_hash, version, version_hash, metadata, check_order)
				VALUES ($1, $2, $3::jsonb, $4, $5::jsonb, $6)
				ON CONFLICT (resource_id, config_hash, version_hash) DO UPDATE
					SET metadata = CASE WHEN excluded.metadata = '[]'::jsonb THEN resource_versions.metadata ELSE excluded.metadata END
				RETURNING id, (xmax = 0)`,
				resourceID, hash, versionArg(v.Version), VersionHash(v.Version), string(meta), top+1).Scan(&id, &inserted)
			if err != nil {
				return fmt.Errorf("save version %v: %w", v.Version, err)
			}
			if topID != nil && *topID == id {
				continue // already the newest
			}
			if !inserted {
				if _, err := tx.Exec(ctx, "UPDATE resource_versions SET check_order = $2 WHERE id = $1", id, top+1); err != nil {
					return fmt.Errorf("reorder version %v: %w", v.Version, err)
				}
			}
			top, topID = top+1, &id
			changed++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("save versions of resource %d: %w", resourceID, err)
	}
	return changed, nil
}

func nonNilMetadata(m []concourse.MetadataField) []concourse.MetadataField {
	if m == nil {
		return []concourse.MetadataField{}
	}
	return m
}

// VersionPage selects versions, newest first, as Concourse pages them:
// From and To are version ids (inclusive bounds in the check order).
type VersionPage struct {
	Limit  int // 0: 100
	From   int64
	To     int64
	Filter map[string]string // versions containing these fields
}

// Versions lists the resource's versions under its current config hash.
// hasOlder and hasNewer say whether more versions lie beyond the page.
func (d *DB) Versions(ctx context.Context, resourceID int64, p VersionPage) (vs []Version, hasOlder, hasNewer bool, err error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	// One more row says whether an older page exists: that one must not
	// overflow into a negative LIMIT (limit=MaxInt answered 500).
	limit = min(limit, math.MaxInt32)
	order := "DESC"
	if p.From != 0 && p.To == 0 {
		order = "ASC" // the page right after From, towards the newest
	}
	rows, err := d.pool.Query(ctx, "SELECT "+versionColumns+` FROM resource_versions v JOIN resources r ON r.id = v.resource_id
		WHERE v.resource_id = $1 AND v.config_hash = r.config_hash
		  AND ($2::bigint = 0 OR v.check_order >= (SELECT check_order FROM resource_versions WHERE id = $2::bigint))
		  AND ($3::bigint = 0 OR v.check_order <= (SELECT check_order FROM resource_versions WHERE id = $3::bigint))
		  AND ($4::jsonb IS NULL OR v.version @> $4::jsonb)
		ORDER BY v.check_order `+order+" LIMIT $5",
		resourceID, p.From, p.To, versionArg(p.Filter), limit+1)
	if err != nil {
		return nil, false, false, fmt.Errorf("versions of resource %d: %w", resourceID, err)
	}
	vs, err = collectVersions(rows)
	if err != nil {
		return nil, false, false, fmt.Errorf("versions of resource %d: %w", resourceID, err)
	}
	more := len(vs) > limit
	if more {
		vs = vs[:limit]
	}
	if order == "ASC" {
		slices.Reverse(vs)
		hasNewer, hasOlder = more, true
	} else {
		hasOlder, hasNewer = more, p.To != 0
	}
	if len(vs) == 0 {
		hasOlder, hasNewer = false, false
	}
	return vs, hasOlder, hasNewer, nil
}

// VersionByID finds one of the resource's versions.
func (d *DB) VersionByID(ctx context.Context, resourceID, versionID int64) (Version, error) {
	v, err := scanVersion(d.pool.QueryRow(ctx, "SELECT "+versionColumns+" FROM resource_versions v WHERE v.id = $1 AND v.resource_id = $2", versionID, resourceID))
	if err != nil {
		return Version{}, pg.Classify(err, "version %d of resource %d", versionID, resourceID)
	}
	return v, nil
}

// FindVersion finds a version of the resource under its current config
// hash by its exact content.
func (d *DB) FindVersion(ctx context.Context, resourceID int64, version map[string]string) (Version, error) {
	v, err := scanVersion(d.pool.QueryRow(ctx, "SELECT "+versionColumns+` FROM resource_versions v JOIN resources r ON r.id = v.resource_id
		WHERE v.resource_id = $1 AND v.config_hash = r.config_hash AND v.version_hash = $2`, resourceID, VersionHash(version)))
	if err != nil {
		return Version{}, pg.Classify(err, "version %v of resource %d", version, resourceID)
	}
	return v, nil
}

// LatestVersion is the resource's newest enabled version; ErrNotFound when
// it has none.
func (d *DB) LatestVersion(ctx context.Context, resourceID int64) (Version, error) {
	v, err := scanVersion(d.pool.QueryRow(ctx, "SELECT "+versionColumns+` FROM resource_versions v JOIN resources r ON r.id = v.resource_id
		WHERE v.resource_id = $1 AND v.config_hash = r.config_hash AND v.enabled
		ORDER BY v.check_order DESC LIMIT 1`, resourceID))
	if err != nil {
		return Version{}, pg.Classify(err, "latest version of resource %d", resourceID)
	}
	return v, nil
}

// EnabledVersions lists the resource's enabled versions under its current
// config hash, newest first: the candidates of input selection.
func (d *DB) EnabledVersions(ctx context.Context, resourceID int64) ([]Version, error) {
	rows, err := d.pool.Query(ctx, "SELECT "+versionColumns+` FROM resource_versions v JOIN resources r ON r.id = v.resource_id
		WHERE v.resource_id = $1 AND v.config_hash = r.config_hash AND v.enabled
		ORDER BY v.check_order DESC`, resourceID)
	if err != nil {
		return nil, fmt.Errorf("versions of resource %d: %w", resourceID, err)
	}
	vs, err := collectVersions(rows)
	if err != nil {
		return nil, fmt.Errorf("versions of resource %d: %w", resourceID, err)
	}
	return vs, nil
}

// SetVersionEnabled enables or disables one of the resource's versions.
func (d *DB) SetVersionEnabled(ctx context.Context, resourceID, versionID int64, enabled bool) error {
	tag, err := d.pool.Exec(ctx, "UPDATE resource_versions SET enabled = $3 WHERE id = $1 AND resource_id = $2", versionID, resourceID, enabled)
	if err != nil {
		return fmt.Errorf("enable version %d of resource %d: %w", versionID, resourceID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("version %d of resource %d: %w", versionID, resourceID, ErrNotFound)
	}
	return nil
}

// PinVersion pins the resource to one of its versions through the API.
func (d *DB) PinVersion(ctx context.Context, resourceID, versionID int64) error {
	tag, err := d.pool.Exec(ctx, `
		UPDATE resources r SET api_pinned_version = v.version
		FROM resource_versions v WHERE r.id = $1 AND v.id = $2 AND v.resource_id = r.id`, resourceID, versionID)
	if err != nil {
		return fmt.Errorf("pin resource %d to version %d: %w", resourceID, versionID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("pin resource %d: version %d: %w", resourceID, versionID, ErrNotFound)
	}
	return nil
}

// UnpinResource removes the API pin and its comment.
func (d *DB) UnpinResource(ctx context.Context, resourceID int64) error {
	tag, err := d.pool.Exec(ctx, "UPDATE resources SET api_pinned_version = NULL, pin_comment = '' WHERE id = $1", resourceID)
	if err != nil {
		return fmt.Errorf("unpin resource %d: %w", resourceID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("unpin resource %d: %w", resourceID, ErrNotFound)
	}
	return nil
}

// SetPinComment sets the comment of a pinned resource; ErrNotFound when it
// is not pinned through the API.
func (d *DB) SetPinComment(ctx context.Context, resourceID int64, comment string) error {
	tag, err := d.pool.Exec(ctx, "UPDATE resources SET pin_comment = $2 WHERE id = $1 AND api_pinned_version IS NOT NULL", resourceID, comment)
	if err != nil {
		return fmt.Errorf("set the pin comment of resource %d: %w", resourceID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("set the pin comment of resource %d: it is not pinned: %w", resourceID, ErrNotFound)
	}
	return nil
}
