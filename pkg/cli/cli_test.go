package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/spf13/cobra"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/pkg/taskconfig"
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const busybox = "platform: linux\nimage_resource: {type: registry-image, source: {repository: busybox}}\n"

// planJSON renders a plan without its IDs, to compare shapes.
func planShape(t *testing.T, p concourse.Plan) any {
	t.Helper()
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	var strip func(any) any
	strip = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			delete(v, "id")
			for k, x := range v {
				v[k] = strip(x)
			}
		case []any:
			for i, x := range v {
				v[i] = strip(x)
			}
		}
		return v
	}
	return strip(v)
}

func TestExecutePlanIsFlys(t *testing.T) {
	dir := t.TempDir()
	cfg, err := taskconfig.Parse([]byte(busybox + "inputs: [{name: src}]\noutputs: [{name: out}]\nrun: {path: make}\n"))
	if err != nil {
		t.Fatal(err)
	}
	spec := executeSpec{config: cfg,
		inputs:  []localInput{{Name: "repo", Path: dir}},
		mapping: map[string]string{"src": "repo"},
		outputs: []localOutput{{Name: "out", Path: dir}},
	}
	f := &executeFlags{privileged: true, tags: []string{"gpu"}}
	ids := newPlanIDs(time.Unix(0x6b045a00, 0))
	plan, err := executePlan(ids, spec, map[string]int64{"repo": 4}, f)
	if err != nil {
		t.Fatal(err)
	}
	// Every ID is unique.
	seen := map[concourse.PlanID]bool{}
	plan.Each(func(p *concourse.Plan) {
		if p.ID == "" || seen[p.ID] {
			t.Errorf("plan ID %q empty or repeated", p.ID)
		}
		seen[p.ID] = true
	})
	config, _ := json.Marshal(cfg)
	var configAny any
	_ = json.Unmarshal(config, &configAny)
	want := map[string]any{"ensure": map[string]any{
		"step": map[string]any{"do": []any{
			map[string]any{"in_parallel": map[string]any{"steps": []any{
				map[string]any{"artifact_input": map[string]any{"artifact_id": float64(4), "name": "repo"}},
			}}},
			map[string]any{"task": map[string]any{"name": "one-off", "privileged": true, "hermetic": false,
				"tags": []any{"gpu"}, "config": configAny, "input_mapping": map[string]any{"src": "repo"}}},
		}},
		"ensure": map[string]any{"in_parallel": map[string]any{"steps": []any{
			map[string]any{"artifact_output": map[string]any{"name": "out"}},
		}}},
	}}
	if got := planShape(t, plan); !reflect.DeepEqual(got, any(want)) {
		g, _ := json.MarshalIndent(got, "", " ")
		w, _ := json.MarshalIndent(want, "", " ")
		t.Errorf("plan\n%s\nwant\n%s", g, w)
	}

	// Without inputs or outputs: do[in_parallel{steps: null}, task], as in
	// the capture of fly execute.
	plan, err = executePlan(ids, executeSpec{config: cfg}, nil, &executeFlags{})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(plan)
	if !strings.Contains(string(data), `"in_parallel":{"steps":null}`) || plan.Do == nil || plan.Ensure != nil {
		t.Errorf("plan without inputs and outputs: %s", data)
	}
}

func TestReadTaskConfigVarsParamsAndArgs(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "task.yml", busybox+`params:
  GREETING: hello
  NAME: ((name))
  COUNT: ((count))
  UNSET: ((nobody))
run:
  path: echo
  args: ["((greeting)), ((who.first))"]
`)
	vars := writeFile(t, dir, "vars.yml", "name: from-file\ngreeting: hi\n")
	tv, err := loadVars([]string{"name=from-flag", "who.first=Ann"}, []string{"count=3"}, []string{vars})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"GREETING": "from-env", "OTHER": "x"}
	cfg, err := readTaskConfig(file, tv, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, []string{"--", "extra"})
	if err != nil {
		t.Fatal(err)
	}
	wantParams := taskconfig.Params{"GREETING": "from-env", "NAME": "from-flag", "COUNT": "3", "UNSET": "((nobody))"}
	if !reflect.DeepEqual(cfg.Params, wantParams) {
		t.Errorf("params %v, want %v", cfg.Params, wantParams)
	}
	if want := []string{"hi, Ann", "--", "extra"}; !reflect.DeepEqual(cfg.Run.Args, want) {
		t.Errorf("args %q, want %q", cfg.Run.Args, want)
	}

	bad := writeFile(t, dir, "bad.yml", "platform: linux\nrun: {}\n")
	if _, err := readTaskConfig(bad, templateVars{}, os.LookupEnv, nil); err == nil || !strings.Contains(err.Error(), "missing path") {
		t.Errorf("invalid task: %v", err)
	}
}

func TestDetermineInputs(t *testing.T) {
	work := filepath.Join(t.TempDir(), "repo")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	file := writeFile(t, other, "f", "x")
	cfg, err := taskconfig.Parse([]byte(busybox + "inputs: [{name: repo}, {name: tools}, {name: maybe, optional: true}]\nrun: {path: x}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name           string
		inputs, mapped []string
		want           []localInput
		mapping        map[string]string
		err            string
	}{
		{name: "cwd named like an input", inputs: []string{"tools=" + other}, want: []localInput{{"tools", other}, {"repo", "."}}},
		{name: "unknown", inputs: []string{"nope=" + other}, err: "unknown input `nope`"},
		{name: "missing", inputs: []string{"repo=" + other}, err: "missing required input `tools`"},
		{name: "not a folder", inputs: []string{"tools=" + file}, err: "not a folder"},
		{name: "mapping", inputs: []string{"t2=" + other}, mapped: []string{"tools=t2"},
			want: []localInput{{"t2", other}, {"repo", "."}}, mapping: map[string]string{"tools": "t2"}},
		{name: "mapping of no input", mapped: []string{"nope=x"}, err: "unknown input `nope`"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, mapping, err := determineInputs(cfg, tc.inputs, tc.mapped, work)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) || !reflect.DeepEqual(mapping, tc.mapping) {
				t.Errorf("inputs %v mapping %v, want %v %v", got, mapping, tc.want, tc.mapping)
			}
		})
	}
}

func TestExitCodeByStatus(t *testing.T) {
	for _, tc := range []struct {
		res  buildResult
		want int
	}{
		{buildResult{Status: concourse.StatusSucceeded}, 0},
		{buildResult{Status: concourse.StatusFailed}, 1},
		{buildResult{Status: concourse.StatusFailed, ExitStatus: 7}, 7},
		{buildResult{Status: concourse.StatusErrored}, 2},
		{buildResult{Status: concourse.StatusAborted}, 3},
		{buildResult{Status: concourse.StatusAborted, ExitStatus: 143}, 143},
	} {
		if got := tc.res.exitCode(); got != tc.want {
			t.Errorf("%+v: exit %d, want %d", tc.res, got, tc.want)
		}
	}
}

func taskEvents(status concourse.BuildStatus, exit int) []events.Event {
	o := events.Origin{ID: "t"}
	evs := []events.Event{
		events.Status{Status: concourse.StatusStarted},
		events.InitializeTask{Origin: o},
		events.SelectedWorker{Origin: o, WorkerName: "local"},
		events.StartTask{Origin: o, Config: events.TaskConfig{Run: events.TaskRunConfig{Path: "echo", Args: []string{"hi"}}}},
		events.Log{Origin: events.Origin{ID: "t", Source: "stdout"}, Payload: "hi\r\n"},
	}
	if status == concourse.StatusErrored {
		evs = append(evs, events.Error{Origin: o, Message: "image not found"})
	} else {
		evs = append(evs, events.FinishTask{Origin: o, ExitStatus: exit})
	}
	return append(evs, events.Status{Status: concourse.BuildStatus(status)})
}

func TestExecuteRendersLikeFlyAndExitsByStatus(t *testing.T) {
	for _, tc := range []struct {
		status concourse.BuildStatus
		exit   int
		code   int
		last   string
	}{
		{concourse.StatusSucceeded, 0, 0, "succeeded"},
		{concourse.StatusFailed, 7, 7, "failed"},
		{concourse.StatusErrored, 0, 2, "image not found\nerrored"},
		{concourse.StatusAborted, 0, 3, "aborted"},
	} {
		t.Run(string(tc.status), func(t *testing.T) {
			srv := newFakeServer(t)
			srv.events = taskEvents(tc.status, tc.exit)
			r := newRunner(t)
			r.loginTo(srv, "good")
			task := writeFile(t, r.dir, "task.yml", busybox+"run: {path: echo, args: [hi]}\n")
			res := r.run(context.Background(), nil, "-t", "x", "execute", "-c", task)
			want := "executing build 42 at " + srv.URL + "/builds/42\ninitializing\nselected worker: local\nrunning echo hi\nhi\r\n" + tc.last + "\n"
			if res.code != tc.code || res.stdout != want {
				t.Errorf("exit %d stdout %q stderr %q\nwant exit %d stdout %q", res.code, res.stdout, res.stderr, tc.code, want)
			}
		})
	}
}

func TestExecuteUploadsInputsAndDownloadsOutputs(t *testing.T) {
	srv := newFakeServer(t)
	srv.events = taskEvents(concourse.StatusSucceeded, 0)
	srv.artifacts = map[string]map[string]string{"out": {"result.txt": "made"}}
	r := newRunner(t)
	r.loginTo(srv, "good")
	in := t.TempDir()
	writeFile(t, in, "src/main.go", "package main")
	outDir := filepath.Join(t.TempDir(), "out")
	task := writeFile(t, t.TempDir(), "task.yml", busybox+"inputs: [{name: src}]\noutputs: [{name: out}]\nrun: {path: make}\n")
	res := r.run(context.Background(), nil, "-t", "x", "execute", "-c", task, "-i", "src="+in, "-o", "out="+outDir)
	if res.code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", res.code, res.stdout, res.stderr)
	}
	if got, _ := os.ReadFile(filepath.Join(outDir, "result.txt")); string(got) != "made" {
		t.Errorf("output file %q", got)
	}
	if len(srv.uploads) != 1 || !strings.Contains(strings.Join(srv.uploads[1], " "), "src/main.go") {
		t.Errorf("uploads %v", srv.uploads)
	}
	p := srv.plans[0]
	if p.Ensure == nil || (*p.Ensure.Step.Do)[0].InParallel.Steps[0].ArtifactInput.ArtifactID != 1 {
		t.Errorf("plan %+v", p)
	}
}

func TestBadTaskUploadsNothing(t *testing.T) {
	srv := newFakeServer(t)
	r := newRunner(t)
	r.loginTo(srv, "good")
	task := writeFile(t, t.TempDir(), "task.yml", "platform: linux\ninputs: [{name: src}]\nrun: {}\n")
	res := r.run(context.Background(), nil, "-t", "x", "execute", "-c", task, "-i", "src="+t.TempDir())
	if res.code != ExitError || !strings.Contains(res.stderr, "missing path to executable") {
		t.Errorf("exit %d stderr %q", res.code, res.stderr)
	}
	if len(srv.uploads) != 0 || len(srv.plans) != 0 {
		t.Errorf("uploads %v plans %v: want none", srv.uploads, srv.plans)
	}
}

func TestUnauthorizedSaysToLogIn(t *testing.T) {
	srv := newFakeServer(t)
	r := newRunner(t)
	r.loginTo(srv, "expired")
	res := r.run(context.Background(), nil, "-t", "x", "builds")
	if res.code != ExitError || !strings.Contains(res.stderr, "not authorized. run the following to log in:") ||
		!strings.Contains(res.stderr, "atc-porter-runtime -t x login") {
		t.Errorf("exit %d stderr %q", res.code, res.stderr)
	}
	res = r.run(context.Background(), nil, "builds")
	if res.code != ExitError || !strings.Contains(res.stderr, "no target specified") {
		t.Errorf("without -t: exit %d stderr %q", res.code, res.stderr)
	}
}

func TestLoginWritesATargetFlyReads(t *testing.T) {
	srv := newFakeServer(t)
	r := newRunner(t)
	// An existing target of fly's survives.
	writeFile(t, r.home, ".flyrc", "targets:\n  other:\n    api: https://ci.example.com\n    team: dev\n    token: {type: bearer, value: abc}\n")
	res := r.run(context.Background(), nil, "-t", "x", "login", "-c", srv.URL, "-u", "test", "-p", "wrong")
	if res.code != ExitError || !strings.Contains(res.stderr, "Invalid username or password") {
		t.Fatalf("wrong password: exit %d stderr %q", res.code, res.stderr)
	}
	res = r.run(context.Background(), nil, "-t", "x", "login", "-c", srv.URL, "-u", "test", "-p", "secret")
	if res.code != 0 || res.stdout != "logging in to team 'main'\n\n\ntarget saved\n" {
		t.Fatalf("exit %d stdout %q stderr %q", res.code, res.stdout, res.stderr)
	}
	a := newApp(Env{LookupEnv: func(k string) (string, bool) { return r.home, k == "HOME" }})
	targets, err := a.loadTargets()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]target{
		"x":     {API: srv.URL, Team: "main", Token: &targetToken{Type: "bearer", Value: "good"}},
		"other": {API: "https://ci.example.com", Team: "dev", Token: &targetToken{Type: "bearer", Value: "abc"}},
	}
	if !reflect.DeepEqual(targets, want) {
		t.Errorf("targets %+v, want %+v", targets, want)
	}
	if fi, _ := os.Stat(filepath.Join(r.home, ".flyrc")); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode())
	}
	// A second login without -c uses the saved URL.
	if res := r.run(context.Background(), nil, "-t", "x", "login", "-u", "test", "-p", "secret"); res.code != 0 {
		t.Errorf("login again: exit %d stderr %q", res.code, res.stderr)
	}

	fly := "/work/shared/tools/fly"
	if _, err := os.Stat(fly); err != nil {
		t.Skipf("no fly here: %v", err)
	}
	cmd := exec.Command(fly, "-t", "x", "status")
	cmd.Env = []string{"HOME=" + r.home, "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "logged in successfully") {
		t.Errorf("fly status: %v\n%s", err, out)
	}
}

func TestBuildsTable(t *testing.T) {
	srv := newFakeServer(t)
	r := newRunner(t)
	r.loginTo(srv, "good")
	res := r.run(context.Background(), nil, "-t", "x", "builds", "--print-table-headers")
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if res.code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "id  name  status     start") ||
		!strings.Contains(lines[1], "42  42    succeeded") || !strings.Contains(lines[1], "3s        main  system") {
		t.Errorf("exit %d stdout:\n%s\nstderr %s", res.code, res.stdout, res.stderr)
	}
}

func TestAbort(t *testing.T) {
	srv := newFakeServer(t)
	r := newRunner(t)
	r.loginTo(srv, "good")
	res := r.run(context.Background(), nil, "-t", "x", "abort", "-b", "42")
	if res.code != 0 || res.stdout != "build successfully aborted\n" || len(srv.aborted) != 1 {
		t.Errorf("exit %d stdout %q stderr %q aborted %v", res.code, res.stdout, res.stderr, srv.aborted)
	}
}

func TestInterceptPipesStdinAndRetriesSh(t *testing.T) {
	srv := newFakeServer(t)
	srv.hijack = func(spec concourse.HijackProcessSpec, conn *websocket.Conn) {
		if spec.Path == "bash" {
			_ = conn.WriteJSON(concourse.HijackOutput{ExecutableNotFound: true})
			_ = conn.WriteJSON(concourse.HijackOutput{Error: `exec: "bash": executable file not found in $PATH`})
			return
		}
		var stdin []byte
		for {
			var in concourse.HijackInput
			if err := conn.ReadJSON(&in); err != nil {
				return
			}
			stdin = append(stdin, in.Stdin...)
			if in.Closed {
				break
			}
		}
		_ = conn.WriteJSON(concourse.HijackOutput{Stdout: stdin})
		_ = conn.WriteJSON(concourse.HijackOutput{Stderr: []byte("ready\n")})
		status := 7
		_ = conn.WriteJSON(concourse.HijackOutput{ExitStatus: &status})
	}
	r := newRunner(t)
	r.loginTo(srv, "good")
	res := r.run(context.Background(), strings.NewReader("echo hi\n"), "-t", "x", "intercept", "-b", "42", "-s", "one-off")
	if res.code != 7 || res.stdout != "echo hi\n" || !strings.Contains(res.stderr, `retrying with "sh"`) || !strings.HasSuffix(res.stderr, "ready\n") {
		t.Errorf("exit %d stdout %q stderr %q", res.code, res.stdout, res.stderr)
	}
	if len(srv.specs) != 2 || srv.specs[1].Path != "sh" || srv.specs[1].Dir != "/tmp/build/x" || srv.specs[1].User != "root" || srv.specs[1].TTY != nil {
		t.Errorf("specs %+v", srv.specs)
	}

	// A command after -- runs as is; "hijack" is intercept.
	res = r.run(context.Background(), nil, "-t", "x", "hijack", "-b", "42", "--", "ls", "-l")
	if res.code != 7 || srv.specs[2].Path != "ls" || !reflect.DeepEqual(srv.specs[2].Args, []string{"-l"}) {
		t.Errorf("exit %d spec %+v stderr %q", res.code, srv.specs[2], res.stderr)
	}

	res = r.run(context.Background(), nil, "-t", "x", "intercept", "-b", "7")
	if res.code != ExitError || !strings.Contains(res.stderr, "no containers matched your search parameters!") {
		t.Errorf("no containers: exit %d stderr %q", res.code, res.stderr)
	}
}

func TestServeIsTheProgramsCommand(t *testing.T) {
	var listen string
	serve := func() *cobra.Command {
		c := &cobra.Command{Use: "serve", RunE: func(*cobra.Command, []string) error { return Exit(4) }}
		c.Flags().StringVar(&listen, "listen", "", "")
		return c
	}
	code := Run(context.Background(), []string{"serve", "--listen", ":1"}, Env{Serve: serve})
	if code != 4 || listen != ":1" {
		t.Errorf("exit %d listen %q", code, listen)
	}
	var stderr bytes.Buffer
	if code := Run(context.Background(), []string{"serve"}, Env{Stderr: &stderr}); code != ExitError ||
		!strings.Contains(stderr.String(), "serve is not part of this program") {
		t.Errorf("without a server: exit %d stderr %q", code, stderr.String())
	}
}

func TestInterruptAbortsTheBuildAndFollowsIt(t *testing.T) {
	srv := newFakeServer(t)
	srv.events = taskEvents(concourse.StatusStarted, 0)[:5]
	srv.untilAbort = make(chan struct{})
	r := newRunner(t)
	r.loginTo(srv, "good")
	task := writeFile(t, t.TempDir(), "task.yml", busybox+"run: {path: sleep, args: ['600']}\n")
	out := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"-t", "x", "execute", "-c", task}, Env{
			Stdout: out, Stderr: out,
			LookupEnv: func(k string) (string, bool) { return r.home, k == "HOME" },
		})
	}()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "hi\r\n"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the build's output did not arrive: %q", out.String())
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != ExitAborted || !strings.Contains(out.String(), "aborting...") || !strings.HasSuffix(out.String(), "aborted\n") {
			t.Errorf("exit %d output %q", code, out.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("execute did not end after the abort")
	}
}

func TestAuditUsageLineSaysWhatIsNotKnown(t *testing.T) {
	for _, c := range []struct {
		u    *api.ResourceUsage
		want string
	}{
		{&api.ResourceUsage{MemoryPeakBytes: 68 << 20, CPUSeconds: 0.084}, "peak memory 68.0 MiB, CPU time 0.08 s"},
		{&api.ResourceUsage{CPUSeconds: 2}, "peak memory not available, CPU time 2.00 s"},
		{nil, "peak memory not available, CPU time not available"},
	} {
		if got := usageLine(c.u); !strings.HasPrefix(got, c.want) {
			t.Errorf("usageLine(%+v) = %q, want %q…", c.u, got, c.want)
		}
	}
}
