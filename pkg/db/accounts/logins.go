package accounts

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/porter-ci/porter/pkg/db/internal/pg"
)

// User is someone who logged in.
type User struct {
	Connector string
	Name      string
	LastLogin time.Time
}

// RecordLogin notes that a user logged in at.
func (s *Store) RecordLogin(ctx context.Context, connector, name string, at time.Time) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO users (connector, name, last_login) VALUES ($1, $2, $3)
		ON CONFLICT (connector, name) DO UPDATE SET last_login = GREATEST(users.last_login, excluded.last_login)`,
		connector, name, at)
	if err != nil {
		return fmt.Errorf("record the login of %s user %s: %w", connector, name, err)
	}
	return nil
}

// ActiveUsers lists the users who logged in since, most recent first.
func (s *Store) ActiveUsers(ctx context.Context, since time.Time) ([]User, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT connector, name, last_login FROM users WHERE last_login >= $1 ORDER BY last_login DESC, name`, since)
	if err != nil {
		return nil, fmt.Errorf("list active users: %w", err)
	}
	us, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (User, error) {
		var u User
		err := r.Scan(&u.Connector, &u.Name, &u.LastLogin)
		return u, err
	})
	if err != nil {
		return nil, fmt.Errorf("list active users: %w", err)
	}
	return us, nil
}

// accessTokenGrace is how long an expired access token is kept: a request
// with it meanwhile is told its token expired, not that it is unknown.
const accessTokenGrace = 24 * time.Hour

// SaveAccessToken stores what the opaque token whose sha256 is hash stands
// for, until expires; tokens expired for over a day go at the same time.
func (s *Store) SaveAccessToken(ctx context.Context, hash, jwt string, expires time.Time) error {
	_, err := s.pool.Exec(ctx, `
		WITH old AS (DELETE FROM access_tokens WHERE expires_at < now() - $4::interval)
		INSERT INTO access_tokens (token_hash, jwt, expires_at) VALUES ($1, $2, $3)`, hash, jwt, expires, accessTokenGrace)
	if err != nil {
		return pg.Classify(err, "save an access token")
	}
	return nil
}

// AccessToken is the signed token an opaque one stands for (db.ErrNotFound:
// none). An expired one is answered still (for a day): the signed token
// says it expired.
func (s *Store) AccessToken(ctx context.Context, hash string) (string, error) {
	var jwt string
	err := s.pool.QueryRow(ctx, `SELECT jwt FROM access_tokens WHERE token_hash = $1`, hash).Scan(&jwt)
	if err != nil {
		return "", pg.Classify(err, "access token")
	}
	return jwt, nil
}

// DeleteExpiredAccessTokens forgets the tokens that expired before.
func (s *Store) DeleteExpiredAccessTokens(ctx context.Context, before time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM access_tokens WHERE expires_at < $1`, before)
	if err != nil {
		return 0, fmt.Errorf("delete expired access tokens: %w", err)
	}
	return tag.RowsAffected(), nil
}
