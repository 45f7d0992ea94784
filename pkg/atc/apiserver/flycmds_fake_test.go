package apiserver

import (
	"context"
	"time"

	"github.com/porter-ci/porter/pkg/db"
)

// The fake store's side of FlyStore (flycmds.go): changes are recorded
// in calls; the wall and the components are kept.

func (s *fakeStore) DeleteTeam(_ context.Context, id int) error {
	return s.change(fmtRef("DeleteTeam", int64(id)))
}
func (s *fakeStore) RenameTeam(_ context.Context, id int, name string) error {
	if name == "other" {
		return db.ErrConflict
	}
	return s.change(fmtRef("RenameTeam", int64(id)) + " " + name)
}
func (s *fakeStore) TeamUnfinishedBuilds(_ context.Context, teamID int) ([]int64, error) {
	bs, err := all(s, s.builds, func(b db.JobBuild) bool {
		return b.TeamID == teamID && !b.Status.Finished()
	})
	var ids []int64
	for _, b := range bs {
		ids = append(ids, b.ID)
	}
	return ids, err
}
func (s *fakeStore) ArchivePipeline(_ context.Context, id int64, _ string) error {
	return s.change(fmtRef("ArchivePipeline", id))
}
func (s *fakeStore) RequestSchedule(_ context.Context, id int64) error {
	return s.change(fmtRef("RequestSchedule", id))
}
func (s *fakeStore) Wall(context.Context) (db.Wall, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return db.Wall{}, s.fail
	}
	return s.wall, nil
}
func (s *fakeStore) SetWall(_ context.Context, w db.Wall) error {
	if err := s.change("SetWall"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wall = w
	return nil
}
func (s *fakeStore) ClearWall(context.Context) error {
	if err := s.change("ClearWall"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wall = db.Wall{}
	return nil
}
func (s *fakeStore) Components(context.Context) ([]db.Component, error) {
	return all(s, []db.Component{{Name: "collector", Interval: time.Minute}, {Name: "scheduler", Interval: time.Second}}, func(db.Component) bool { return true })
}
func (s *fakeStore) SetComponentPaused(_ context.Context, name string, paused bool) error {
	if name != "" && name != "scheduler" && name != "collector" {
		if s.fail != nil {
			return s.fail
		}
		return db.ErrNotFound
	}
	what := "Unpause"
	if paused {
		what = "Pause"
	}
	return s.change(what + " " + name)
}
func (s *fakeStore) ActiveUsers(_ context.Context, since time.Time) ([]db.User, error) {
	return all(s, []db.User{{Connector: "local", Name: "admin", LastLogin: time.Unix(1_700_000_000, 0)}},
		func(u db.User) bool { return !u.LastLogin.Before(since) })
}
func (s *fakeStore) ClearResourceVersions(_ context.Context, id int64) (int64, error) {
	return 1, s.change(fmtRef("ClearResourceVersions", id))
}
func (s *fakeStore) DeleteResourceVersionCaches(_ context.Context, id int64, v map[string]string) (int64, error) {
	return 1, s.change(fmtRef("DeleteResourceVersionCaches", id) + " " + v["v"])
}
func (s *fakeStore) RecordLogin(_ context.Context, connector, name string, _ time.Time) error {
	return s.change("RecordLogin " + connector + ":" + name)
}
func (s *fakeStore) SaveAccessToken(_ context.Context, hash, signed string, _ time.Time) error {
	if err := s.change("SaveAccessToken"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tokens == nil {
		s.tokens = map[string]string{}
	}
	s.tokens[hash] = signed
	return nil
}
func (s *fakeStore) AccessToken(_ context.Context, hash string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return "", s.fail
	}
	t, ok := s.tokens[hash]
	if !ok {
		return "", db.ErrNotFound
	}
	return t, nil
}
