package accounts

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/porter-ci/porter/pkg/db/internal/pg"
)

// UpsertLocalUser creates a local user or replaces its password. The hash is
// made by the caller (bcrypt); this package never sees a password.
func (s *Store) UpsertLocalUser(ctx context.Context, name, passwordHash string) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO local_users (name, password_hash) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET password_hash = excluded.password_hash, update_time = now()`,
		name, passwordHash)
	if err != nil {
		return fmt.Errorf("save local user %s: %w", name, err)
	}
	return nil
}

// SetLocalUsers makes the local users exactly users (name -> bcrypt hash), as
// the server's flags declare them: new ones are added, passwords replaced,
// and users not named are deleted, so they can no longer log in and their
// tokens stop working. It returns the names it deleted, sorted.
func (s *Store) SetLocalUsers(ctx context.Context, users map[string]string) (removed []string, err error) {
	names := make([]string, 0, len(users))
	for name := range users {
		names = append(names, name)
	}
	sort.Strings(names)
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, name := range names {
			if _, err := tx.Exec(ctx, `
				INSERT INTO local_users (name, password_hash) VALUES ($1, $2)
				ON CONFLICT (name) DO UPDATE SET password_hash = excluded.password_hash, update_time = now()`,
				name, users[name]); err != nil {
				return fmt.Errorf("save local user %s: %w", name, err)
			}
		}
		rows, err := tx.Query(ctx, `DELETE FROM local_users WHERE NOT (name = ANY($1)) RETURNING name`, names)
		if err != nil {
			return fmt.Errorf("delete local users not declared: %w", err)
		}
		removed, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("delete local users not declared: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("set local users: %w", err)
	}
	sort.Strings(removed)
	return removed, nil
}

// LocalUserHash is the stored password hash of a local user.
func (s *Store) LocalUserHash(ctx context.Context, name string) (string, error) {
	var h string
	if err := s.pool.QueryRow(ctx, "SELECT password_hash FROM local_users WHERE name = $1", name).Scan(&h); err != nil {
		return "", pg.Classify(err, "local user %s", name)
	}
	return h, nil
}

// UserSession is what an authenticated request of a local user is checked
// against: the user's token generation and its roles now.
type UserSession struct {
	// Generation is the user's current token generation: only tokens
	// carrying it are good.
	Generation int64
	// Teams are the user's roles on each team (team -> roles, sorted),
	// as UserTeams gives them.
	Teams map[string][]string
}

// LocalUserSession reads local user name's generation and roles in one
// query, for every authenticated request. db.ErrNotFound: no such user (any
// more).
func (s *Store) LocalUserSession(ctx context.Context, name string) (UserSession, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT u.generation, m.team, m.role
		FROM local_users u
		LEFT JOIN LATERAL (
			SELECT t.name AS team, r.key AS role
			FROM teams t, jsonb_each(t.auth) r
			WHERE r.value->'users' ? ('local:' || u.name)
		) m ON true
		WHERE u.name = $1`, name)
	if err != nil {
		return UserSession{}, fmt.Errorf("session of local user %s: %w", name, err)
	}
	us, err := scanUserSession(rows)
	if err != nil {
		return UserSession{}, fmt.Errorf("session of local user %s: %w", name, err)
	}
	return us, nil
}

// scanUserSession reads a user's generation and its (team, role) rows, one
// row per role (team and role NULL for a user with none); pg.ErrNotFound
// when there is no row: no such user.
func scanUserSession(rows pgx.Rows) (UserSession, error) {
	us := UserSession{Teams: map[string][]string{}}
	found := false
	var team, role *string
	_, err := pgx.ForEachRow(rows, []any{&us.Generation, &team, &role}, func() error {
		found = true
		if team != nil && role != nil {
			us.Teams[*team] = append(us.Teams[*team], *role)
		}
		return nil
	})
	if err != nil {
		return UserSession{}, err
	}
	if !found {
		return UserSession{}, pg.ErrNotFound
	}
	for _, roles := range us.Teams {
		sort.Strings(roles)
	}
	return us, nil
}

// BumpLocalUserGeneration moves local user name's token generation on, so
// every token issued before stops working (logout). db.ErrNotFound: no such
// user.
func (s *Store) BumpLocalUserGeneration(ctx context.Context, name string) error {
	tag, err := s.pool.Exec(ctx,
		"UPDATE local_users SET generation = nextval('local_user_generation') WHERE name = $1", name)
	if err != nil {
		return fmt.Errorf("end the sessions of local user %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("end the sessions of local user %s: %w", name, pg.ErrNotFound)
	}
	return nil
}
