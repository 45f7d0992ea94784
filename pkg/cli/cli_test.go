package cli_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atcclient/atcfake"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/cli"
	"github.com/porter-ci/porter/pkg/events"
)

// syncBuffer is a bytes.Buffer that a test can read while a command writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type run struct {
	code           int
	stdout, stderr string
}

type opts struct {
	atcURL   string
	terminal bool
	ctx      context.Context
	// started, if set, is called with the stderr buffer once the command runs.
	started func(stderr *syncBuffer)
}

func runCLI(t *testing.T, o opts, args ...string) run {
	t.Helper()
	var stdout, stderr syncBuffer
	ctx := o.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	env := cli.Env{
		Stdin:  strings.NewReader(""),
		Stdout: &stdout,
		Stderr: &stderr,
		Getenv: func(k string) string {
			if k == cli.ATCURLEnv {
				return o.atcURL
			}
			return ""
		},
		IsTerminal: func(io.Writer) bool { return o.terminal },
		Now:        func() time.Time { return time.Unix(1_700_000_600, 0) },
		Version:    "v1.2.3",
	}
	if o.started != nil {
		o.started(&stderr)
	}
	code := cli.Run(ctx, args, env)
	return run{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

const oneInputTask = `platform: linux
image_resource:
  type: registry-image
  source: {repository: busybox}
inputs:
- name: repo
outputs:
- name: out
run:
  path: sh
  args: [-c, "make"]
`

const twoInputTask = `platform: linux
image_resource:
  type: registry-image
  source: {repository: busybox}
inputs:
- name: repo
- name: tools
- name: extra
  optional: true
outputs:
- name: out
- name: report
run: {path: make}
`

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func logEv(source, payload string) events.Event {
	return events.Log{Origin: events.Origin{ID: "task", Source: source}, Payload: payload}
}

// scripted returns an OnCreate that ends builds with status and, for
// tasks that ran, exit status; outputs are attached to the task step.
func scripted(status events.BuildStatus, exit *int, outputs map[string]api.ArtifactRef, extra ...events.Event) func(api.CreateBuildRequest) (*atcfake.Build, error) {
	return func(api.CreateBuildRequest) (*atcfake.Build, error) {
		evs := []events.Event{
			events.Status{Status: events.StatusStarted},
			events.InitializeTask{Origin: events.Origin{ID: "task"}},
			events.StartTask{Origin: events.Origin{ID: "task"}, Config: events.TaskConfig{Run: events.TaskRunConfig{Path: "sh", Args: []string{"-c", "make"}}}},
			logEv("stdout", "building\n"),
			logEv("stderr", "warning: careful\n"),
		}
		evs = append(evs, extra...)
		if exit != nil {
			evs = append(evs, events.FinishTask{Origin: events.Origin{ID: "task"}, ExitStatus: *exit})
		}
		evs = append(evs, events.Status{Status: status})
		return &atcfake.Build{
			Build: api.Build{Name: "one-off", Team: "main", Status: string(status),
				Steps: []api.Step{{ID: "task", Name: "one-off", Type: "task", Status: string(status), ExitStatus: exit, Outputs: outputs}}},
			Events: evs,
		}, nil
	}
}

func intp(i int) *int { return &i }

// extractUpload extracts an uploaded artifact and returns its files.
func extractUpload(t *testing.T, srv *atcfake.Server, ref api.ArtifactRef) map[string]string {
	t.Helper()
	data, ok := srv.Artifact(ref.Key)
	if !ok {
		t.Fatalf("artifact %s not stored", ref.Key)
	}
	dec, err := zstd.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	dir := t.TempDir()
	if err := blobstore.Extract(context.Background(), dec, dir); err != nil {
		t.Fatalf("upload is not a tar.zst: %v", err)
	}
	return files(t, dir)
}

// files maps the regular files under dir to their contents.
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		code     int
		stdout   string
		stderr   string
		noStdout bool
	}{
		{args: nil, code: 2, stderr: "usage: atc-porter-runtime"},
		{args: []string{"-h"}, code: 0, stdout: "commands:"},
		{args: []string{"help"}, code: 0, stdout: "commands:"},
		{args: []string{"frobnicate"}, code: 2, stderr: `unknown command "frobnicate"`},
		{args: []string{"execute", "-h"}, code: 0, stdout: "-i, --input NAME=DIR"},
		{args: []string{"execute", "--help"}, code: 0, stdout: "usage: atc-porter-runtime execute"},
		{args: []string{"watch", "-h"}, code: 0, stdout: "usage: atc-porter-runtime watch"},
		{args: []string{"abort", "-h"}, code: 0, stdout: "usage: atc-porter-runtime abort"},
		{args: []string{"builds", "-h"}, code: 0, stdout: "--count"},
		{args: []string{"version", "-h"}, code: 0, stdout: "usage: atc-porter-runtime version"},
		{args: []string{"version"}, code: 0, stdout: "v1.2.3\n"},
		{args: []string{"execute"}, code: 2, stderr: "-c TASK.yml is required"},
		{args: []string{"execute", "-c", "t.yml", "stray"}, code: 2, stderr: `unexpected argument "stray"`},
		{args: []string{"execute", "-c", "t.yml", "-i", "noequals"}, code: 2, stderr: `"noequals" is not NAME=DIR`},
		{args: []string{"execute", "-c", "t.yml", "--timeout", "soon"}, code: 2, stderr: `--timeout "soon"`},
		{args: []string{"execute", "--bogus"}, code: 2, stderr: "flag provided but not defined: -bogus"},
		{args: []string{"watch"}, code: 2, stderr: "want one BUILD argument"},
		{args: []string{"watch", "x"}, code: 2, stderr: `"x" is not a build id`},
		{args: []string{"abort", "1", "2"}, code: 2, stderr: "want one BUILD argument, got 2"},
		{args: []string{"serve"}, code: 2, stderr: "serve is not part of this program"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := runCLI(t, opts{atcURL: "http://127.0.0.1:1"}, tc.args...)
			if r.code != tc.code {
				t.Errorf("exit %d, want %d\nstderr: %s", r.code, tc.code, r.stderr)
			}
			if !strings.Contains(r.stdout, tc.stdout) {
				t.Errorf("stdout %q does not contain %q", r.stdout, tc.stdout)
			}
			if !strings.Contains(r.stderr, tc.stderr) {
				t.Errorf("stderr %q does not contain %q", r.stderr, tc.stderr)
			}
		})
	}
}

func TestServeIsDelegated(t *testing.T) {
	var got []string
	code := cli.Run(context.Background(), []string{"serve", "--listen", ":9"}, cli.Env{
		Serve: func(_ context.Context, args []string) int { got = args; return 7 },
	})
	if code != 7 || !reflect.DeepEqual(got, []string{"--listen", ":9"}) {
		t.Fatalf("code %d args %q", code, got)
	}
}

func TestExecuteRefusesBadTaskFilesBeforeUploading(t *testing.T) {
	srv := atcfake.New(t)
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	writeFile(t, repo, "f", "x")
	for _, tc := range []struct {
		name string
		task string
		args []string
		want []string
	}{
		{name: "bad yaml", task: "platform: [linux\n", want: []string{"task.yml: parse task config"}},
		{name: "unknown field", task: oneInputTask + "bogus: 1\n", want: []string{"task.yml: parse task config", "bogus"}},
		{name: "invalid", task: "inputs: [{name: a}]\n", want: []string{
			"task.yml: invalid task configuration:", "  - missing 'platform'", "  - missing path to executable to run"}},
		{name: "missing input", task: twoInputTask, args: []string{"-i", "repo=" + repo},
			want: []string{`missing input "tools": give it with -i tools=DIR`}},
		{name: "several missing inputs", task: twoInputTask,
			want: []string{`missing input "repo"`, `missing input "tools"`}},
		{name: "unknown input", task: oneInputTask, args: []string{"-i", "rpeo=" + repo},
			want: []string{`-i rpeo: the task has no input "rpeo" (its inputs: repo)`}},
		{name: "unknown output", task: oneInputTask, args: []string{"-o", "result=" + dir},
			want: []string{`-o result: the task has no output "result" (its outputs: out)`}},
		{name: "input is not a directory", task: oneInputTask, args: []string{"-i", "repo=" + filepath.Join(repo, "f")},
			want: []string{"not a directory"}},
		{name: "input does not exist", task: oneInputTask, args: []string{"-i", "repo=" + filepath.Join(dir, "nope")},
			want: []string{"no such file or directory"}},
		{name: "mapping of an unknown input", task: oneInputTask, args: []string{"-m", "nope=repo"},
			want: []string{`--input-mapping nope=repo: the task has no input "nope"`}},
		{name: "input given twice", task: oneInputTask, args: []string{"-i", "repo=" + repo, "-i", "repo=" + repo},
			want: []string{"-i repo is given more than once"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task := writeFile(t, t.TempDir(), "task.yml", tc.task)
			args := append([]string{"execute", "-c", task}, tc.args...)
			r := runCLI(t, opts{atcURL: srv.URL}, args...)
			if r.code != 2 {
				t.Errorf("exit %d, want 2", r.code)
			}
			for _, w := range tc.want {
				w = strings.ReplaceAll(w, "task.yml", task)
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr does not contain %q:\n%s", w, r.stderr)
				}
			}
		})
	}
	if n := len(srv.Uploads()); n != 0 {
		t.Fatalf("%d uploads after refused task files", n)
	}
	if n := len(srv.Creates()); n != 0 {
		t.Fatalf("%d builds created after refused task files", n)
	}
}

func TestExecuteRunsAndDownloadsOutputs(t *testing.T) {
	srv := atcfake.New(t)
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	writeFile(t, repo, "main.go", "package main\n")
	writeFile(t, repo, "sub/data.txt", "data\n")
	tools := filepath.Join(dir, "tools")
	writeFile(t, tools, "bin/tool", "#!/bin/sh\n")

	// The task's output: an artifact the fake already has.
	produced := filepath.Join(dir, "produced")
	writeFile(t, produced, "result.txt", "42\n")
	outRef := uploadDir(t, srv, produced)
	srv.OnCreate = scripted(events.StatusSucceeded, intp(0), map[string]api.ArtifactRef{"out": outRef})

	task := writeFile(t, dir, "ci/task.yml", twoInputTask)
	outDir := filepath.Join(dir, "results", "out")
	r := runCLI(t, opts{atcURL: srv.URL}, "execute", "-c", task,
		"-i", "repo="+repo, "--input", "toolbox="+tools, "--input-mapping", "tools=toolbox",
		"-o", "out="+outDir, "-p", "A=1", "--param", "B=two=2",
		"--privileged", "--timeout", "30m", "--image", "alpine:3")
	t.Logf("stderr:\n%s", r.stderr)
	if r.code != 0 {
		t.Fatalf("exit %d\nstderr: %s", r.code, r.stderr)
	}
	if r.stdout != "building\n" {
		t.Errorf("stdout = %q, want only the task's stdout", r.stdout)
	}
	for _, w := range []string{"executing build 1 at " + srv.URL + "/api/v1/builds/1\n", "warning: careful\n",
		"initializing\n", "running sh -c make\n", "succeeded\n"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr does not contain %q:\n%s", w, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "\x1b[") || strings.Contains(r.stderr, "uploading") {
		t.Errorf("stderr is not a terminal, yet has escapes or progress:\n%q", r.stderr)
	}

	creates := srv.Creates()
	if len(creates) != 1 {
		t.Fatalf("%d builds created", len(creates))
	}
	step := creates[0].Task
	if step.Config != twoInputTask {
		t.Errorf("config sent = %q", step.Config)
	}
	if !reflect.DeepEqual(step.InputMapping, map[string]string{"tools": "toolbox"}) ||
		!reflect.DeepEqual(step.Params, map[string]string{"A": "1", "B": "two=2"}) ||
		!step.Privileged || step.Timeout != "30m" || step.Image != "alpine:3" {
		t.Errorf("step sent = %+v", step)
	}
	if len(step.Inputs) != 2 {
		t.Fatalf("inputs sent = %v", step.Inputs)
	}
	if got, want := extractUpload(t, srv, step.Inputs["repo"]), files(t, repo); !reflect.DeepEqual(got, want) {
		t.Errorf("repo uploaded as %v, want %v", got, want)
	}
	if got, want := extractUpload(t, srv, step.Inputs["toolbox"]), files(t, tools); !reflect.DeepEqual(got, want) {
		t.Errorf("toolbox uploaded as %v, want %v", got, want)
	}
	if got := files(t, outDir); !reflect.DeepEqual(got, map[string]string{"result.txt": "42\n"}) {
		t.Errorf("output downloaded as %v", got)
	}
}

func uploadDir(t *testing.T, srv *atcfake.Server, dir string) api.ArtifactRef {
	t.Helper()
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := blobstore.WriteTar(context.Background(), enc, dir); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return srv.PutArtifact(buf.Bytes())
}

func TestExecuteOneInputUsesTheCurrentDirectory(t *testing.T) {
	srv := atcfake.New(t)
	cwd := t.TempDir()
	writeFile(t, cwd, "Makefile", "all:\n")
	task := writeFile(t, t.TempDir(), "task.yml", oneInputTask)
	t.Chdir(cwd)
	r := runCLI(t, opts{atcURL: srv.URL}, "execute", "-c", task)
	if r.code != 0 {
		t.Fatalf("exit %d\nstderr: %s", r.code, r.stderr)
	}
	creates := srv.Creates()
	if len(creates) != 1 {
		t.Fatalf("%d builds created", len(creates))
	}
	if got := extractUpload(t, srv, creates[0].Task.Inputs["repo"]); !reflect.DeepEqual(got, map[string]string{"Makefile": "all:\n"}) {
		t.Fatalf("repo uploaded as %v", got)
	}
}

func TestExecuteExitStatuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status events.BuildStatus
		exit   *int
		want   int
	}{
		{"succeeded", events.StatusSucceeded, intp(0), 0},
		{"failed with the task's status", events.StatusFailed, intp(5), 5},
		{"failed without a task status", events.StatusFailed, nil, 1},
		{"errored", events.StatusErrored, nil, 2},
		{"aborted", events.StatusAborted, nil, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := atcfake.New(t)
			srv.OnCreate = scripted(tc.status, tc.exit, nil,
				events.Error{Message: "something broke", Origin: events.Origin{ID: "task"}})
			dir := t.TempDir()
			task := writeFile(t, dir, "task.yml", oneInputTask)
			r := runCLI(t, opts{atcURL: srv.URL}, "execute", "-c", task, "-i", "repo="+dir)
			if r.code != tc.want {
				t.Errorf("exit %d, want %d\nstderr: %s", r.code, tc.want, r.stderr)
			}
			if !strings.Contains(r.stderr, "something broke\n") || !strings.Contains(r.stderr, string(tc.status)+"\n") {
				t.Errorf("stderr = %q", r.stderr)
			}

			// watch of the finished build replays it and ends the same way.
			w := runCLI(t, opts{atcURL: srv.URL}, "watch", "1")
			if w.code != tc.want || w.stdout != "building\n" {
				t.Errorf("watch: exit %d, stdout %q; want %d", w.code, w.stdout, tc.want)
			}
		})
	}
}

func TestExecuteShowsServerErrors(t *testing.T) {
	srv := atcfake.New(t)
	srv.OnCreate = func(api.CreateBuildRequest) (*atcfake.Build, error) {
		return nil, errors.New("task config: image is not allowed")
	}
	dir := t.TempDir()
	task := writeFile(t, dir, "task.yml", oneInputTask)
	r := runCLI(t, opts{atcURL: srv.URL}, "execute", "-c", task, "-i", "repo="+dir)
	if r.code != 2 || !strings.Contains(r.stderr, "execute: create build: 400 Bad Request: task config: image is not allowed\n") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestExecuteATCUnreachable(t *testing.T) {
	dir := t.TempDir()
	task := writeFile(t, dir, "task.yml", oneInputTask)
	r := runCLI(t, opts{atcURL: "http://127.0.0.1:1"}, "execute", "-c", task, "-i", "repo="+dir)
	if r.code != 2 || !strings.Contains(r.stderr, `upload input "repo"`) {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestATCURLPrecedence(t *testing.T) {
	srv := atcfake.New(t)
	srv.AddBuild(&atcfake.Build{Build: api.Build{ID: 3, Status: api.StatusSucceeded}})
	bad := "http://127.0.0.1:1"
	for _, tc := range []struct {
		name string
		env  string
		args []string
	}{
		{"environment", srv.URL, []string{"builds"}},
		{"global flag over environment", bad, []string{"--atc", srv.URL, "builds"}},
		{"command flag over global flag", bad, []string{"--atc", bad, "builds", "--atc", srv.URL}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, opts{atcURL: tc.env}, tc.args...)
			if r.code != 0 {
				t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
			}
		})
	}
}

func TestExecuteProgressOnlyOnATerminal(t *testing.T) {
	for _, terminal := range []bool{false, true} {
		srv := atcfake.New(t)
		dir := t.TempDir()
		writeFile(t, dir, "big", strings.Repeat("x", 1<<20))
		task := writeFile(t, t.TempDir(), "task.yml", oneInputTask)
		r := runCLI(t, opts{atcURL: srv.URL, terminal: terminal}, "execute", "-c", task, "-i", "repo="+dir)
		if r.code != 0 {
			t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
		}
		// The last drawing of the line shows the whole stream and ends it.
		final := fmt.Sprintf("\r\x1b[Kuploading repo: %d B\n", srv.Uploads()[0].Ref.Size)
		hasProgress := strings.Contains(r.stderr, final)
		if hasProgress != terminal {
			t.Errorf("terminal=%v: progress shown=%v\nstderr: %q", terminal, hasProgress, r.stderr)
		}
		if hasColor := strings.Contains(r.stderr, "\x1b[32msucceeded\x1b[0m"); hasColor != terminal {
			t.Errorf("terminal=%v: colored result=%v", terminal, hasColor)
		}
	}
}

func TestExecuteInterruptAbortsAndFollowsToTheEnd(t *testing.T) {
	srv := atcfake.New(t)
	srv.OnCreate = func(api.CreateBuildRequest) (*atcfake.Build, error) {
		return &atcfake.Build{
			Build:        api.Build{Name: "one-off", Status: api.StatusStarted},
			Events:       []events.Event{events.Status{Status: events.StatusStarted}, logEv("stdout", "working\n")},
			WaitForAbort: true,
		}, nil
	}
	dir := t.TempDir()
	task := writeFile(t, dir, "task.yml", oneInputTask)
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	r := runCLI(t, opts{atcURL: srv.URL, ctx: ctx, started: func(stderr *syncBuffer) {
		go func() {
			// Ctrl-C once the build's output shows.
			for !strings.Contains(stderr.String(), "executing build") {
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond)
			interrupt()
		}()
	}}, "execute", "-c", task, "-i", "repo="+dir, "-o", "out="+filepath.Join(dir, "out"))
	t.Logf("stderr:\n%s", r.stderr)
	if r.code != 3 {
		t.Fatalf("exit %d, want 3\nstderr: %s", r.code, r.stderr)
	}
	if got := srv.Aborts(); !reflect.DeepEqual(got, []int64{1}) {
		t.Fatalf("aborts = %v", got)
	}
	for _, w := range []string{"interrupted: aborting build 1", "aborted\n", "outputs not downloaded"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr does not contain %q:\n%s", w, r.stderr)
		}
	}
	if r.stdout != "working\n" {
		t.Errorf("stdout = %q", r.stdout)
	}
}

func TestWatchReconnectsOnACutStream(t *testing.T) {
	srv := atcfake.New(t)
	var evs []events.Event
	for _, l := range []string{"one\n", "two\n", "three\n", "four\n"} {
		evs = append(evs, logEv("stdout", l))
	}
	evs = append(evs, events.FinishTask{ExitStatus: 9}, events.Status{Status: events.StatusFailed})
	srv.AddBuild(&atcfake.Build{Build: api.Build{ID: 12, Status: api.StatusFailed}, Events: evs, BreakAfter: 2})
	r := runCLI(t, opts{atcURL: srv.URL}, "watch", "12")
	if r.code != 9 || r.stdout != "one\ntwo\nthree\nfour\n" {
		t.Fatalf("exit %d stdout %q\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if ids := srv.LastEventIDs(); !reflect.DeepEqual(ids, []string{"", "2"}) {
		t.Fatalf("Last-Event-IDs = %q", ids)
	}
}

func TestWatchInterruptLeavesTheBuild(t *testing.T) {
	srv := atcfake.New(t)
	srv.AddBuild(&atcfake.Build{Build: api.Build{ID: 4, Status: api.StatusStarted},
		Events: []events.Event{logEv("stdout", "busy\n")}, WaitForAbort: true})
	ctx, interrupt := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, interrupt)
	r := runCLI(t, opts{atcURL: srv.URL, ctx: ctx}, "watch", "4")
	if r.code != cli.ExitInterrupted || len(srv.Aborts()) != 0 {
		t.Fatalf("exit %d, aborts %v\nstderr: %s", r.code, srv.Aborts(), r.stderr)
	}
}

func TestWatchUnknownBuild(t *testing.T) {
	srv := atcfake.New(t)
	r := runCLI(t, opts{atcURL: srv.URL}, "watch", "77")
	if r.code != 2 || !strings.Contains(r.stderr, "watch: follow build 77's events: 404 Not Found: build 77 not found") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestAbort(t *testing.T) {
	srv := atcfake.New(t)
	srv.AddBuild(&atcfake.Build{Build: api.Build{ID: 5, Status: api.StatusStarted}})
	r := runCLI(t, opts{atcURL: srv.URL}, "abort", "5")
	if r.code != 0 || r.stdout != "build 5 is being aborted\n" || !reflect.DeepEqual(srv.Aborts(), []int64{5}) {
		t.Fatalf("exit %d stdout %q aborts %v", r.code, r.stdout, srv.Aborts())
	}
	r = runCLI(t, opts{atcURL: srv.URL}, "abort", "6")
	if r.code != 1 || !strings.Contains(r.stderr, "abort: abort build 6: 404 Not Found: build 6 not found") {
		t.Fatalf("exit %d stderr %q", r.code, r.stderr)
	}
}

func TestBuildsTable(t *testing.T) {
	srv := atcfake.New(t)
	start := int64(1_700_000_000)
	srv.AddBuild(&atcfake.Build{Build: api.Build{ID: 1, Name: "one-off", Team: "main", Status: api.StatusSucceeded, StartTime: start, EndTime: start + 83}})
	srv.AddBuild(&atcfake.Build{Build: api.Build{ID: 2, Name: "one-off", Team: "main", Status: api.StatusStarted, StartTime: start}})
	srv.AddBuild(&atcfake.Build{Build: api.Build{ID: 3, Status: api.StatusPending}})
	t.Setenv("TZ", "UTC")
	r := runCLI(t, opts{atcURL: srv.URL}, "builds")
	if r.code != 0 {
		t.Fatalf("exit %d stderr %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("table:\n%s", r.stdout)
	}
	fields := func(i int) []string { return strings.Fields(lines[i]) }
	if got := fields(0); !reflect.DeepEqual(got, []string{"id", "name", "status", "team", "started", "duration"}) {
		t.Errorf("header = %q", got)
	}
	started := time.Unix(start, 0).Format("2006-01-02@15:04:05-0700")
	for i, want := range [][]string{
		{"3", "n/a", "pending", "n/a", "n/a", "n/a"},
		{"2", "one-off", "started", "main", started, "10m0s+"},
		{"1", "one-off", "succeeded", "main", started, "1m23s"},
	} {
		if got := fields(i + 1); !reflect.DeepEqual(got, want) {
			t.Errorf("row %d = %q, want %q", i+1, got, want)
		}
	}

	r = runCLI(t, opts{atcURL: srv.URL}, "builds", "-c", "1", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"id": 3`) || strings.Contains(r.stdout, `"id": 2`) {
		t.Fatalf("exit %d json %s", r.code, r.stdout)
	}
}
