package db

import (
	"errors"
	"fmt"
	"testing"
)

func TestSSOUserSession(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	if _, err := d.EnsureTeam(ctx, "main", TeamAuth{"owner": {Users: []string{"local:admin"}}}); err != nil {
		t.Fatal(err)
	}
	// By group, by name, by ID, each exactly or as fly sends it (lower
	// case); a local user of the same name and another connector's group do
	// not count, nor does an entry spelt in other capitals.
	if _, err := d.EnsureTeam(ctx, "devs", TeamAuth{"member": {Groups: []string{"oidc:developers"}}, "viewer": {Users: []string{"local:alice"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.EnsureTeam(ctx, "named", TeamAuth{"owner": {Users: []string{"oidc:alice"}}, "viewer": {Groups: []string{"github:developers"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.EnsureTeam(ctx, "bysub", TeamAuth{"pipeline-operator": {Users: []string{"oidc:Sub-1"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.EnsureTeam(ctx, "othercase", TeamAuth{"owner": {Users: []string{"oidc:ALICE", "OIDC:Alice", "oidc:SUB-1", "oidc:Alice "}, Groups: []string{"oidc:OPS", "oidc:"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.SSOUserSession(ctx, "oidc", "Sub-1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("session before any login: %v, want ErrNotFound", err)
	}
	if err := d.SaveSSOUser(ctx, "oidc", "Sub-1", "Alice", []string{"Developers", "ops"}); err != nil {
		t.Fatal(err)
	}
	s, err := d.SSOUserSession(ctx, "oidc", "Sub-1")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(s.Teams); got != "map[bysub:[pipeline-operator] devs:[member] named:[owner]]" {
		t.Fatalf("alice's teams: %s", got)
	}

	// The next login says she left the group: the role goes; the
	// generation stays (her tokens still work).
	if err := d.SaveSSOUser(ctx, "oidc", "Sub-1", "Alice", nil); err != nil {
		t.Fatal(err)
	}
	s2, err := d.SSOUserSession(ctx, "oidc", "Sub-1")
	if err != nil || fmt.Sprint(s2.Teams) != "map[bysub:[pipeline-operator] named:[owner]]" || s2.Generation != s.Generation {
		t.Fatalf("after leaving the group: %+v %v (generation was %d)", s2, err, s.Generation)
	}

	if err := d.BumpSSOUserGeneration(ctx, "oidc", "Sub-1"); err != nil {
		t.Fatal(err)
	}
	s3, err := d.SSOUserSession(ctx, "oidc", "Sub-1")
	if err != nil || s3.Generation <= s2.Generation {
		t.Fatalf("generation after logout %d (before %d) %v", s3.Generation, s2.Generation, err)
	}
	if err := d.BumpSSOUserGeneration(ctx, "oidc", "nobody"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bump of an unknown user: %v, want ErrNotFound", err)
	}
}

// Another subject that comes with the same name (the provider gave the name
// to someone else) gets what names it and nothing keyed by the first one:
// not the roles given to its subject, not its generation.
func TestSSOUserSameNameOtherSubject(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	if _, err := d.EnsureTeam(ctx, "bysub", TeamAuth{"owner": {Users: []string{"oidc:sub-a"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.EnsureTeam(ctx, "byname", TeamAuth{"viewer": {Users: []string{"oidc:alice"}}}); err != nil {
		t.Fatal(err)
	}
	if err := d.SaveSSOUser(ctx, "oidc", "sub-a", "alice", nil); err != nil {
		t.Fatal(err)
	}
	if err := d.BumpSSOUserGeneration(ctx, "oidc", "sub-a"); err != nil {
		t.Fatal(err)
	}
	a, err := d.SSOUserSession(ctx, "oidc", "sub-a")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SaveSSOUser(ctx, "oidc", "sub-b", "alice", nil); err != nil {
		t.Fatal(err)
	}
	b, err := d.SSOUserSession(ctx, "oidc", "sub-b")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(b.Teams); got != "map[byname:[viewer]]" || b.Generation == a.Generation {
		t.Fatalf("sub-b: teams %s, generation %d (sub-a's %d)", got, b.Generation, a.Generation)
	}
	// sub-a's row is untouched by sub-b's login.
	a2, err := d.SSOUserSession(ctx, "oidc", "sub-a")
	if err != nil || fmt.Sprint(a2.Teams) != "map[byname:[viewer] bysub:[owner]]" || a2.Generation != a.Generation {
		t.Fatalf("sub-a after sub-b's login: %+v %v (before %+v)", a2, err, a)
	}
}
