// Package names checks the names users give (teams, pipelines, jobs,
// resources, steps, artifacts) before they become part of an object key,
// a file path or a Kubernetes name. Concourse only warns about names that
// are not identifiers; these rules are the ones Porter must enforce because
// a name is joined into a key: "../x" as a job name would reach another
// pipeline's objects.
package names

import (
	"fmt"
	"regexp"
	"unicode"
	"unicode/utf8"
)

// MaxLen bounds one name, in bytes: a key of several names must stay under
// S3's 1024 bytes.
const MaxLen = 255

// Rule is what Check enforces, as the errors quote it.
const Rule = "a name becomes part of a storage key or path, so it must be 1-255 bytes of UTF-8, not '.' or '..', " +
	"with no '/', '\\' or control characters"

// Error is a refused name: which field, the name, and what is wrong with it.
type Error struct {
	Field  string // e.g. "jobs.build" or "team"
	Name   string
	Reason string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: name %q %s (%s)", e.Field, e.Name, e.Reason, Rule)
}

// Check refuses a name that cannot be one segment of an object key or a
// path. field says where the name was given.
func Check(field, name string) error {
	reason := problem(name)
	if reason == "" {
		return nil
	}
	shown := name
	if len(shown) > 64 {
		shown = shown[:64] + "..."
	}
	return &Error{Field: field, Name: shown, Reason: reason}
}

func problem(name string) string {
	switch {
	case name == "":
		return "is empty"
	case len(name) > MaxLen:
		return fmt.Sprintf("is %d bytes long", len(name))
	case !utf8.ValidString(name):
		return "is not valid UTF-8"
	case name == "." || name == "..":
		return "is a relative path element"
	}
	for _, c := range name {
		switch {
		case c == '/' || c == '\\':
			return fmt.Sprintf("contains %q", c)
		case unicode.IsControl(c):
			return fmt.Sprintf("contains the control character %U", c)
		}
	}
	return ""
}

// teamName is what a team (or worker) name may be: what Concourse allows,
// and what an object key, a namespace or a label can hold safely.
var teamName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// CheckTeam refuses a name that cannot name a team or a worker.
func CheckTeam(name string) error {
	if !teamName.MatchString(name) {
		return fmt.Errorf("%q: use lowercase letters, digits, '-', '_' and '.', starting with a letter or digit (at most 63)", name)
	}
	return nil
}
