package worker

import (
	"errors"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/concourse"
)

func TestChoose(t *testing.T) {
	linux := func(name string, mod ...func(*Candidate)) Candidate {
		c := Candidate{Name: name, Platform: PlatformLinux, State: concourse.WorkerRunning}
		for _, m := range mod {
			m(&c)
		}
		return c
	}
	tags := func(ts ...string) func(*Candidate) { return func(c *Candidate) { c.Tags = ts } }
	team := func(t string) func(*Candidate) { return func(c *Candidate) { c.Team = t } }
	state := func(s concourse.WorkerState) func(*Candidate) { return func(c *Candidate) { c.State = s } }
	load := func(containers, tasks int) func(*Candidate) {
		return func(c *Candidate) { c.ActiveContainers, c.ActiveTasks = containers, tasks }
	}
	waiting := func(n int) func(*Candidate) { return func(c *Candidate) { c.Waiting = n } }
	windows := func(c *Candidate) { c.Platform = PlatformWindows }
	privileged := func(c *Candidate) { c.Privileged = true }

	tests := []struct {
		name     string
		placer   Placer
		workers  []Candidate
		req      Requirements
		want     string
		wantErr  string // substring
		wantBusy bool
	}{
		{name: "untagged step avoids tagged workers", workers: []Candidate{linux("gpu", tags("gpu")), linux("plain")}, want: "plain"},
		{name: "tagged step needs every tag", workers: []Candidate{linux("a", tags("gpu")), linux("b", tags("gpu", "big"))},
			req: Requirements{Tags: []string{"gpu", "big"}}, want: "b"},
		{name: "no worker has the tag", workers: []Candidate{linux("a", tags("gpu"))}, req: Requirements{Tags: []string{"arm"}},
			wantErr: "no worker satisfies the step's platform linux, tags [arm]; the workers are a (platform linux, tags [gpu])"},
		{name: "no workers at all", wantErr: "no workers: none is registered"},
		{name: "team worker refuses other teams", workers: []Candidate{linux("t", team("blue"))}, req: Requirements{Team: "main"},
			wantErr: "team blue"},
		{name: "team prefers its own worker", workers: []Candidate{linux("general"), linux("own", team("blue"), load(9, 9))},
			req: Requirements{Team: "blue"}, want: "own"},
		{name: "team falls back to general workers", workers: []Candidate{linux("general"), linux("own", team("blue"), state(concourse.WorkerLanding))},
			req: Requirements{Team: "blue"}, want: "general"},
		{name: "platform", workers: []Candidate{linux("l"), linux("w", windows)}, req: Requirements{Platform: PlatformWindows}, want: "w"},
		{name: "stalled and landing workers take no steps", workers: []Candidate{linux("s", state(concourse.WorkerStalled)), linux("l", state(concourse.WorkerLanding))},
			wantBusy: true, wantErr: "worker s is stalled; worker l is landing"},
		{name: "a landing worker still takes steps of builds that run on it", workers: []Candidate{linux("l", state(concourse.WorkerLanding))},
			req: Requirements{Started: []string{"l"}}, want: "l"},
		{name: "fewest build containers", workers: []Candidate{linux("busy", load(5, 1)), linux("idle", load(1, 1))}, want: "idle"},
		{name: "limit active tasks waits at the limit", placer: Placer{Strategy: LimitActiveTasks, MaxActiveTasks: 2},
			workers: []Candidate{linux("a", load(3, 2))}, req: Requirements{Task: true}, wantBusy: true, wantErr: "runs 2 active tasks, its limit"},
		{name: "limit active tasks ignores resource steps", placer: Placer{Strategy: LimitActiveTasks, MaxActiveTasks: 2},
			workers: []Candidate{linux("a", load(3, 2))}, want: "a"},
		{name: "a pod declared ahead goes where the share of such pods has room", placer: Placer{MaxWaiting: 2},
			workers: []Candidate{linux("full", waiting(2)), linux("room", waiting(1))}, req: Requirements{Task: true, Ahead: true}, want: "room"},
		{name: "no worker with room for a pod declared ahead: busy", placer: Placer{MaxWaiting: 2},
			workers: []Candidate{linux("full", waiting(2))}, req: Requirements{Task: true, Ahead: true}, wantBusy: true, wantErr: "holds 2 pods declared ahead, its limit"},
		{name: "pods declared ahead never make a step to run now wait", placer: Placer{MaxWaiting: 2},
			workers: []Candidate{linux("full", waiting(5))}, req: Requirements{Task: true}, want: "full"},
		{name: "no pod declared ahead at all with a share of 0",
			workers: []Candidate{linux("a")}, req: Requirements{Task: true, Ahead: true}, wantBusy: true, wantErr: "holds 0 pods declared ahead, its limit"},
		{name: "limit active tasks picks the fewest tasks", placer: Placer{Strategy: LimitActiveTasks},
			workers: []Candidate{linux("a", load(1, 3)), linux("b", load(7, 0))}, req: Requirements{Task: true}, want: "b"},
		{name: "a privileged step needs a worker that allows it", workers: []Candidate{linux("plain"), linux("priv", privileged, load(9, 9))},
			req: Requirements{Privileged: true}, want: "priv"},
		{name: "no worker allows privileged steps", workers: []Candidate{linux("local")}, req: Requirements{Privileged: true},
			wantErr: "no worker satisfies the step's platform linux, privileged; the workers are local (platform linux, privileged steps not allowed); " +
				"a worker runs privileged steps only when its workers config says `privileged: allow`"},
		{name: "unprivileged steps run on privileged workers too", workers: []Candidate{linux("priv", privileged)}, want: "priv"},
		{name: "random picks among all ready", placer: Placer{Strategy: Random, Intn: func(n int) int { return n - 1 }},
			workers: []Candidate{linux("a", load(0, 0)), linux("b", load(9, 9))}, want: "b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.placer
			if p.Intn == nil {
				p.Intn = func(int) int { return 0 }
			}
			got, err := p.Choose(tc.workers, tc.req)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				var busy *BusyError
				if errors.As(err, &busy) != tc.wantBusy {
					t.Fatalf("busy = %v, want %v (%v)", !tc.wantBusy, tc.wantBusy, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != tc.want {
				t.Fatalf("chose %s, want %s", got.Name, tc.want)
			}
		})
	}
}

func TestParse(t *testing.T) {
	ws, err := Parse([]byte(`
workers:
- name: gpu
  namespace: steps-gpu
  tags: [gpu]
  tag_placement:
    gpu:
      node_selector: {accelerator: nvidia}
      tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
- name: plain
  namespace: steps
  team: main
  privileged: allow
`))
	if err != nil {
		t.Fatal(err)
	}
	if ws[1].Platform != PlatformLinux || ws[0].TagPlacement["gpu"].NodeSelector["accelerator"] != "nvidia" ||
		ws[0].TagPlacement["gpu"].Tolerations[0].Key != "nvidia.com/gpu" || ws[0].AllowsPrivileged() || !ws[1].AllowsPrivileged() {
		t.Fatalf("parsed %+v", ws)
	}
	for body, want := range map[string]string{
		"workers: []": "no workers",
		"workers: [{name: a, namespace: n, tagz: [x]}]":                            `unknown field "tagz"`,
		"workers: [{name: A, namespace: n}]":                                       `worker name "A"`,
		"workers: [{name: a, namespace: N_1}]":                                     `namespace "N_1"`,
		"workers: [{name: a, namespace: n, platform: darwin}]":                     `platform "darwin"`,
		"workers: [{name: a, namespace: n}, {name: a, namespace: m}]":              `worker "a" is declared twice`,
		"workers: [{name: a, namespace: n, tag_placement: {gpu: {}}}]":             `tag_placement for "gpu"`,
		"workers: [{name: a, namespace: n, in_cluster: true, kubeconfig: /x}]":     "exclude each other",
		"workers: [{name: a, namespace: n, privileged: maybe}]":                    `worker a: privileged "maybe": want allow or deny`,
		"workers: [{name: a, namespace: n, platform: windows, privileged: allow}]": "privileged: allow on a windows worker",
	} {
		if _, err := Parse([]byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%s) = %v, want an error containing %q", body, err, want)
		}
	}
}

func TestTeamNamespaces(t *testing.T) {
	ws, err := Parse([]byte(`
workers:
- name: local
  namespace: steps
  tags: [big]
  privileged: allow
  team_namespaces: {main: steps-main, other: steps-other}
`))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, w := range ws {
		names = append(names, w.Name+"="+w.Namespace+"/"+w.Team+"/"+w.TeamNamespaceOf)
	}
	if got := strings.Join(names, " "); got != "local=steps// local.main=steps-main/main/local local.other=steps-other/other/local" {
		t.Fatalf("expanded to %s", got)
	}
	if !ws[1].AllowsPrivileged() || ws[1].Tags[0] != "big" {
		t.Errorf("a team's namespace worker keeps the worker's settings: %+v", ws[1])
	}
	if !OwnNamespace(ws, "main") || OwnNamespace(ws, "third") {
		t.Error("OwnNamespace")
	}

	for body, want := range map[string]string{
		"workers: [{name: a, namespace: ns, team_namespaces: {main: ns}}]":                             `namespace "ns" of team main is also the worker's`,
		"workers: [{name: a, namespace: n, team_namespaces: {main: m, other: m}}]":                     `namespace "m" of team other is also team main's`,
		"workers: [{name: a, namespace: n, team_namespaces: {Main: m}}]":                               `team "Main" is not a team name`,
		"workers: [{name: a, namespace: n, team: x, team_namespaces: {main: m}}]":                      "team_namespaces on team x's worker",
		"workers: [{name: a, namespace: n, image_pull_secrets: [s], team_namespaces: {main: m}}]":      "team_namespaces with image_pull_secrets",
		"workers: [{name: a, namespace: n, team_namespaces: {main: m}}, {name: a.main, namespace: o}]": `worker "a.main" is declared twice`,
	} {
		if _, err := Parse([]byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%s) = %v, want an error containing %q", body, err, want)
		}
	}

	// A team with a namespace of its own runs only there, even when its
	// worker is busy; other teams use the shared one.
	cs := []Candidate{{Name: "local", Platform: PlatformLinux, State: concourse.WorkerRunning},
		{Name: "local.main", Platform: PlatformLinux, Team: "main", State: concourse.WorkerLanding}}
	_, err = Placer{}.Choose(cs, Requirements{Team: "main", OwnNamespace: true})
	var busy *BusyError
	if !errors.As(err, &busy) {
		t.Errorf("team main while its namespace's worker lands: %v, want to wait", err)
	}
	if c, err := (Placer{}).Choose(cs, Requirements{Team: "other"}); err != nil || c.Name != "local" {
		t.Errorf("team other: %v, %v", c.Name, err)
	}
	_, err = Placer{}.Choose(cs[:1], Requirements{Team: "main", OwnNamespace: true})
	var none *NoWorkerError
	if !errors.As(err, &none) || !strings.Contains(err.Error(), "its own workers only") {
		t.Errorf("team main without its worker registered: %v, want no worker", err)
	}
}
