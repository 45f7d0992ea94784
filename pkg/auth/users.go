package auth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// minBcryptCost is the weakest given hash --add-local-user accepts, as in
// Concourse.
const minBcryptCost = 10

// ErrUnknownUser is what Users returns (wrapped) for a user that does not
// exist: the login is refused as a wrong password would be. Any other
// error is the user store failing, and the login fails as a server error.
var ErrUnknownUser = errors.New("unknown user")

// Users is what the token endpoint needs to know about users.
type Users interface {
	// LocalUserHash is the bcrypt hash of local user name's password, or an
	// error wrapping ErrUnknownUser.
	LocalUserHash(ctx context.Context, name string) (string, error)
	Sessions
}

// LoginRecorder notes successful logins (`fly active-users`); a Users
// that implements it hears of each.
type LoginRecorder interface {
	RecordLogin(ctx context.Context, connector, name string, at time.Time) error
}

// Sessions is what Authenticate checks every token against.
type Sessions interface {
	// Session is the user's token generation and roles now, or an error
	// wrapping ErrUnknownUser for a user that does not exist (any more).
	Session(ctx context.Context, connector, userID string) (Session, error)
}

// SessionEnder ends a user's sessions (logout).
type SessionEnder interface {
	// EndSessions moves the user's token generation on, so that every token
	// issued before stops working; ErrUnknownUser (wrapped) for no such user.
	EndSessions(ctx context.Context, connector, userID string) error
}

// Session is a user's state that tokens are checked against on every
// request. Tokens are signed, not stored; the generation is what lets a
// logout end them, and roles read here rather than from the token make a
// removed membership take effect at once.
type Session struct {
	// Generation is the user's token generation: a token carrying another
	// one was issued before a logout.
	Generation int64
	// Teams are the user's roles on each team (team -> roles).
	Teams map[string][]string
}

// HashPassword bcrypts pw for storing.
func HashPassword(pw string) (string, error) {
	h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.DefaultCost)
	if err != nil {
		return "", fmt.Errorf("hash password: %w", err)
	}
	return string(h), nil
}

// ParseLocalUser parses an --add-local-user value, "name:password". As in
// Concourse the password may already be a bcrypt hash ("$2a$", "$2b$" or
// "$2y$", cost at least 10); otherwise it is hashed here. The name ends at the
// first colon, so passwords may contain colons.
func ParseLocalUser(s string) (name, hash string, err error) {
	name, pw, ok := strings.Cut(s, ":")
	switch {
	case !ok:
		return "", "", errors.New(`local user must be "name:password"`)
	case name == "":
		return "", "", errors.New(`local user has an empty name; want "name:password"`)
	case pw == "":
		return "", "", fmt.Errorf("local user %q has an empty password", name)
	}
	if isBcryptHash(pw) {
		cost, err := bcrypt.Cost([]byte(pw))
		if err != nil {
			return "", "", fmt.Errorf("local user %q: password looks like a bcrypt hash but is not one: %w", name, err)
		}
		if cost < minBcryptCost {
			return "", "", fmt.Errorf("local user %q: bcrypt cost %d is below the minimum of %d", name, cost, minBcryptCost)
		}
		return name, pw, nil
	}
	hash, err = HashPassword(pw)
	if err != nil {
		return "", "", fmt.Errorf("local user %q: %w", name, err)
	}
	return name, hash, nil
}

func isBcryptHash(s string) bool {
	for _, prefix := range []string{"$2a$", "$2b$", "$2y$"} {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}
