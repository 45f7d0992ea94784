package names

import (
	"errors"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason string // "" when the name is accepted
	}{
		{"build", ""},
		{"my-job_1.2", ""},
		{"Deploy To Prod", ""}, // Concourse only warns about these
		{"déploiement", ""},
		{"..x", ""},
		{"x..", ""},
		{strings.Repeat("a", MaxLen), ""},
		{"", "is empty"},
		{".", "is a relative path element"},
		{"..", "is a relative path element"},
		{"../x", `contains '/'`},
		{"a/b", `contains '/'`},
		{`..\x`, `contains '\\'`},
		{"a\x00b", "control character U+0000"},
		{"a\nb", "control character U+000A"},
		{"a\x7fb", "control character U+007F"},
		{"a\u0085b", "control character U+0085"},
		{"\xff", "is not valid UTF-8"},
		{strings.Repeat("a", MaxLen+1), "is 256 bytes long"},
	} {
		err := Check("jobs.x", tc.name)
		if tc.reason == "" {
			if err != nil {
				t.Errorf("Check(%q) = %v, want nil", tc.name, err)
			}
			continue
		}
		var ne *Error
		if !errors.As(err, &ne) {
			t.Errorf("Check(%q) = %v, want a *names.Error", tc.name, err)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, tc.reason) || !strings.HasPrefix(msg, "jobs.x: name ") || !strings.Contains(msg, Rule) {
			t.Errorf("Check(%q) = %q, want the field, %q and the rule", tc.name, msg, tc.reason)
		}
	}
}
