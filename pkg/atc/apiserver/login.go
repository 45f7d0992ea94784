package apiserver

import (
	"context"
	"errors"
	"fmt"

	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/db"
)

// loginUsers are the database's local users as the login needs them: an
// unknown user is refused like a wrong password, a database that is down
// is a server error.
type loginUsers struct{ store TeamStore }

func (u loginUsers) LocalUserHash(ctx context.Context, name string) (string, error) {
	h, err := u.store.LocalUserHash(ctx, name)
	if errors.Is(err, db.ErrNotFound) {
		return "", fmt.Errorf("%w: %s", auth.ErrUnknownUser, name)
	}
	return h, err
}

func (u loginUsers) UserTeams(ctx context.Context, user string) (map[string][]string, error) {
	return u.store.UserTeams(ctx, user)
}
