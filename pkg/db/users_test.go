package db

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

func TestSetLocalUsersRemovesUndeclared(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	if _, err := d.SetLocalUsers(ctx, map[string]string{"alice": "$2a$10$a", "bob": "$2a$10$b"}); err != nil {
		t.Fatal(err)
	}
	aliceBefore, err := d.LocalUserSession(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	// bob is no longer declared: gone; alice's password changes.
	removed, err := d.SetLocalUsers(ctx, map[string]string{"alice": "$2a$10$a2", "carol": "$2a$10$c"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{"bob"}) {
		t.Fatalf("removed %v, want [bob]", removed)
	}
	if _, err := d.LocalUserHash(ctx, "bob"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bob's hash after removal: %v, want ErrNotFound", err)
	}
	if _, err := d.LocalUserSession(ctx, "bob"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bob's session after removal: %v, want ErrNotFound", err)
	}
	if h, err := d.LocalUserHash(ctx, "alice"); err != nil || h != "$2a$10$a2" {
		t.Fatalf("alice's hash %q %v", h, err)
	}
	// A password change alone keeps the user's tokens.
	if s, err := d.LocalUserSession(ctx, "alice"); err != nil || s.Generation != aliceBefore.Generation {
		t.Fatalf("alice's session %+v %v, want generation %d", s, err, aliceBefore.Generation)
	}

	// No users declared: none left.
	removed, err = d.SetLocalUsers(ctx, nil)
	if err != nil || !slices.Equal(removed, []string{"alice", "carol"}) {
		t.Fatalf("removed %v %v, want [alice carol]", removed, err)
	}
}

func TestLocalUserSession(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	if _, err := d.SetLocalUsers(ctx, map[string]string{"alice": "$2a$10$a", "loner": "$2a$10$l"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.EnsureTeam(ctx, "main", TeamAuth{"owner": {Users: []string{"local:admin"}}, "viewer": {Users: []string{"local:alice"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.EnsureTeam(ctx, "other", TeamAuth{"member": {Users: []string{"local:alice"}}, "owner": {Users: []string{"local:alice"}}}); err != nil {
		t.Fatal(err)
	}
	s, err := d.LocalUserSession(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(s.Teams); got != "map[main:[viewer] other:[member owner]]" {
		t.Fatalf("alice's teams: %s", got)
	}
	// A user in no team still has a session, with no teams.
	loner, err := d.LocalUserSession(ctx, "loner")
	if err != nil || len(loner.Teams) != 0 || loner.Teams == nil {
		t.Fatalf("loner's session %+v %v", loner, err)
	}
	if loner.Generation == s.Generation {
		t.Fatalf("two users share generation %d", s.Generation)
	}

	// Removing alice from team other takes effect on the next read.
	if _, err := d.EnsureTeam(ctx, "other", TeamAuth{"owner": {Users: []string{"local:admin"}}}); err != nil {
		t.Fatal(err)
	}
	s, err = d.LocalUserSession(ctx, "alice")
	if err != nil || fmt.Sprint(s.Teams) != "map[main:[viewer]]" {
		t.Fatalf("alice's session after removal from other: %+v %v", s, err)
	}

	// Logout moves the generation on, never back.
	before := s.Generation
	if err := d.BumpLocalUserGeneration(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	s, err = d.LocalUserSession(ctx, "alice")
	if err != nil || s.Generation <= before {
		t.Fatalf("generation after logout %d (before %d) %v", s.Generation, before, err)
	}
	if err := d.BumpLocalUserGeneration(ctx, "nobody"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bump of an unknown user: %v, want ErrNotFound", err)
	}
	if _, err := d.LocalUserSession(ctx, "nobody"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("session of an unknown user: %v, want ErrNotFound", err)
	}

	// Removed and added back: old tokens stay dead.
	gen := s.Generation
	if _, err := d.SetLocalUsers(ctx, map[string]string{"loner": "$2a$10$l"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.SetLocalUsers(ctx, map[string]string{"alice": "$2a$10$a", "loner": "$2a$10$l"}); err != nil {
		t.Fatal(err)
	}
	if s, err := d.LocalUserSession(ctx, "alice"); err != nil || s.Generation == gen {
		t.Fatalf("re-added alice has generation %d (was %d) %v", s.Generation, gen, err)
	}
}
