// Package resourcecaches is the part of Porter's store that keeps fetched
// resource versions (a get's output, stored as an artifact), so that a get
// of the same version with the same configuration needs no pod, and lists
// them as `fly volumes` shows them.
package resourcecaches

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/porter-ci/porter/pkg/db/internal/pg"
)

// Caches holds the resource caches.
type Caches struct{ pool *pgxpool.Pool }

// New is the store on pool.
func New(pool *pgxpool.Pool) *Caches { return &Caches{pool: pool} }

// ResourceCache is a fetched resource version kept as an artifact, so that
// a get of the same version with the same configuration needs no pod.
type ResourceCache struct {
	Key    string
	TeamID int
	// ResourceID is the pipeline resource it was fetched for; 0 for
	// one-off builds and image fetches.
	ResourceID int64
	// Artifact is the blobstore key of the fetched directory.
	Artifact string
	Digest   string
	Size     int64
	Version  map[string]string
	// Metadata is the get's metadata as JSON ([{"name":..,"value":..}]).
	Metadata json.RawMessage
	LastUsed time.Time
}

// Key identifies a fetched version: the same team, type,
// image, source, params and version always fetch the same files. Go's JSON
// writes map keys sorted, so equal values give equal keys.
func Key(teamID int, typ, image string, source, params any, version map[string]string) (string, error) {
	body, err := json.Marshal([]any{teamID, typ, image, source, params, version})
	if err != nil {
		return "", fmt.Errorf("resource cache key: %w", err)
	}
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:]), nil
}

// ResourceCache returns the cache stored under key and marks it used.
func (s *Caches) ResourceCache(ctx context.Context, key string) (ResourceCache, error) {
	var (
		c          ResourceCache
		resourceID *int64
		version    []byte
	)
	err := s.pool.QueryRow(ctx, `UPDATE resource_caches SET last_used = now() WHERE key = $1
		RETURNING key, team_id, resource_id, artifact, digest, size, version, metadata, last_used`, key).
		Scan(&c.Key, &c.TeamID, &resourceID, &c.Artifact, &c.Digest, &c.Size, &version, &c.Metadata, &c.LastUsed)
	if err != nil {
		return ResourceCache{}, pg.Classify(err, "resource cache %s", key)
	}
	if resourceID != nil {
		c.ResourceID = *resourceID
	}
	if err := json.Unmarshal(version, &c.Version); err != nil {
		return ResourceCache{}, fmt.Errorf("resource cache %s: version: %w", key, err)
	}
	return c, nil
}

// SaveResourceCache stores (or replaces) a cache.
func (s *Caches) SaveResourceCache(ctx context.Context, c ResourceCache) error {
	version, err := json.Marshal(c.Version)
	if err != nil {
		return fmt.Errorf("resource cache %s: version: %w", c.Key, err)
	}
	metadata := c.Metadata
	if len(metadata) == 0 || string(metadata) == "null" {
		metadata = json.RawMessage("[]")
	}
	var resourceID *int64
	if c.ResourceID != 0 {
		resourceID = &c.ResourceID
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO resource_caches (key, team_id, resource_id, artifact, digest, size, version, metadata)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (key) DO UPDATE SET resource_id = COALESCE(EXCLUDED.resource_id, resource_caches.resource_id),
			artifact = EXCLUDED.artifact, digest = EXCLUDED.digest, size = EXCLUDED.size,
			version = EXCLUDED.version, metadata = EXCLUDED.metadata, last_used = now()`,
		c.Key, c.TeamID, resourceID, c.Artifact, c.Digest, c.Size, version, []byte(metadata))
	if err != nil {
		return pg.Classify(err, "save resource cache %s", c.Key)
	}
	return nil
}

// DeleteResourceCaches forgets every cache of a resource (`fly
// clear-resource-cache`) and says how many there were. The artifacts
// themselves are content-addressed and may be shared; they are not removed.
func (s *Caches) DeleteResourceCaches(ctx context.Context, resourceID int64) (int64, error) {
	tag, err := s.pool.Exec(ctx, "DELETE FROM resource_caches WHERE resource_id = $1", resourceID)
	if err != nil {
		return 0, fmt.Errorf("delete the caches of resource %d: %w", resourceID, err)
	}
	return tag.RowsAffected(), nil
}

// BuildResourceID is the id of the resource named name in the pipeline of
// build buildID, or 0 when the build has no pipeline or the pipeline no
// such resource.
func (s *Caches) BuildResourceID(ctx context.Context, buildID int64, name string) (int64, error) {
	var id int64
	err := s.pool.QueryRow(ctx, `SELECT COALESCE((SELECT r.id FROM builds b JOIN resources r ON r.pipeline_id = b.pipeline_id
		WHERE b.id = $1 AND r.name = $2), 0)`, buildID, name).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("resource %q of build %d: %w", name, buildID, err)
	}
	return id, nil
}

// TeamCache is a resource cache with the resource it was fetched for
// (empty for one-off builds' gets and image fetches).
type TeamCache struct {
	ResourceCache
	ResourceName, ResourceType string
	PipelineID                 int64
	PipelineName               string
	// InstanceVars name the pipeline's instance (nil: none).
	InstanceVars map[string]any
	CreateTime   time.Time
}

// TeamResourceCaches lists the caches of a team, oldest first (`fly
// volumes`).
func (s *Caches) TeamResourceCaches(ctx context.Context, teamID int) ([]TeamCache, error) {
	rows, err := s.pool.Query(ctx, `SELECT c.key, c.team_id, coalesce(c.resource_id, 0), c.artifact, c.digest, c.size, c.version,
			c.metadata, c.last_used, c.create_time, coalesce(r.name, ''), coalesce(r.type, ''), coalesce(p.id, 0), coalesce(p.name, ''),
			coalesce(p.instance_vars, '{}')
		FROM resource_caches c LEFT JOIN resources r ON r.id = c.resource_id LEFT JOIN pipelines p ON p.id = r.pipeline_id
		WHERE c.team_id = $1
		ORDER BY c.create_time, c.key`, teamID)
	if err != nil {
		return nil, fmt.Errorf("list the resource caches of team %d: %w", teamID, err)
	}
	cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TeamCache, error) {
		var (
			c                     TeamCache
			version, instanceVars []byte
		)
		err := r.Scan(&c.Key, &c.TeamID, &c.ResourceID, &c.Artifact, &c.Digest, &c.Size, &version,
			&c.Metadata, &c.LastUsed, &c.CreateTime, &c.ResourceName, &c.ResourceType, &c.PipelineID, &c.PipelineName, &instanceVars)
		if err != nil {
			return c, err
		}
		if err := json.Unmarshal(version, &c.Version); err != nil {
			return c, fmt.Errorf("resource cache %s: version: %w", c.Key, err)
		}
		if err := json.Unmarshal(instanceVars, &c.InstanceVars); err != nil {
			return c, fmt.Errorf("resource cache %s: instance vars: %w", c.Key, err)
		}
		if len(c.InstanceVars) == 0 {
			c.InstanceVars = nil
		}
		return c, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the resource caches of team %d: %w", teamID, err)
	}
	return cs, nil
}
