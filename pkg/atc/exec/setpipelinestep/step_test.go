package setpipelinestep

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
)

// fake is the build the step runs in: what it reports, its artifacts'
// files and the pipelines it saves.
type fake struct {
	lines   []string
	files   map[string]string
	saved   map[string]db.Pipeline
	parents map[int64]db.PipelineParent
	teams   map[string]db.Team
	woken   bool
}

func (f *fake) add(format string, args ...any) {
	f.lines = append(f.lines, fmt.Sprintf(format, args...))
}

func (f *fake) Initializing()                   { f.add("initializing") }
func (f *fake) Starting()                       { f.add("starting") }
func (f *fake) Stdout(msg string)               { f.add("stdout %s", msg) }
func (f *fake) Stderr(msg string)               { f.add("stderr %s", msg) }
func (f *fake) SetPipelineChanged(changed bool) { f.add("changed %v", changed) }

func (f *fake) Finished(_ context.Context, succeeded bool) (bool, error) {
	f.add("finished %v", succeeded)
	return succeeded, nil
}

func (f *fake) Errored(_ context.Context, err error) (bool, error) {
	f.add("errored %v", err)
	return false, err
}

func (f *fake) ReadArtifactFile(_ context.Context, what, file string) ([]byte, error) {
	body, ok := f.files[file]
	if !ok {
		return nil, fmt.Errorf("%s: file %s: not found", what, file)
	}
	return []byte(body), nil
}

// InterpolateJSON fills in ((name)) only.
func (f *fake) InterpolateJSON(_ context.Context, doc json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(strings.ReplaceAll(string(doc), "((name))", "filled")), nil
}

func (f *fake) BuildPipeline(context.Context) (db.Pipeline, error) {
	return db.Pipeline{Name: "own", InstanceVars: map[string]any{"branch": "main"}}, nil
}

func (f *fake) Team(_ context.Context, name string) (db.Team, error) {
	t, ok := f.teams[name]
	if !ok {
		return db.Team{}, db.ErrNotFound
	}
	return t, nil
}

func (f *fake) JobBuildByID(_ context.Context, id int64) (db.JobBuild, error) {
	return db.JobBuild{JobID: 7}, nil
}

func (f *fake) PipelineInstance(_ context.Context, teamID int, ref db.PipelineRef) (db.Pipeline, error) {
	p, ok := f.saved[fmt.Sprintf("%d/%s", teamID, ref)]
	if !ok {
		return db.Pipeline{}, db.ErrNotFound
	}
	return p, nil
}

func (f *fake) SavePipelineFromBuild(_ context.Context, teamID int, ref db.PipelineRef, cfg concourse.Config, from int64, parent db.PipelineParent) (db.Pipeline, bool, error) {
	body, err := json.Marshal(cfg)
	if err != nil {
		return db.Pipeline{}, false, err
	}
	p := db.Pipeline{ID: int64(len(f.saved) + 1), Name: ref.Name, InstanceVars: ref.InstanceVars, Config: body, ConfigVersion: from + 1}
	f.saved[fmt.Sprintf("%d/%s", teamID, ref)] = p
	f.parents[p.ID] = parent
	return p, true, nil
}

func (f *fake) SetPipelineParent(_ context.Context, id int64, parent db.PipelineParent) error {
	f.parents[id] = parent
	return nil
}

func (f *fake) WakeScheduler() { f.woken = true }

const config = "resources:\n- {name: r, type: git, source: {uri: ((uri))}}\njobs:\n- {name: j, plan: [{get: r}]}\n"

func newFake() *fake {
	return &fake{files: map[string]string{"repo/p.yml": config, "repo/vars.yml": "uri: from-file\n"},
		saved: map[string]db.Pipeline{}, parents: map[int64]db.PipelineParent{}, teams: map[string]db.Team{"other": {ID: 2, Name: "other"}}}
}

func (f *fake) step(b Build, sp *concourse.SetPipelinePlan) Step {
	return Step{Plan: sp, Build: b, BaseTypes: []string{"git"}, Delegate: f, End: f, Files: f, Vars: f, Self: f, Store: f,
		Scheduler: f, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func TestSetPipelineSavesAndThenHasNoChanges(t *testing.T) {
	f := newFake()
	b := Build{ID: 40, Team: "main", TeamID: 1, Pipeline: "parent"}
	sp := &concourse.SetPipelinePlan{Name: "((name))", File: "repo/p.yml", Team: "other", VarFiles: []string{"repo/vars.yml"}}
	ok, err := f.step(b, sp).Run(context.Background())
	if !ok || err != nil {
		t.Fatalf("run: %v, %v; reported %q", ok, err, f.lines)
	}
	p, found := f.saved["2/filled"]
	if !found {
		t.Fatalf("not saved in team 2 as filled: %v", f.saved)
	}
	if !strings.Contains(string(p.Config), "from-file") {
		t.Errorf("config %s: want the var_files' uri", p.Config)
	}
	if got, want := f.parents[p.ID], (db.PipelineParent{JobID: 7, BuildID: 40}); got != want {
		t.Errorf("parent %+v, want %+v", got, want)
	}
	if !f.woken {
		t.Error("scheduler not woken")
	}
	want := []string{"stdout setting pipeline: filled\n", "changed true", "stdout done\n", "finished true"}
	if got := f.lines[len(f.lines)-4:]; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("reported %q, want it to end with %q", f.lines, want)
	}

	f.lines, f.woken = nil, false
	if ok, err := f.step(b, sp).Run(context.Background()); !ok || err != nil {
		t.Fatalf("again: %v, %v", ok, err)
	}
	want = []string{"initializing", "starting", "stdout no changes to apply.\n", "changed false", "finished true"}
	if strings.Join(f.lines, "|") != strings.Join(want, "|") || f.woken {
		t.Errorf("again: reported %q (woken %v), want %q", f.lines, f.woken, want)
	}
}

func TestSetPipelineFailsAndErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build Build
		plan  concourse.SetPipelinePlan
		want  string
	}{
		{"self of a one-off build", Build{ID: 1, Team: "main", TeamID: 1}, concourse.SetPipelinePlan{Name: "self", File: "repo/p.yml"},
			"errored set_pipeline: self: only a job's build has a pipeline of its own"},
		{"another team's, not main", Build{ID: 1, Team: "t", TeamID: 3}, concourse.SetPipelinePlan{Name: "p", File: "repo/p.yml", Team: "other"},
			"errored only the main team can set another team's pipeline"},
		{"no such team", Build{ID: 1, Team: "main", TeamID: 1}, concourse.SetPipelinePlan{Name: "p", File: "repo/p.yml", Team: "gone"},
			"errored team gone not found"},
		{"no file", Build{ID: 1, Team: "main", TeamID: 1}, concourse.SetPipelinePlan{Name: "p", File: "repo/none.yml"},
			"errored set_pipeline p: file repo/none.yml: not found"},
		{"a bad team name", Build{ID: 1, Team: "main", TeamID: 1}, concourse.SetPipelinePlan{Name: "p", File: "repo/p.yml", Team: "Bad Team"},
			"finished false"},
		{"an empty name", Build{ID: 1, Team: "main", TeamID: 1}, concourse.SetPipelinePlan{File: "repo/p.yml"}, "finished false"},
	} {
		f := newFake()
		ok, err := f.step(tc.build, &tc.plan).Run(context.Background())
		if ok || f.lines[len(f.lines)-1] != tc.want {
			t.Errorf("%s: %v, %v; reported %q, want last %q", tc.name, ok, err, f.lines, tc.want)
		}
		if strings.HasPrefix(tc.want, "errored") == (err == nil) {
			t.Errorf("%s: err %v", tc.name, err)
		}
	}
}
