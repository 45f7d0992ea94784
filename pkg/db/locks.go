package db

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// LockID names a loop that only one server may run at a time. It is a
// PostgreSQL advisory lock key, scoped to the database.
type LockID int64

// The single-runner loops. lockMigrate (1000) is taken by Open.
const (
	LockGC        LockID = 1001
	LockScheduler LockID = 1002
	// LockGCPods: GC's passes over the workers' pods, apart from the
	// blobstore's slower ones so that kept pods stay within the rules.
	LockGCPods LockID = 1011
)

// TryLock takes lock id if no other session holds it. The lock lives in a
// connection set aside from the pool until release is called; if that
// connection breaks, the server drops the lock too, so a holder should not
// assume it forever. release may be called more than once, and must be
// called before Close.
func (d *DB) TryLock(ctx context.Context, id LockID) (release func(), ok bool, err error) {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("try lock %d: acquire a connection: %w", id, err)
	}
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(id)).Scan(&ok); err != nil {
		conn.Release()
		return nil, false, fmt.Errorf("try lock %d: %w", id, err)
	}
	if !ok {
		conn.Release()
		return nil, false, nil
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", int64(id)); err != nil {
				// A closed session holds no locks: close it rather than return
				// a connection that may still hold this one to the pool.
				d.log.Warn("unlock failed; closing its connection", "lock", int64(id), "err", err)
				_ = conn.Conn().Close(ctx)
			}
			conn.Release()
		})
	}
	return release, true, nil
}
