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
	// By group, by name (any case), by ID; a local user of the same name
	// and another connector's group do not count.
	if _, err := d.EnsureTeam(ctx, "devs", TeamAuth{"member": {Groups: []string{"oidc:Developers"}}, "viewer": {Users: []string{"local:alice"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.EnsureTeam(ctx, "named", TeamAuth{"owner": {Users: []string{"OIDC:Alice"}}, "viewer": {Groups: []string{"github:developers"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.EnsureTeam(ctx, "bysub", TeamAuth{"pipeline-operator": {Users: []string{"oidc:sub-1"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.SSOUserSession(ctx, "oidc", "sub-1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("session before any login: %v, want ErrNotFound", err)
	}
	if err := d.SaveSSOUser(ctx, "oidc", "sub-1", "alice", []string{"developers", "ops"}); err != nil {
		t.Fatal(err)
	}
	s, err := d.SSOUserSession(ctx, "oidc", "sub-1")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(s.Teams); got != "map[bysub:[pipeline-operator] devs:[member] named:[owner]]" {
		t.Fatalf("alice's teams: %s", got)
	}

	// The next login says she left the group: the role goes; the
	// generation stays (her tokens still work).
	if err := d.SaveSSOUser(ctx, "oidc", "sub-1", "alice", nil); err != nil {
		t.Fatal(err)
	}
	s2, err := d.SSOUserSession(ctx, "oidc", "sub-1")
	if err != nil || fmt.Sprint(s2.Teams) != "map[bysub:[pipeline-operator] named:[owner]]" || s2.Generation != s.Generation {
		t.Fatalf("after leaving the group: %+v %v (generation was %d)", s2, err, s.Generation)
	}

	if err := d.BumpSSOUserGeneration(ctx, "oidc", "sub-1"); err != nil {
		t.Fatal(err)
	}
	s3, err := d.SSOUserSession(ctx, "oidc", "sub-1")
	if err != nil || s3.Generation <= s2.Generation {
		t.Fatalf("generation after logout %d (before %d) %v", s3.Generation, s2.Generation, err)
	}
	if err := d.BumpSSOUserGeneration(ctx, "oidc", "nobody"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bump of an unknown user: %v, want ErrNotFound", err)
	}
}
