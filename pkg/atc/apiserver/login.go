package apiserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/db"
)

// loginUsers are the database's local users as the login, Authenticate and
// logout need them: an unknown user is refused like a wrong password (or a
// revoked token), a database that is down is a server error.
type loginUsers struct{ store Store }

// RecordLogin implements auth.LoginRecorder (`fly active-users`).
func (u loginUsers) RecordLogin(ctx context.Context, connector, name string, at time.Time) error {
	return u.store.RecordLogin(ctx, connector, name, at)
}

// SaveAccessToken and AccessToken implement auth.AccessTokens: fly holds an
// opaque token whose expiry `fly targets` can read.
func (u loginUsers) SaveAccessToken(ctx context.Context, hash, signed string, expires time.Time) error {
	return u.store.SaveAccessToken(ctx, hash, signed, expires)
}

func (u loginUsers) AccessToken(ctx context.Context, hash string) (string, error) {
	signed, err := u.store.AccessToken(ctx, hash)
	if errors.Is(err, db.ErrNotFound) {
		return "", fmt.Errorf("%w: %w", auth.ErrUnknownToken, err)
	}
	return signed, err
}

func (u loginUsers) LocalUserHash(ctx context.Context, name string) (string, error) {
	h, err := u.store.LocalUserHash(ctx, name)
	return h, unknownUser(err, name)
}

func (u loginUsers) Session(ctx context.Context, connector, userID string) (auth.Session, error) {
	if connector != auth.LocalConnector {
		s, err := u.store.SSOUserSession(ctx, connector, userID)
		if err != nil {
			return auth.Session{}, unknownUser(err, connector+" user "+userID)
		}
		return auth.Session{Generation: s.Generation, Teams: s.Teams}, nil
	}
	s, err := u.store.LocalUserSession(ctx, userID)
	if err != nil {
		return auth.Session{}, unknownUser(err, userID)
	}
	return auth.Session{Generation: s.Generation, Teams: s.Teams}, nil
}

// SaveSSOUser implements auth.SSOUsers.
func (u loginUsers) SaveSSOUser(ctx context.Context, connector string, id auth.Identity) error {
	return u.store.SaveSSOUser(ctx, connector, id.UserID, id.UserName, id.Groups)
}

func (u loginUsers) EndSessions(ctx context.Context, connector, userID string) error {
	if connector != auth.LocalConnector {
		return unknownUser(u.store.BumpSSOUserGeneration(ctx, connector, userID), connector+" user "+userID)
	}
	return unknownUser(u.store.BumpLocalUserGeneration(ctx, userID), userID)
}

func unknownUser(err error, name string) error {
	if errors.Is(err, db.ErrNotFound) {
		return fmt.Errorf("%w: %s", auth.ErrUnknownUser, name)
	}
	return err
}
