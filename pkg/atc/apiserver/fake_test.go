package apiserver

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/porter-ci/porter/pkg/atc/buildlog"
	"github.com/porter-ci/porter/pkg/atc/lifecycle"
	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/hijack"
)

// fakeStore is an in-memory database with two teams (main: a pipeline p
// with job j and resource r, and an exposed pipeline pub; other: nothing),
// builds of each kind, a worker, a container and an artifact. With fail
// set, every call fails with it, as a database that is down does.
type fakeStore struct {
	mu        sync.Mutex
	fail      error
	teams     []db.Team
	pipelines []db.Pipeline
	jobs      []db.Job
	resources []db.Resource
	versions  []db.Version
	builds    []db.JobBuild
	workers   []db.Worker
	loads     map[string]db.WorkerLoad
	conts     []db.Container
	artifacts []db.Artifact
	// caches are the resource caches of every team.
	caches []db.TeamResourceCache
	// users are the local users' sessions (token generation and roles).
	users map[string]db.UserSession
	// sso are the single sign-on users by connector and ID.
	sso map[[2]string]fakeSSOUser
	// calls names the changes made, e.g. "PausePipeline 10".
	calls []string
	// wall and tokens (opaque token hash -> signed) are FlyStore's.
	wall   db.Wall
	tokens map[string]string
	// lastFilter is the last build filter Builds or JobBuilds was asked,
	// lastPage the last page of versions.
	lastFilter db.BuildFilter
	lastPage   db.VersionPage
}

func newFakeStore() *fakeStore {
	cfg := json.RawMessage(`{"jobs":[{"name":"j","plan":[{"get":"r","trigger":true}]}],"resources":[{"name":"r","type":"mock"}],"resource_types":[{"name":"rt","type":"registry-image","source":{"repository":"x"}}]}`)
	ownerOf := func(user string) db.TeamAuth { return db.TeamAuth{"owner": {Users: []string{user}}} }
	now := time.Unix(1_700_000_000, 0)
	return &fakeStore{
		teams: []db.Team{{ID: 1, Name: "main", Auth: ownerOf("local:admin")}, {ID: 2, Name: "other", Auth: ownerOf("local:other")}},
		pipelines: []db.Pipeline{
			{ID: 10, TeamID: 1, TeamName: "main", Name: "p", Config: cfg, ConfigVersion: 3},
			{ID: 11, TeamID: 1, TeamName: "main", Name: "pub", Config: cfg, Public: true},
			{ID: 13, TeamID: 1, TeamName: "main", Name: "p", Config: cfg, InstanceVars: map[string]any{"branch": "x"}},
		},
		jobs: []db.Job{
			{ID: 100, PipelineID: 10, PipelineName: "p", TeamID: 1, TeamName: "main", Name: "j", Active: true,
				Config: json.RawMessage(`{"name":"j","plan":[{"get":"r","trigger":true}]}`)},
			{ID: 101, PipelineID: 11, PipelineName: "pub", TeamID: 1, TeamName: "main", Name: "j", Active: true,
				Config: json.RawMessage(`{"name":"j","public":true,"plan":[{"get":"r"}]}`)},
		},
		resources: []db.Resource{{ID: 200, PipelineID: 10, PipelineName: "p", TeamID: 1, TeamName: "main", Name: "r", Type: "mock",
			Active: true, Config: json.RawMessage(`{"name":"r","type":"mock","webhook_token":"((token))"}`), LastCheckBuild: 3}},
		versions: []db.Version{{ID: 300, ResourceID: 200, Version: map[string]string{"v": "1"}, Enabled: true}},
		builds: []db.JobBuild{
			{Build: db.Build{ID: 1, TeamID: 1, TeamName: "main", Name: "1", Status: "succeeded", Server: "atc-0", Plan: json.RawMessage(`{"id":"1","task":{"name":"t","config":{"params":{"SECRET":"x"}}}}`), StartTime: now, EndTime: now}},
			{Build: db.Build{ID: 2, TeamID: 1, TeamName: "main", Name: "1", Status: "started", Server: "atc-1", Plan: json.RawMessage(`{}`), StartTime: now},
				PipelineID: 10, PipelineName: "p", JobID: 100, JobName: "j"},
			{Build: db.Build{ID: 3, TeamID: 1, TeamName: "main", Name: "1", Status: "succeeded", Plan: json.RawMessage(`{}`)},
				PipelineID: 10, PipelineName: "p", ResourceID: 200, ResourceName: "r"},
			{Build: db.Build{ID: 4, TeamID: 2, TeamName: "other", Name: "1", Status: "started", Plan: json.RawMessage(`{}`)}},
		},
		workers: []db.Worker{{Name: "w1", Platform: "linux", State: "running", Namespace: "porter-steps", StartTime: now},
			{Name: "w2", Platform: "linux", State: "running", Namespace: "porter-main", Team: "main", StartTime: now},
			{Name: "w3", Platform: "linux", State: "running", Namespace: "porter-other", Team: "other", StartTime: now}},
		conts: []db.Container{{Handle: "c1", TeamID: 1, BuildID: 1, BuildName: "1", StepName: "t", Type: "task", StepID: "s1", WorkerName: "w1", PlanID: "p1", State: concourse.ContainerWaiting},
			{Handle: "c2", TeamID: 1, BuildID: 2, BuildName: "1", StepName: "t", Type: "task", StepID: "s2", WorkerName: "w1"},
			{Handle: "c4", TeamID: 2, BuildID: 4, BuildName: "1", StepName: "t", Type: "task", StepID: "s4", WorkerName: "w1"}},
		artifacts: []db.Artifact{{ID: 1, TeamID: 1, BuildID: 1, Name: "out", Key: "artifacts/main/x.tar.zst", CreateTime: now, WorkerName: "w1"},
			{ID: 3, TeamID: 2, Key: "artifacts/other/y.tar.zst", CreateTime: now, WorkerName: "w1"}},
	}
}

// first is the first element that matches, or db.ErrNotFound.
func first[T any](s *fakeStore, items []T, match func(T) bool) (T, error) {
	var zero T
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return zero, s.fail
	}
	for _, it := range items {
		if match(it) {
			return it, nil
		}
	}
	return zero, db.ErrNotFound
}

// all are the elements that match.
func all[T any](s *fakeStore, items []T, match func(T) bool) ([]T, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return nil, s.fail
	}
	var out []T
	for _, it := range items {
		if match(it) {
			out = append(out, it)
		}
	}
	return out, nil
}

// change records a change; it fails as the store does.
func (s *fakeStore) change(what string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	s.calls = append(s.calls, what)
	return nil
}

func (s *fakeStore) changed(what string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.calls, what)
}

func (s *fakeStore) Team(_ context.Context, name string) (db.Team, error) {
	return first(s, s.teams, func(t db.Team) bool { return t.Name == name })
}
func (s *fakeStore) Teams(context.Context) ([]db.Team, error) {
	return all(s, s.teams, func(db.Team) bool { return true })
}
func (s *fakeStore) EnsureTeam(_ context.Context, name string, a db.TeamAuth) (db.Team, error) {
	if err := s.change("EnsureTeam " + name); err != nil {
		return db.Team{}, err
	}
	return db.Team{ID: 9, Name: name, Auth: a}, nil
}
func (s *fakeStore) LocalUserHash(context.Context, string) (string, error) { return "", db.ErrNotFound }

// LocalUserSession is a user's roles as token gave them; a user no token
// was made for does not exist.
func (s *fakeStore) LocalUserSession(_ context.Context, name string) (db.UserSession, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return db.UserSession{}, s.fail
	}
	sess, ok := s.users[name]
	if !ok {
		return db.UserSession{}, db.ErrNotFound
	}
	return sess, nil
}

type fakeSSOUser struct {
	name       string
	groups     []string
	generation int64
}

func (s *fakeStore) SaveSSOUser(_ context.Context, connector, userID, userName string, groups []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	if s.sso == nil {
		s.sso = map[[2]string]fakeSSOUser{}
	}
	u, ok := s.sso[[2]string{connector, userID}]
	if !ok {
		u.generation = int64(len(s.sso) + 100)
	}
	u.name, u.groups = userName, groups
	s.sso[[2]string{connector, userID}] = u
	return nil
}

// SSOUserSession gives roles by exact "connector:name" and
// "connector:group" (the database's rule, less its case folding).
func (s *fakeStore) SSOUserSession(_ context.Context, connector, userID string) (db.UserSession, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return db.UserSession{}, s.fail
	}
	u, ok := s.sso[[2]string{connector, userID}]
	if !ok {
		return db.UserSession{}, db.ErrNotFound
	}
	us := db.UserSession{Generation: u.generation, Teams: map[string][]string{}}
	for _, t := range s.teams {
		for role, m := range t.Auth {
			match := slices.Contains(m.Users, connector+":"+userID) || slices.Contains(m.Users, connector+":"+u.name)
			for _, g := range u.groups {
				match = match || slices.Contains(m.Groups, connector+":"+g)
			}
			if match {
				us.Teams[t.Name] = append(us.Teams[t.Name], role)
			}
		}
	}
	return us, nil
}

func (s *fakeStore) BumpSSOUserGeneration(_ context.Context, connector, userID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.sso[[2]string{connector, userID}]
	if !ok {
		return db.ErrNotFound
	}
	u.generation++
	s.sso[[2]string{connector, userID}] = u
	return nil
}

func (s *fakeStore) BumpLocalUserGeneration(_ context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	sess, ok := s.users[name]
	if !ok {
		return db.ErrNotFound
	}
	sess.Generation++
	s.users[name] = sess
	return nil
}

// addUser gives user these roles (team -> roles) and answers its token
// generation.
func (s *fakeStore) addUser(user string, teams map[string][]string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users == nil {
		s.users = map[string]db.UserSession{}
	}
	sess := s.users[user]
	sess.Teams = teams
	s.users[user] = sess
	return sess.Generation
}

func (s *fakeStore) Build(_ context.Context, id int64) (db.Build, error) {
	b, err := first(s, s.builds, func(b db.JobBuild) bool { return b.ID == id })
	return b.Build, err
}
func (s *fakeStore) BuildsByID(_ context.Context, ids []int64) (map[int64]db.Build, error) {
	bs, err := all(s, s.builds, func(b db.JobBuild) bool { return slices.Contains(ids, b.ID) })
	out := map[int64]db.Build{}
	for _, b := range bs {
		out[b.ID] = b.Build
	}
	return out, err
}
func (s *fakeStore) Builds(_ context.Context, f db.BuildFilter) ([]db.JobBuild, error) {
	s.filtered(f)
	return all(s, s.builds, func(b db.JobBuild) bool {
		return (f.TeamIDs == nil || slices.Contains(f.TeamIDs, b.TeamID)) && (f.PipelineID == 0 || b.PipelineID == f.PipelineID)
	})
}

// filtered remembers the last build filter asked for.
func (s *fakeStore) filtered(f db.BuildFilter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastFilter = f
}
func (s *fakeStore) JobBuildByID(_ context.Context, id int64) (db.JobBuild, error) {
	return first(s, s.builds, func(b db.JobBuild) bool { return b.ID == id })
}
func (s *fakeStore) BuildArtifacts(_ context.Context, id int64) ([]db.Artifact, error) {
	return all(s, s.artifacts, func(a db.Artifact) bool { return a.BuildID == id })
}
func (s *fakeStore) Artifact(_ context.Context, id int64) (db.Artifact, error) {
	return first(s, s.artifacts, func(a db.Artifact) bool { return a.ID == id })
}
func (s *fakeStore) Artifacts(_ context.Context, team int) ([]db.Artifact, error) {
	return all(s, s.artifacts, func(a db.Artifact) bool { return a.TeamID == team })
}
func (s *fakeStore) TeamResourceCaches(_ context.Context, team int) ([]db.TeamResourceCache, error) {
	return all(s, s.caches, func(c db.TeamResourceCache) bool { return c.TeamID == team })
}
func (s *fakeStore) CreateArtifact(_ context.Context, a db.Artifact) (db.Artifact, error) {
	if err := s.change("CreateArtifact " + a.Key); err != nil {
		return db.Artifact{}, err
	}
	a.ID = 2
	return a, nil
}

func (s *fakeStore) Pipeline(_ context.Context, team int, name string) (db.Pipeline, error) {
	return first(s, s.pipelines, func(p db.Pipeline) bool { return p.TeamID == team && p.Name == name && len(p.InstanceVars) == 0 })
}
func (s *fakeStore) PipelineByID(_ context.Context, id int64) (db.Pipeline, error) {
	return first(s, s.pipelines, func(p db.Pipeline) bool { return p.ID == id })
}
func (s *fakeStore) PipelineInstance(_ context.Context, team int, ref db.PipelineRef) (db.Pipeline, error) {
	want, _ := json.Marshal(ref.InstanceVars)
	return first(s, s.pipelines, func(p db.Pipeline) bool {
		got, _ := json.Marshal(p.InstanceVars)
		return p.TeamID == team && p.Name == ref.Name && string(got) == string(want)
	})
}
func (s *fakeStore) OrderPipelineInstances(_ context.Context, team int, name string, _ []map[string]any) error {
	if err := s.change("OrderPipelineInstances " + name); err != nil {
		return err
	}
	_, err := s.Pipeline(context.Background(), team, name)
	return err
}
func (s *fakeStore) Pipelines(_ context.Context, f db.PipelineFilter) ([]db.Pipeline, error) {
	return all(s, s.pipelines, func(p db.Pipeline) bool {
		return f.AllTeams || slices.Contains(f.TeamIDs, p.TeamID) || (f.Public && p.Public)
	})
}
func (s *fakeStore) SavePipelineInstance(_ context.Context, team int, ref db.PipelineRef, _ concourse.Config, _ int64) (db.Pipeline, bool, error) {
	if err := s.change("SavePipeline " + ref.String()); err != nil {
		return db.Pipeline{}, false, err
	}
	_, err := s.PipelineInstance(context.Background(), team, ref)
	return db.Pipeline{ID: 12, TeamID: team, Name: ref.Name, InstanceVars: ref.InstanceVars}, err != nil, nil
}
func (s *fakeStore) DeletePipeline(_ context.Context, id int64) error {
	return s.change(fmtRef("DeletePipeline", id))
}
func (s *fakeStore) PipelineUnfinishedBuilds(_ context.Context, id int64) ([]int64, error) {
	bs, err := all(s, s.builds, func(b db.JobBuild) bool { return b.PipelineID == id && b.Status == "started" })
	var ids []int64
	for _, b := range bs {
		ids = append(ids, b.ID)
	}
	return ids, err
}
func (s *fakeStore) PausePipeline(_ context.Context, id int64, _ string) error {
	return s.change(fmtRef("PausePipeline", id))
}
func (s *fakeStore) UnpausePipeline(_ context.Context, id int64) error {
	return s.change(fmtRef("UnpausePipeline", id))
}
func (s *fakeStore) SetPipelinePublic(_ context.Context, id int64, public bool) error {
	if public {
		return s.change(fmtRef("ExposePipeline", id))
	}
	return s.change(fmtRef("HidePipeline", id))
}
func (s *fakeStore) RenamePipeline(_ context.Context, id int64, name string) error {
	return s.change(fmtRef("RenamePipeline", id) + " " + name)
}
func (s *fakeStore) OrderPipelines(_ context.Context, _ int, names []string) error {
	for _, n := range names {
		if _, err := s.Pipeline(context.Background(), 1, n); err != nil {
			return err
		}
	}
	return s.change("OrderPipelines")
}

func (s *fakeStore) Job(_ context.Context, pipeline int64, name string) (db.Job, error) {
	return first(s, s.jobs, func(j db.Job) bool { return j.PipelineID == pipeline && j.Name == name })
}
func (s *fakeStore) Jobs(_ context.Context, pipeline int64) ([]db.Job, error) {
	return all(s, s.jobs, func(j db.Job) bool { return j.PipelineID == pipeline })
}
func (s *fakeStore) LookupPipelineJob(_ context.Context, pipeline int64, job string) (db.JobRef, error) {
	j, err := first(s, s.jobs, func(j db.Job) bool { return j.PipelineID == pipeline && j.Name == job })
	return db.JobRef{ID: j.ID, PipelineID: j.PipelineID, PipelineName: j.PipelineName, TeamID: j.TeamID, TeamName: j.TeamName,
		Name: j.Name, Config: j.Config, Active: j.Active}, err
}
func (s *fakeStore) PauseJob(_ context.Context, id int64, _ string) error {
	return s.change(fmtRef("PauseJob", id))
}
func (s *fakeStore) UnpauseJob(_ context.Context, id int64) error {
	return s.change(fmtRef("UnpauseJob", id))
}
func (s *fakeStore) JobBuilds(_ context.Context, job int64, f db.BuildFilter) ([]db.JobBuild, error) {
	s.filtered(f)
	return all(s, s.builds, func(b db.JobBuild) bool { return b.JobID == job })
}
func (s *fakeStore) JobBuildByName(_ context.Context, job int64, name string) (db.JobBuild, error) {
	return first(s, s.builds, func(b db.JobBuild) bool { return b.JobID == job && b.Name == name })
}
func (s *fakeStore) CreateJobBuild(_ context.Context, job int64, _ string, _ bool, _ []db.BuildInput) (db.JobBuild, error) {
	if err := s.change(fmtRef("CreateJobBuild", job)); err != nil {
		return db.JobBuild{}, err
	}
	return db.JobBuild{Build: db.Build{ID: 5, TeamID: 1, TeamName: "main", Name: "2", Status: "pending"}, JobID: job, JobName: "j",
		PipelineID: 10, PipelineName: "p"}, nil
}
func (s *fakeStore) RerunJobBuild(_ context.Context, b db.JobBuild, _ string) (db.JobBuild, error) {
	if err := s.change(fmtRef("RerunJobBuild", b.ID)); err != nil {
		return db.JobBuild{}, err
	}
	b.ID, b.Name, b.Status = 6, b.Name+".1", "pending"
	return b, nil
}

func (s *fakeStore) Resource(_ context.Context, pipeline int64, name string) (db.Resource, error) {
	return first(s, s.resources, func(r db.Resource) bool { return r.PipelineID == pipeline && r.Name == name })
}
func (s *fakeStore) Resources(_ context.Context, pipeline int64) ([]db.Resource, error) {
	return all(s, s.resources, func(r db.Resource) bool { return r.PipelineID == pipeline })
}
func (s *fakeStore) ResourcesOfPipelines(_ context.Context, pipelines []int64) ([]db.Resource, error) {
	rs, err := all(s, s.resources, func(r db.Resource) bool { return slices.Contains(pipelines, r.PipelineID) })
	slices.SortStableFunc(rs, func(a, b db.Resource) int {
		return slices.Index(pipelines, a.PipelineID) - slices.Index(pipelines, b.PipelineID)
	})
	return rs, err
}
func (s *fakeStore) LookupPipelineResource(_ context.Context, pipeline int64, name string) (db.ResourceRef, error) {
	r, err := first(s, s.resources, func(r db.Resource) bool { return r.PipelineID == pipeline && r.Name == name })
	return db.ResourceRef{ID: r.ID, PipelineID: r.PipelineID, PipelineName: r.PipelineName, TeamID: r.TeamID, TeamName: r.TeamName,
		Name: r.Name, Type: r.Type, Config: r.Config, Active: r.Active, LastCheckBuild: r.LastCheckBuild}, err
}
func (s *fakeStore) DeleteResourceCaches(_ context.Context, id int64) (int64, error) {
	return 1, s.change(fmtRef("DeleteResourceCaches", id))
}
func (s *fakeStore) Versions(_ context.Context, res int64, p db.VersionPage) ([]db.Version, bool, bool, error) {
	s.mu.Lock()
	s.lastPage = p
	s.mu.Unlock()
	vs, err := all(s, s.versions, func(v db.Version) bool { return v.ResourceID == res })
	return vs, false, false, err
}
func (s *fakeStore) VersionByID(_ context.Context, res, id int64) (db.Version, error) {
	return first(s, s.versions, func(v db.Version) bool { return v.ResourceID == res && v.ID == id })
}

// VersionBuilds: in the fake, every job build of the resource's pipeline
// had each version as input; build 2 produced version 300.
func (s *fakeStore) VersionBuilds(_ context.Context, res, id int64, input bool) ([]db.JobBuild, error) {
	r, err := first(s, s.resources, func(r db.Resource) bool { return r.ID == res })
	if err != nil {
		return nil, err
	}
	return all(s, s.builds, func(b db.JobBuild) bool {
		return b.PipelineID == r.PipelineID && b.JobID != 0 && (input || (b.ID == 2 && id == 300))
	})
}

// versionChange records a change of one of a resource's versions: a
// version it does not have is not found.
func (s *fakeStore) versionChange(what string, res, id int64) error {
	if _, err := s.VersionByID(context.Background(), res, id); err != nil {
		return err
	}
	return s.change(fmtRef(what, id))
}
func (s *fakeStore) PinVersion(_ context.Context, res, id int64) error {
	return s.versionChange("PinVersion", res, id)
}
func (s *fakeStore) UnpinResource(_ context.Context, id int64) error {
	return s.change(fmtRef("UnpinResource", id))
}
func (s *fakeStore) SetBuildComment(_ context.Context, id int64, comment string) error {
	if err := s.change(fmtRef("SetBuildComment", id)); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.builds {
		if s.builds[i].ID == id {
			s.builds[i].Comment = comment
			return nil
		}
	}
	return fmt.Errorf("set comment of build %d: %w", id, db.ErrNotFound)
}
func (s *fakeStore) SetPinComment(_ context.Context, id int64, _ string) error {
	return s.change(fmtRef("SetPinComment", id))
}
func (s *fakeStore) SetVersionEnabled(_ context.Context, res, id int64, enabled bool) error {
	if enabled {
		return s.versionChange("EnableVersion", res, id)
	}
	return s.versionChange("DisableVersion", res, id)
}

func (s *fakeStore) Worker(_ context.Context, name string) (db.Worker, error) {
	return first(s, s.workers, func(w db.Worker) bool { return w.Name == name })
}
func (s *fakeStore) Workers(context.Context) ([]db.Worker, error) {
	return all(s, s.workers, func(db.Worker) bool { return true })
}
func (s *fakeStore) WorkerLoads(context.Context) (map[string]db.WorkerLoad, error) {
	if err := s.change("WorkerLoads"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.loads), nil
}
func (s *fakeStore) LandWorker(_ context.Context, name string) error {
	return s.workerChange("LandWorker", name)
}
func (s *fakeStore) RetireWorker(_ context.Context, name string) error {
	return s.workerChange("RetireWorker", name)
}
func (s *fakeStore) PruneWorker(_ context.Context, name string) error {
	if _, err := s.Worker(context.Background(), name); err != nil {
		return err
	}
	return db.ErrWorkerRunning
}
func (s *fakeStore) workerChange(what, name string) error {
	if _, err := s.Worker(context.Background(), name); err != nil {
		return err
	}
	return s.change(what + " " + name)
}

func (s *fakeStore) Container(_ context.Context, handle string) (db.Container, error) {
	return first(s, s.conts, func(c db.Container) bool { return c.Handle == handle })
}
func (s *fakeStore) Containers(_ context.Context, f db.ContainerFilter) ([]db.Container, error) {
	return all(s, s.conts, func(c db.Container) bool { return c.TeamID == f.TeamID })
}

func (s *fakeStore) InterceptStarted(context.Context, string) error { return nil }
func (s *fakeStore) InterceptEnded(context.Context, string) error   { return nil }

func fmtRef(what string, id int64) string { return what + " " + strconv.FormatInt(id, 10) }

// fakeEngine records what the handlers asked of it.
type fakeEngine struct {
	store *fakeStore
	// blobs hold the task caches the lifecycle workflows move and delete.
	blobs *fakeBlobs
	fail  error
	// waiting is why a job's next build would wait (NextInputs).
	waiting string
}

func (e *fakeEngine) CreateBuild(_ context.Context, team db.Team, _ string, _ concourse.Plan, _ json.RawMessage) (db.Build, error) {
	if e.fail != nil {
		return db.Build{}, e.fail
	}
	return db.Build{ID: 7, TeamID: team.ID, TeamName: team.Name, Name: "7", Status: "started"}, e.store.change("CreateBuild " + team.Name)
}
func (e *fakeEngine) AbortBuild(_ context.Context, b db.Build) error {
	return e.store.change(fmtRef("AbortBuild", b.ID))
}
func (e *fakeEngine) ResumeBuild(_ context.Context, b db.Build, _ string) (db.JobBuild, error) {
	if e.fail != nil {
		return db.JobBuild{}, e.fail
	}
	return db.JobBuild{Build: db.Build{ID: b.ID + 1, TeamID: b.TeamID, TeamName: b.TeamName, Name: b.Name + ".1", Status: "pending"}},
		e.store.change(fmtRef("ResumeBuild", b.ID))
}
func (e *fakeEngine) WakeScheduler() {}

// lifecycle is the engine's own workflows (pkg/atc/lifecycle) over the
// fakes: the handlers' tests see what renaming or destroying does.
func (e *fakeEngine) lifecycle() lifecycle.Workflows {
	return lifecycle.Workflows{Store: e.store, Blobs: e.blobs, Log: discardLog(),
		Abort: func(ctx context.Context, id int64) error { return e.AbortBuild(ctx, db.Build{ID: id}) }}
}
func (e *fakeEngine) DestroyTeam(ctx context.Context, team db.Team) error {
	return e.lifecycle().DestroyTeam(ctx, team)
}
func (e *fakeEngine) RenameTeam(ctx context.Context, team db.Team, name string) error {
	return e.lifecycle().RenameTeam(ctx, team, name)
}
func (e *fakeEngine) DestroyPipeline(ctx context.Context, team string, p db.Pipeline) error {
	return e.lifecycle().DestroyPipeline(ctx, team, p)
}
func (e *fakeEngine) RenamePipeline(ctx context.Context, team string, p db.Pipeline, name string) error {
	return e.lifecycle().RenamePipeline(ctx, team, p, name)
}
func (e *fakeEngine) ClearTaskCaches(ctx context.Context, prefix string) (int64, error) {
	return e.lifecycle().ClearTaskCaches(ctx, prefix)
}
func (e *fakeEngine) CheckResourceType(ctx context.Context, team db.Team, by, _ string, _ concourse.ResourceType, _ map[string]string) (db.Build, error) {
	return e.CreateBuild(ctx, team, by, concourse.Plan{}, nil)
}
func (e *fakeEngine) StartCheck(_ context.Context, res db.ResourceRef, _ map[string]string) (db.JobBuild, error) {
	if e.fail != nil {
		return db.JobBuild{}, e.fail
	}
	return db.JobBuild{Build: db.Build{ID: 8, TeamName: res.TeamName, Name: "8", Status: "started"}, ResourceName: res.Name},
		e.store.change(fmtRef("StartCheck", res.ID))
}
func (e *fakeEngine) NextInputs(context.Context, db.JobRef) (map[string]db.BuildInput, string, error) {
	return map[string]db.BuildInput{}, e.waiting, e.fail
}

// Events is the fake's build log: one gap after from, nothing when it
// fails (a follower logs a read error and ends).
func (e *fakeEngine) Events(_ context.Context, _ db.Build, from uint64) iter.Seq[[]buildlog.Record] {
	return func(yield func([]buildlog.Record) bool) {
		if e.fail == nil {
			yield([]buildlog.Record{{ID: from + 1}})
		}
	}
}
func (e *fakeEngine) StepConnected(string) bool { return false }
func (e *fakeEngine) OpenSession(context.Context, string, *eventspb.SessionOpen) (hijack.Session, error) {
	return nil, e.fail
}
func (e *fakeEngine) WorkerResourceTypes(string) []concourse.WorkerResourceType {
	return []concourse.WorkerResourceType{{Type: "mock", Image: "porter.local/mock"}}
}

// testAPI is the API over fakes, with tokens for its users.
type testAPI struct {
	*Server
	store  *fakeStore
	engine *fakeEngine
	blobs  *fakeBlobs
	issuer *auth.Issuer
	logs   *buildlog.Logs
}

func newTestAPI(t testing.TB) *testAPI {
	t.Helper()
	return newTestAPIWithOIDC(t, nil)
}

// newTestAPIWithOIDC is newTestAPI with single sign-on through oidc (nil:
// none).
func newTestAPIWithOIDC(t testing.TB, oidc *auth.OIDCConfig) *testAPI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	const external = "http://porter.test"
	iss := auth.NewIssuer(key, external+"/sky/issuer", time.Hour)
	store := newFakeStore()
	blobs := newFakeBlobs()
	engine := &fakeEngine{store: store, blobs: blobs}
	blobs.put("artifacts/main/x.tar.zst", zstdTar(t, "hello.txt", "hello"))
	blobs.put("builds/1/build.json", []byte(`{"id":1}`))
	blobs.put("builds/1/steps/s1/result.json", []byte(`{"exit_status":0}`))
	blobs.put("builds/1/steps/s1/log", []byte(`not JSON, not read`))
	blobs.put("builds/1/steps/s1/pod.yaml", []byte("kind: Pod\nspec:\n  containers:\n  - image: busybox@sha256:00\n"))
	blobs.put("builds/1/steps/s2/result.json", []byte(`{"step_id":"s2","outputs":[{"name":"out","key":"blobs/main/s2/u.tar.zst","digest":"blake3:aa","size":5}]}`))
	blobs.put("blobs/main/s2/u.tar.zst", zstdTar(t, "made.txt", "made by s2"))
	// The builds' logs are the real ones, over the in-memory bucket.
	logs, err := buildlog.New(buildlog.Config{Store: blobs, Index: buildlog.NewMemIndex(), Log: discardLog()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{ExternalURL: external, ServerID: "atc-0", BaseTypes: []string{"mock", "registry-image"}, ArtifactWorker: "w1",
		BlobstoreBucket: "porter", OIDC: oidc}, Deps{Store: store, Engine: engine, Events: engine, Logs: logs, Blobs: blobs, Issuer: iss, Log: discardLog(),
		Credentials: fakeCreds{"main/p/token": "t0k3n", "main/login": map[string]any{"user": "u"}}})
	if err != nil {
		t.Fatal(err)
	}
	return &testAPI{Server: s, store: store, engine: engine, blobs: blobs, issuer: iss, logs: logs}
}

// fakeCreds is a credential manager: "team/pipeline/name" or "team/name"
// to the value.
type fakeCreds map[string]any

func (f fakeCreds) Lookup(_ context.Context, team, pipeline, name string) (any, bool, error) {
	if v, ok := f[team+"/"+pipeline+"/"+name]; ok {
		return v, true, nil
	}
	v, ok := f[team+"/"+name]
	return v, ok, nil
}

// token is a bearer token of a local user with roles (team -> role).
func (a *testAPI) token(t testing.TB, user string, roles map[string]string) string {
	t.Helper()
	teams := map[string][]string{}
	for team, role := range roles {
		teams[team] = []string{role}
	}
	gen := a.store.addUser(user, teams)
	tok, err := a.issuer.Issue(auth.Claims{Subject: auth.SubjectFor(auth.LocalConnector, user), UserID: user, Name: user,
		Connector: auth.LocalConnector, Teams: teams, Generation: gen})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// fakeBlobs is an in-memory bucket. With fail set, every call fails.
type fakeBlobs struct {
	mu   sync.Mutex
	fail error
	objs map[string][]byte
}

func newFakeBlobs() *fakeBlobs { return &fakeBlobs{objs: map[string][]byte{}} }

func (b *fakeBlobs) put(key string, data []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.objs[key] = data
}

func (b *fakeBlobs) has(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.objs[key]
	return ok
}

func (b *fakeBlobs) Put(_ context.Context, key string, body io.Reader, _ int64, _ blobstore.PutOptions) (blobstore.ObjectInfo, error) {
	data, err := io.ReadAll(body)
	if err != nil {
		return blobstore.ObjectInfo{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fail != nil {
		return blobstore.ObjectInfo{}, b.fail
	}
	b.objs[key] = data
	return blobstore.ObjectInfo{Key: key, Size: int64(len(data))}, nil
}

func (b *fakeBlobs) Get(_ context.Context, key string) (io.ReadCloser, blobstore.ObjectInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fail != nil {
		return nil, blobstore.ObjectInfo{}, b.fail
	}
	data, ok := b.objs[key]
	if !ok {
		return nil, blobstore.ObjectInfo{}, fmt.Errorf("%s: %w", key, blobstore.ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(data)), blobstore.ObjectInfo{Key: key, Size: int64(len(data))}, nil
}

func (b *fakeBlobs) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	rc, info, err := b.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	if offset < 0 || length <= 0 || offset+length > info.Size {
		return nil, fmt.Errorf("range %d+%d of %s (%d bytes)", offset, length, key, info.Size)
	}
	data, _ := io.ReadAll(rc)
	return io.NopCloser(bytes.NewReader(data[offset : offset+length])), nil
}

func (b *fakeBlobs) Stat(ctx context.Context, key string) (blobstore.ObjectInfo, error) {
	_, info, err := b.Get(ctx, key)
	return info, err
}

func (b *fakeBlobs) Copy(ctx context.Context, src, dst string) (blobstore.ObjectInfo, error) {
	rc, _, err := b.Get(ctx, src)
	if err != nil {
		return blobstore.ObjectInfo{}, err
	}
	return b.Put(ctx, dst, rc, -1, blobstore.PutOptions{})
}

func (b *fakeBlobs) Delete(_ context.Context, key string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fail != nil {
		return b.fail
	}
	delete(b.objs, key)
	return nil
}

func (b *fakeBlobs) List(_ context.Context, prefix string) ([]blobstore.ObjectInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fail != nil {
		return nil, b.fail
	}
	var out []blobstore.ObjectInfo
	for k, v := range b.objs {
		if strings.HasPrefix(k, prefix) {
			out = append(out, blobstore.ObjectInfo{Key: k, Size: int64(len(v))})
		}
	}
	slices.SortFunc(out, func(x, y blobstore.ObjectInfo) int { return strings.Compare(x.Key, y.Key) })
	return out, nil
}

// tarOf is a tar of one file.
func tarOf(t testing.TB, name, content string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte(content)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// zstdTar is an artifact as the blobstore keeps it: tar through zstd.
func zstdTar(t testing.TB, name, content string) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(tarOf(t, name, content), nil)
}

// tgz is a directory as fly execute -i uploads it: tar through gzip.
func tgz(t testing.TB, name, content string) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(tarOf(t, name, content)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// InterpolateString fills in ((token)) only: "s3cret".
func (e *fakeEngine) InterpolateString(_ context.Context, _ db.Pipeline, s string) (string, error) {
	if e.fail != nil {
		return "", e.fail
	}
	return strings.ReplaceAll(s, "((token))", "s3cret"), nil
}

// RequestCheck queues a check of a resource.
func (s *fakeStore) RequestCheck(_ context.Context, id int64, _ map[string]string) error {
	if _, err := first(s, s.resources, func(r db.Resource) bool { return r.ID == id }); err != nil {
		return err
	}
	return s.change(fmtRef("RequestCheck", id))
}
