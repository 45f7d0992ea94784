// Package accounts is the part of Porter's store that says who may do what:
// teams and their roles, local users and their token generations, the
// record of logins (fly active-users) and the opaque access tokens fly's
// targets reads.
package accounts

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/porter-ci/porter/pkg/db/internal/pg"
)

// TeamAuth maps a role ("owner", "member", "pipeline-operator", "viewer") to
// its members.
type TeamAuth map[string]RoleMembers

// RoleMembers are the users ("local:name") and groups that have a role.
type RoleMembers struct {
	Users  []string `json:"users"`
	Groups []string `json:"groups"`
}

// Team is a Concourse team.
type Team struct {
	ID   int
	Name string
	Auth TeamAuth
}

const teamColumns = "id, name, auth"

func scanTeam(row pgx.Row) (Team, error) {
	var t Team
	var auth []byte
	if err := row.Scan(&t.ID, &t.Name, &auth); err != nil {
		return Team{}, err
	}
	if err := json.Unmarshal(auth, &t.Auth); err != nil {
		return Team{}, fmt.Errorf("team %s: decode auth: %w", t.Name, err)
	}
	return t, nil
}

// EnsureTeam creates the team, or replaces the auth of the existing one.
func (s *Store) EnsureTeam(ctx context.Context, name string, auth TeamAuth) (Team, error) {
	if auth == nil {
		auth = TeamAuth{}
	}
	b, err := json.Marshal(auth)
	if err != nil {
		return Team{}, fmt.Errorf("ensure team %s: encode auth: %w", name, err)
	}
	t, err := scanTeam(s.pool.QueryRow(ctx, `
		INSERT INTO teams (name, auth) VALUES ($1, $2::jsonb)
		ON CONFLICT (name) DO UPDATE SET auth = excluded.auth
		RETURNING `+teamColumns, name, string(b)))
	if err != nil {
		return Team{}, pg.Classify(err, "ensure team %s", name)
	}
	return t, nil
}

// Team looks a team up by name.
func (s *Store) Team(ctx context.Context, name string) (Team, error) {
	t, err := scanTeam(s.pool.QueryRow(ctx, "SELECT "+teamColumns+" FROM teams WHERE name = $1", name))
	if err != nil {
		return Team{}, pg.Classify(err, "team %s", name)
	}
	return t, nil
}

// TeamByID looks a team up by id.
func (s *Store) TeamByID(ctx context.Context, id int) (Team, error) {
	t, err := scanTeam(s.pool.QueryRow(ctx, "SELECT "+teamColumns+" FROM teams WHERE id = $1", id))
	if err != nil {
		return Team{}, pg.Classify(err, "team %d", id)
	}
	return t, nil
}

// Teams lists every team, ordered by id.
func (s *Store) Teams(ctx context.Context) ([]Team, error) {
	rows, err := s.pool.Query(ctx, "SELECT "+teamColumns+" FROM teams ORDER BY id")
	if err != nil {
		return nil, fmt.Errorf("list teams: %w", err)
	}
	ts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Team, error) { return scanTeam(r) })
	if err != nil {
		return nil, fmt.Errorf("list teams: %w", err)
	}
	return ts, nil
}

// UserTeams returns, for a user ("local:name"), the roles it has in each team
// it belongs to: team name -> roles, sorted. Groups are not expanded here.
func (s *Store) UserTeams(ctx context.Context, user string) (map[string][]string, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT t.name, r.key
		FROM teams t, jsonb_each(t.auth) r
		WHERE r.value->'users' ? $1`, user)
	if err != nil {
		return nil, fmt.Errorf("teams of user %s: %w", user, err)
	}
	out := map[string][]string{}
	var team, role string
	_, err = pgx.ForEachRow(rows, []any{&team, &role}, func() error {
		out[team] = append(out[team], role)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("teams of user %s: %w", user, err)
	}
	for _, roles := range out {
		sort.Strings(roles)
	}
	return out, nil
}

// Store reads and writes the accounts' tables.
type Store struct{ pool *pgxpool.Pool }

// New is the accounts' store on pool.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }
