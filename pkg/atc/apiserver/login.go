package apiserver

import (
	"context"
	"errors"
	"fmt"

	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/db"
)

// loginUsers are the database's local users as the login, Authenticate and
// logout need them: an unknown user is refused like a wrong password (or a
// revoked token), a database that is down is a server error.
type loginUsers struct{ store TeamStore }

func (u loginUsers) LocalUserHash(ctx context.Context, name string) (string, error) {
	h, err := u.store.LocalUserHash(ctx, name)
	return h, unknownUser(err, name)
}

func (u loginUsers) Session(ctx context.Context, connector, userID string) (auth.Session, error) {
	if connector != auth.LocalConnector {
		return auth.Session{}, fmt.Errorf("%w: %s user %s (only local users exist)", auth.ErrUnknownUser, connector, userID)
	}
	s, err := u.store.LocalUserSession(ctx, userID)
	if err != nil {
		return auth.Session{}, unknownUser(err, userID)
	}
	return auth.Session{Generation: s.Generation, Teams: s.Teams}, nil
}

func (u loginUsers) EndSessions(ctx context.Context, connector, userID string) error {
	if connector != auth.LocalConnector {
		return fmt.Errorf("%w: %s user %s (only local users exist)", auth.ErrUnknownUser, connector, userID)
	}
	return unknownUser(u.store.BumpLocalUserGeneration(ctx, userID), userID)
}

func unknownUser(err error, name string) error {
	if errors.Is(err, db.ErrNotFound) {
		return fmt.Errorf("%w: %s", auth.ErrUnknownUser, name)
	}
	return err
}
