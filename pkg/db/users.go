package db

import (
	"context"
	"fmt"
)

// UpsertLocalUser creates a local user or replaces its password. The hash is
// made by the caller (bcrypt); this package never sees a password.
func (d *DB) UpsertLocalUser(ctx context.Context, name, passwordHash string) error {
	_, err := d.pool.Exec(ctx, `
		INSERT INTO local_users (name, password_hash) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET password_hash = excluded.password_hash, update_time = now()`,
		name, passwordHash)
	if err != nil {
		return fmt.Errorf("save local user %s: %w", name, err)
	}
	return nil
}

// LocalUserHash is the stored password hash of a local user.
func (d *DB) LocalUserHash(ctx context.Context, name string) (string, error) {
	var h string
	if err := d.pool.QueryRow(ctx, "SELECT password_hash FROM local_users WHERE name = $1", name).Scan(&h); err != nil {
		return "", classify(err, "local user %s", name)
	}
	return h, nil
}
