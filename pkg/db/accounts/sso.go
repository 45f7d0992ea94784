package accounts

import (
	"context"
	"fmt"

	"github.com/porter-ci/porter/pkg/db/internal/pg"
)

// SaveSSOUser records what the identity provider said of a user who logged
// in through connector: its name and groups, which its roles come from
// until its next login. The user's token generation is kept.
func (s *Store) SaveSSOUser(ctx context.Context, connector, userID, userName string, groups []string) error {
	if groups == nil {
		groups = []string{}
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO sso_users (connector, user_id, user_name, groups) VALUES ($1, $2, $3, $4)
		ON CONFLICT (connector, user_id) DO UPDATE
		SET user_name = excluded.user_name, groups = excluded.groups, update_time = now()`,
		connector, userID, userName, groups)
	if err != nil {
		return fmt.Errorf("save %s user %s: %w", connector, userID, err)
	}
	return nil
}

// SSOUserSession is a single sign-on user's token generation and roles now:
// a role's users may name the user by ID or by name ("oidc:alice"), its
// groups any of the user's groups ("oidc:devs"). db.ErrNotFound: the user
// never logged in.
//
// An entry names a value when it is exactly "<connector>:<value>", or
// "<connector>:" and the value in lower case: fly lowercases every user and
// group it sends (as Concourse's own flags do), so a lowercase entry is the
// only way fly can name "Alice" or Dex's mixed-case subjects. Nothing else is
// folded, unlike Concourse's case-insensitive match: an entry with capitals
// (--main-team-oidc-user) names that spelling only, and the connector prefix
// is not folded either. Roles are read through the row of this subject only;
// another subject with the same name has a row, generation and tokens of its
// own and gets only what names it.
func (s *Store) SSOUserSession(ctx context.Context, connector, userID string) (UserSession, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT u.generation, m.team, m.role
		FROM sso_users u
		LEFT JOIN LATERAL (
			SELECT t.name AS team, r.key AS role
			FROM teams t, jsonb_each(t.auth) r
			WHERE EXISTS (
				SELECT 1 FROM jsonb_array_elements_text(CASE WHEN jsonb_typeof(r.value->'users') = 'array' THEN r.value->'users' ELSE '[]' END) x,
					unnest(ARRAY[u.user_id, u.user_name]) v
				WHERE v <> '' AND x IN (u.connector || ':' || v, u.connector || ':' || lower(v)))
			OR EXISTS (
				SELECT 1 FROM jsonb_array_elements_text(CASE WHEN jsonb_typeof(r.value->'groups') = 'array' THEN r.value->'groups' ELSE '[]' END) x,
					unnest(u.groups) g
				WHERE g <> '' AND x IN (u.connector || ':' || g, u.connector || ':' || lower(g)))
		) m ON true
		WHERE u.connector = $1 AND u.user_id = $2`, connector, userID)
	if err != nil {
		return UserSession{}, fmt.Errorf("session of %s user %s: %w", connector, userID, err)
	}
	us, err := scanUserSession(rows)
	if err != nil {
		return UserSession{}, fmt.Errorf("session of %s user %s: %w", connector, userID, err)
	}
	return us, nil
}

// BumpSSOUserGeneration ends every token of a single sign-on user issued
// before (logout). db.ErrNotFound: no such user.
func (s *Store) BumpSSOUserGeneration(ctx context.Context, connector, userID string) error {
	tag, err := s.pool.Exec(ctx,
		"UPDATE sso_users SET generation = nextval('local_user_generation') WHERE connector = $1 AND user_id = $2", connector, userID)
	if err != nil {
		return fmt.Errorf("end the sessions of %s user %s: %w", connector, userID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("end the sessions of %s user %s: %w", connector, userID, pg.ErrNotFound)
	}
	return nil
}
