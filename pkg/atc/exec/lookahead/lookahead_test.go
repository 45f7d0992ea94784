package lookahead

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/concourse"
)

func task(id, config string) concourse.Plan {
	return concourse.Plan{ID: concourse.PlanID(id), Task: &concourse.TaskPlan{Name: id, Config: json.RawMessage(config)}}
}

const (
	plain   = `{"platform":"linux","image_resource":{"type":"registry-image","source":{"repository":"busybox"}},"run":{"path":"true"}}`
	makesMe = `{"platform":"linux","image_resource":{"type":"registry-image","source":{"repository":"busybox"}},"outputs":[{"name":"me"}],"run":{"path":"true"}}`
)

func ids(ds []Decl) []string {
	var out []string
	for _, d := range ds {
		out = append(out, string(d.Plan.ID))
	}
	return out
}

func TestWindow(t *testing.T) {
	get := concourse.Plan{ID: "g", Get: &concourse.GetPlan{Name: "repo", Type: "git"}}
	loadVar := concourse.Plan{ID: "lv", LoadVar: &concourse.LoadVarPlan{Name: "v", File: "me/v"}}
	fromFile := concourse.Plan{ID: "file", Task: &concourse.TaskPlan{Name: "file", ConfigPath: "repo/task.yml"}}
	imageArtifact := task("img", plain)
	imageArtifact.Task.ImageArtifactName = "repo"
	current := task("t0", makesMe)
	put := concourse.Plan{ID: "p", Put: &concourse.PutPlan{Name: "out", Type: "mock", TypeImage: concourse.TypeImage{BaseType: "mock"}}}
	from := put.ID
	implicitGet := concourse.Plan{ID: "ig", Get: &concourse.GetPlan{Name: "out", Type: "mock", VersionFrom: &from, TypeImage: concourse.TypeImage{BaseType: "mock"}}}
	typeCheck := &concourse.Plan{ID: "tc", Check: &concourse.CheckPlan{Name: "my-type", Type: "registry-image", Source: map[string]any{"repository": "r"},
		TypeImage: concourse.TypeImage{BaseType: "registry-image"}}}
	typeGet := func(version map[string]string) *concourse.Plan {
		return &concourse.Plan{ID: "tg", Get: &concourse.GetPlan{Name: "my-type", Type: "registry-image", Version: version}}
	}
	customPut := concourse.Plan{ID: "custom", Put: &concourse.PutPlan{Name: "c", Type: "my-type",
		TypeImage: concourse.TypeImage{BaseType: "registry-image", CheckPlan: typeCheck, GetPlan: typeGet(nil)}}}
	pinnedPut := concourse.Plan{ID: "pinned", Put: &concourse.PutPlan{Name: "c", Type: "my-type",
		TypeImage: concourse.TypeImage{BaseType: "registry-image", CheckPlan: typeCheck, GetPlan: typeGet(map[string]string{"digest": "sha256:1"})}}}
	mirroredPut := concourse.Plan{ID: "mirrored", Put: &concourse.PutPlan{Name: "m", Type: "self", TypeImage: concourse.TypeImage{BaseType: "mock",
		CheckPlan: &concourse.Plan{ID: "mc", Check: &concourse.CheckPlan{Name: "self", Type: "mock", Source: map[string]any{"mirror_self": true}, TypeImage: concourse.TypeImage{BaseType: "mock"}}}}}}
	versioned := concourse.Plan{ID: "gv", Get: &concourse.GetPlan{Name: "v", Type: "mock", Version: map[string]string{"version": "1"}, TypeImage: concourse.TypeImage{BaseType: "mock"}}}
	for _, tc := range []struct {
		name string
		rest []concourse.Plan
		n    int
		want []string
		made map[string][]string // a declared task's made names
	}{
		{name: "the next tasks, at most n", rest: []concourse.Plan{task("t1", plain), task("t2", plain), task("t3", plain)}, n: 2, want: []string{"t1", "t2"}},
		{name: "a get between: its artifact is made later", rest: []concourse.Plan{get, task("t1", plain)}, n: 4, want: []string{"t1"},
			made: map[string][]string{"t1": {"me", "repo"}}},
		{name: "gets in parallel, as a job's plan begins", rest: []concourse.Plan{{ID: "gets", InParallel: &concourse.InParallelPlan{Steps: []concourse.Plan{get,
			{ID: "g2", Get: &concourse.GetPlan{Name: "other", Type: "git"}}}}}, task("t1", plain)}, n: 4, want: []string{"t1"},
			made: map[string][]string{"t1": {"me", "other", "repo"}}},
		{name: "stops at a load_var (its var may change the next tasks)", rest: []concourse.Plan{task("t1", plain), loadVar, task("t2", plain)}, n: 4, want: []string{"t1"}},
		{name: "a task whose config is a file of an artifact the build has is declared, and its outputs are unknown",
			rest: []concourse.Plan{fromFile, task("t2", plain)}, n: 4, want: []string{"file"}},
		{name: "a task whose config is a file of an artifact a step before it makes is not declared",
			rest: []concourse.Plan{get, fromFile, task("t2", plain)}, n: 4, want: nil},
		{name: "tasks in parallel, and the task after them", rest: []concourse.Plan{{ID: "par", InParallel: &concourse.InParallelPlan{Steps: []concourse.Plan{
			task("t1", makesMe), {ID: "d", Do: &concourse.DoPlan{task("t2", plain), task("t3", plain)}}}}}, task("t4", plain)}, n: 4,
			want: []string{"t1", "t2", "t4"}, made: map[string][]string{"t1": {"me"}, "t4": {"me"}}},
		{name: "at most n, within in_parallel too", rest: []concourse.Plan{{ID: "par", InParallel: &concourse.InParallelPlan{Steps: []concourse.Plan{
			task("t1", plain), task("t2", plain), task("t3", plain)}}}}, n: 2, want: []string{"t1", "t2"}},
		{name: "the step a try holds, and on (what it makes is resolved at the go-ahead)", rest: []concourse.Plan{{ID: "try", Try: &concourse.TryPlan{Step: task("t1", makesMe)}}, task("t2", plain)}, n: 4,
			want: []string{"t1", "t2"}, made: map[string][]string{"t2": {"me"}}},
		{name: "a hook's step, not the hook, and on", rest: []concourse.Plan{{ID: "h", OnSuccess: &concourse.HookPlan{Step: task("t1", plain), Next: task("t2", plain), Hook: "on_success"}}, task("t3", plain)}, n: 4,
			want: []string{"t1", "t3"}},
		{name: "stops after a hook that loads a var", rest: []concourse.Plan{{ID: "h", Ensure: &concourse.HookPlan{Step: task("t1", plain), Next: loadVar, Hook: "ensure"}}, task("t3", plain)}, n: 4,
			want: []string{"t1"}},
		{name: "the first attempt only, and on", rest: []concourse.Plan{{ID: "r", Retry: &concourse.DoPlan{task("t1", plain), task("t1b", plain)}}, task("t2", plain)}, n: 4,
			want: []string{"t1", "t2"}},
		{name: "nothing within across", rest: []concourse.Plan{{ID: "x", Across: &concourse.AcrossPlan{}}, task("t2", plain)}, n: 4, want: nil},
		{name: "a task whose image is an artifact is not declared, the next is", rest: []concourse.Plan{imageArtifact, task("t2", plain)}, n: 4, want: []string{"t2"}},
		{name: "a put of a base type, and the task after it: the put makes nothing", rest: []concourse.Plan{put, task("t2", plain)}, n: 4,
			want: []string{"p", "t2"}, made: map[string][]string{"p": {"me"}, "t2": {"me"}}},
		{name: "a put and not its implicit get (the version it fetches is the put's), and on past the get",
			rest: []concourse.Plan{{ID: "h", OnSuccess: &concourse.HookPlan{Step: put, Next: implicitGet, Hook: "on_success"}}, task("t2", plain)}, n: 4,
			want: []string{"p", "t2"}, made: map[string][]string{"t2": {"me", "out"}}},
		{name: "a put whose type's image needs its check is not declared, the next step is", rest: []concourse.Plan{customPut, task("t2", plain)}, n: 4,
			want: []string{"t2"}},
		{name: "a put whose type's get names its image's version is declared", rest: []concourse.Plan{pinnedPut}, n: 4, want: []string{"pinned"}},
		{name: "a put whose type is a mock mirroring itself is declared", rest: []concourse.Plan{mirroredPut}, n: 4, want: []string{"mirrored"}},
		{name: "a put of an unknown base type is declared (its declaration fails, its turn says why)",
			rest: []concourse.Plan{{ID: "s3", Put: &concourse.PutPlan{Name: "s3", Type: "s3", TypeImage: concourse.TypeImage{BaseType: "s3"}}}}, n: 4, want: []string{"s3"}},
		{name: "a later get whose version the scheduler chose is declared", rest: []concourse.Plan{task("t1", plain), versioned, task("t2", plain)}, n: 4,
			want: []string{"t1", "gv", "t2"}, made: map[string][]string{"t2": {"me", "v"}}},
		{name: "not a later get whose type's image needs a check", rest: []concourse.Plan{task("t1", plain),
			{ID: "gc", Get: &concourse.GetPlan{Name: "c", Type: "custom", Version: map[string]string{"v": "1"},
				TypeImage: concourse.TypeImage{CheckPlan: &concourse.Plan{ID: "cc", Check: &concourse.CheckPlan{Name: "custom", Type: "registry-image"}}}}}}, n: 4,
			want: []string{"t1"}},
		{name: "not a get without a version", rest: []concourse.Plan{get, task("t1", plain)}, n: 4, want: []string{"t1"}},
		{name: "puts in parallel count towards n", rest: []concourse.Plan{{ID: "par", InParallel: &concourse.InParallelPlan{Steps: []concourse.Plan{
			put, {ID: "p2", Put: &concourse.PutPlan{Name: "out2", Type: "mock", TypeImage: concourse.TypeImage{BaseType: "mock"}}}}}}, task("t2", plain)}, n: 2,
			want: []string{"p", "p2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Window(&current, tc.rest, tc.n, nil)
			if !slices.Equal(ids(got), tc.want) {
				t.Fatalf("declared %v, want %v", ids(got), tc.want)
			}
			for _, d := range got {
				want, ok := tc.made[string(d.Plan.ID)]
				if !ok {
					continue
				}
				var made []string
				for name := range d.Made {
					made = append(made, name)
				}
				slices.Sort(made)
				if !slices.Equal(made, want) {
					t.Errorf("%s: made later %v, want %v", d.Plan.ID, made, want)
				}
			}
		})
	}
	if got := Window(&loadVar, []concourse.Plan{task("t1", plain)}, 4, nil); got != nil {
		t.Errorf("after a running load_var: declared %v, want none", ids(got))
	}
}

func TestGateAndResolve(t *testing.T) {
	artifacts := map[string]api.ArtifactRef{"old": {Key: "k-old", Digest: "d-old"}}
	find := func(name string) (api.ArtifactRef, bool) { r, ok := artifacts[name]; return r, ok }
	lookup := Lookup(map[string]bool{"made": true, "maybe": true}, find)
	a := &action.Action{StepID: "s", Build: action.Build{ID: "1", Team: "main"}, StepName: "t", Type: action.KindTask,
		Run: action.Run{Path: "true"}, WorkDir: "/tmp/build/x"}
	for _, in := range []struct {
		name     string
		optional bool
	}{{"old", false}, {"made", false}, {"maybe", true}} {
		ref, _ := lookup(in.name)
		a.Inputs = append(a.Inputs, action.Input{Name: in.name, Path: in.name, Key: ref.Key, Digest: ref.Digest, Optional: in.optional})
	}
	if err := Gate(a); err != nil {
		t.Fatalf("Gate: %v", err)
	}
	if !a.Gated || a.Inputs[0].Key != "k-old" || a.Inputs[1].From != "made" || a.Inputs[1].Key != "" || a.Inputs[2].From != "maybe" {
		t.Fatalf("gated action's inputs %+v", a.Inputs)
	}

	// At the turn: "made" was made, optional "maybe" was not.
	artifacts["made"] = api.ArtifactRef{Key: "k-made", Digest: "d-made"}
	proceed, resolved, ok := Resolve(a, find)
	if !ok {
		t.Fatal("Resolve: not ok, though every needed input was made")
	}
	if len(proceed.Inputs) != 1 || proceed.Inputs[0].GetName() != "made" || proceed.Inputs[0].GetKey() != "k-made" {
		t.Errorf("go-ahead %v, want made's key only", proceed.Inputs)
	}
	if resolved.Gated || resolved.Inputs[1].Key != "k-made" || resolved.Inputs[1].From != "" || resolved.Inputs[2].From != "" {
		t.Errorf("resolved inputs %+v", resolved.Inputs)
	}
	if err := resolved.Validate(); err != nil {
		t.Errorf("the resolved action is invalid: %v", err)
	}
	if a.Inputs[1].From != "made" {
		t.Error("Resolve changed the gated action")
	}

	delete(artifacts, "made")
	if _, _, ok := Resolve(a, find); ok {
		t.Error("Resolve: ok, though a needed input was not made")
	}
}

func TestPods(t *testing.T) {
	var ps Pods[string]
	var mu sync.Mutex
	var withdrawn []string
	withdraw := func(p string) { mu.Lock(); withdrawn = append(withdrawn, p); mu.Unlock() }
	declared := 0
	for _, id := range []string{"a", "b", "c", "a"} {
		ps.Declare(concourse.PlanID(id), func() (string, error) { mu.Lock(); declared++; mu.Unlock(); return "pod-" + id, nil })
	}
	ps.Declare("broken", func() (string, error) { return "", errors.New("no worker") })

	if pod, ok, err := ps.Take(context.Background(), "a", withdraw); !ok || err != nil || pod != "pod-a" {
		t.Fatalf("Take(a) = %q, %v, %v", pod, ok, err)
	}
	if _, ok, _ := ps.Take(context.Background(), "a", withdraw); ok {
		t.Error("a was taken twice")
	}
	if _, ok, err := ps.Take(context.Background(), "broken", withdraw); ok || err == nil {
		t.Errorf("Take(broken) = %v, %v: want not ok and why", ok, err)
	}
	// b is held by a later try: withdrawing the try withdraws it.
	ps.Withdraw([]concourse.Plan{{ID: "try", Try: &concourse.TryPlan{Step: concourse.Plan{ID: "b"}}}, {ID: "nothing"}}, withdraw)
	if _, ok, _ := ps.Take(context.Background(), "b", withdraw); ok {
		t.Error("b was taken after the try holding it was withdrawn")
	}
	ps.WithdrawAll(withdraw)
	slices.Sort(withdrawn)
	if !slices.Equal(withdrawn, []string{"pod-b", "pod-c"}) || declared != 3 {
		t.Errorf("withdrawn %v after %d declarations, want pod-b and pod-c after 3", withdrawn, declared)
	}

	// A take whose step stopped withdraws the pod.
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	ps.Declare("slow", func() (string, error) { <-release; return "pod-slow", nil })
	cancel()
	if _, ok, _ := ps.Take(ctx, "slow", withdraw); ok {
		t.Error("a take whose context ended got the pod")
	}
	close(release)
	ps.WithdrawAll(withdraw)
	if !slices.Contains(withdrawn, "pod-slow") {
		t.Errorf("withdrawn %v: the slow pod was left", withdrawn)
	}
}

func TestAvailableToAPutDeclaredAhead(t *testing.T) {
	now := map[string]api.ArtifactRef{"repo": {Key: "k-repo", Digest: "d-repo"}, "built": {Key: "k-old"}}
	all := Available(map[string]bool{"built": true, "notes": true}, now)
	if len(all) != 3 || all["repo"].Key != "k-repo" || all["built"].Key != pendingKey || all["notes"].Key != pendingKey {
		t.Fatalf("Available = %v: want repo as it is, built (made again) and notes pending", all)
	}
	if now["built"].Key != "k-old" {
		t.Fatalf("Available changed the build's artifacts: %v", now)
	}
	// The put's inputs built from them gate as a task's do.
	a := &action.Action{StepID: "s", Build: action.Build{ID: "1", Team: "main"}, StepName: "out", Type: action.KindPut,
		Run: action.Run{Path: "/opt/resource/out"}, WorkDir: "/tmp/build/put", StdinSecret: true,
		Inputs: []action.Input{{Name: "built", Path: "built", Key: all["built"].Key}, {Name: "repo", Path: "repo", Key: all["repo"].Key}}}
	if err := Gate(a); err != nil {
		t.Fatal(err)
	}
	if a.Inputs[0].From != "built" || a.Inputs[0].Key != "" || a.Inputs[1].Key != "k-repo" {
		t.Fatalf("gated inputs %+v", a.Inputs)
	}
}
