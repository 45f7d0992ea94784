package auth

import (
	"encoding/json"
	"testing"
)

func TestSubjectForMatchesConcourse(t *testing.T) {
	// The sub Concourse 8.2.5 gave local user "test" (reference capture).
	if got, want := SubjectFor("local", "test"), "CgR0ZXN0EgVsb2NhbA"; got != want {
		t.Fatalf("SubjectFor(local, test) = %q, want %q", got, want)
	}
}

func TestRoleChecks(t *testing.T) {
	type want struct {
		read, write                          bool
		createBuild, abortBuild, hijack      bool
		createArtifact, setPipeline, setTeam bool
	}
	tests := []struct {
		name   string
		claims Claims
		want   want
	}{
		{"anonymous", Claims{}, want{}},
		{"viewer", teamClaims("viewer"), want{read: true}},
		{"pipeline-operator", teamClaims("pipeline-operator"), want{read: true, write: true, abortBuild: true}},
		{"member", teamClaims("member"), want{true, true, true, true, true, true, true, false}},
		{"owner", teamClaims("owner"), want{true, true, true, true, true, true, true, true}},
		{"unknown role", teamClaims("janitor"), want{}},
		{"viewer and member", teamClaims("viewer", "member"), want{true, true, true, true, true, true, true, false}},
		{"owner of another team", Claims{Teams: map[string][]string{"other": {"owner"}}}, want{}},
		{"admin", Claims{IsAdmin: true, Teams: map[string][]string{"main": {"owner"}}}, want{true, true, true, true, true, true, true, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.claims
			got := want{
				read:           c.CanRead("team"),
				write:          c.CanWrite("team"),
				createBuild:    c.Can("team", ActionCreateBuild),
				abortBuild:     c.Can("team", ActionAbortBuild),
				hijack:         c.Can("team", ActionHijack),
				createArtifact: c.Can("team", ActionCreateArtifact),
				setPipeline:    c.Can("team", ActionSaveConfig),
				setTeam:        c.Can("team", ActionSetTeam),
			}
			if got != tt.want {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
			if c.Can("team", ActionRead) != c.CanRead("team") {
				t.Errorf("Can(ActionRead) disagrees with CanRead")
			}
		})
	}
}

func TestUnknownActionRefusedEvenToAdmin(t *testing.T) {
	c := Claims{IsAdmin: true, Teams: map[string][]string{"main": {"owner"}}}
	if c.Can("main", Action("LaunchMissiles")) {
		t.Fatal("unknown action allowed")
	}
}

func TestRolesIsACopy(t *testing.T) {
	c := teamClaims("member")
	c.Roles("team")[0] = "owner"
	if c.Teams["team"][0] != "member" {
		t.Fatal("Roles let the caller change the claims")
	}
}

func TestUserInfoShape(t *testing.T) {
	c := Claims{
		Subject:   SubjectFor("local", "test"),
		UserID:    "test",
		Name:      "test",
		Email:     "test",
		Connector: "local",
		Teams:     map[string][]string{"main": {"owner"}},
		IsAdmin:   true,
	}
	got, err := json.Marshal(c.UserInfo())
	if err != nil {
		t.Fatal(err)
	}
	// GET /api/v1/user from Concourse 8.2.5 (reference capture).
	want := `{"sub":"CgR0ZXN0EgVsb2NhbA","name":"test","user_id":"test","user_name":"","email":"test","is_admin":true,"is_system":false,"teams":{"main":["owner"]},"connector":"local","display_user_id":"test"}`
	if string(got) != want {
		t.Fatalf("user info\n got %s\nwant %s", got, want)
	}

	// fly refuses a non-admin whose teams are null.
	got, err = json.Marshal(Claims{UserID: "nobody"}.UserInfo())
	if err != nil {
		t.Fatal(err)
	}
	var back struct{ Teams map[string][]string }
	if err := json.Unmarshal(got, &back); err != nil || back.Teams == nil {
		t.Fatalf("teams of a user in no team = %s, want {}", got)
	}
}

func teamClaims(roles ...string) Claims {
	return Claims{UserID: "u", Teams: map[string][]string{"team": roles}}
}
