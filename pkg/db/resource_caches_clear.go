package db

import (
	"context"
	"fmt"
)

// DeleteResourceCaches forgets every cached fetch of a resource's versions
// (`fly clear-resource-cache`), so the next get runs again; it returns how
// many there were. The artifacts themselves are content-addressed and may be
// shared, so they are not deleted here.
func (d *DB) DeleteResourceCaches(ctx context.Context, resourceID int64) (int64, error) {
	tag, err := d.pool.Exec(ctx, "DELETE FROM resource_caches WHERE resource_id = $1", resourceID)
	if err != nil {
		return 0, fmt.Errorf("delete caches of resource %d: %w", resourceID, err)
	}
	return tag.RowsAffected(), nil
}
