package scheduler

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/porter-ci/porter/pkg/concourse"
)

func TestJobInputsWalksThePlanAndHooks(t *testing.T) {
	var job concourse.JobConfig
	err := json.Unmarshal([]byte(`{"name": "j", "plan": [
		{"in_parallel": {"steps": [
			{"get": "src", "trigger": true, "passed": ["unit"]},
			{"get": "img", "resource": "image", "version": "every"}]}},
		{"do": [{"try": {"get": "pinned", "version": {"ref": "v1"}}}]},
		{"task": "t", "file": "src/t.yml"},
		{"get": "src"}
	], "ensure": {"get": "late"}}`), &job)
	if err != nil {
		t.Fatal(err)
	}
	got := JobInputs(&job)
	want := []Input{
		{Name: "src", Resource: "src", Passed: []string{"unit"}, Trigger: true},
		{Name: "img", Resource: "image", Every: true},
		{Name: "pinned", Resource: "pinned", Pinned: map[string]string{"ref": "v1"}},
		{Name: "late", Resource: "late"},
	}
	if len(got) != len(want) {
		t.Fatalf("inputs %+v", got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Name != w.Name || g.Resource != w.Resource || !slices.Equal(g.Passed, w.Passed) || g.Trigger != w.Trigger ||
			g.Every != w.Every || !maps.Equal(g.Pinned, w.Pinned) {
			t.Errorf("input %d: %+v, want %+v", i, g, w)
		}
	}
}

func TestResolve(t *testing.T) {
	in := func(name string, passed ...string) Input { return Input{Name: name, Resource: name, Passed: passed} }
	for _, tc := range []struct {
		name   string
		cands  []Candidates
		want   map[string]int64
		reason string
	}{
		{
			name:  "latest of each",
			cands: []Candidates{{Input: in("a"), Versions: []int64{3, 2, 1}}, {Input: in("b"), Versions: []int64{9}}},
			want:  map[string]int64{"a": 3, "b": 9},
		},
		{
			name: "passed skips versions no succeeded build had",
			cands: []Candidates{{Input: in("a", "unit"), Versions: []int64{3, 2, 1},
				Passed: map[string]map[int64][]int64{"unit": {2: {10}, 1: {11}}}}},
			want: map[string]int64{"a": 2},
		},
		{
			name: "inputs passing the same job come from one build of it",
			cands: []Candidates{
				// build 20 had a=3 with b=7; build 21 had a=2 with b=8.
				{Input: in("a", "unit"), Versions: []int64{3, 2}, Passed: map[string]map[int64][]int64{"unit": {3: {20}, 2: {21}}}},
				{Input: in("b", "unit"), Versions: []int64{8, 7}, Passed: map[string]map[int64][]int64{"unit": {8: {21}, 7: {20}}}},
			},
			want: map[string]int64{"a": 3, "b": 7},
		},
		{
			name: "different passed jobs are independent",
			cands: []Candidates{
				{Input: in("a", "unit"), Versions: []int64{3, 2}, Passed: map[string]map[int64][]int64{"unit": {3: {20}}}},
				{Input: in("b", "lint"), Versions: []int64{8, 7}, Passed: map[string]map[int64][]int64{"lint": {8: {30}}}},
			},
			want: map[string]int64{"a": 3, "b": 8},
		},
		{
			name: "no build had both",
			cands: []Candidates{
				{Input: in("a", "unit"), Versions: []int64{3}, Passed: map[string]map[int64][]int64{"unit": {3: {20}}}},
				{Input: in("b", "unit"), Versions: []int64{8}, Passed: map[string]map[int64][]int64{"unit": {8: {21}}}},
			},
			reason: "no versions of input a, b satisfy passed constraints",
		},
		{
			name:   "no versions at all",
			cands:  []Candidates{{Input: in("a")}, {Input: in("b"), Versions: []int64{1}}},
			reason: "no versions of input a",
		},
		{
			name:   "a reason wins",
			cands:  []Candidates{{Input: in("a"), Reason: `pinned version {"ref":"x"} of resource a not found`}},
			reason: `pinned version {"ref":"x"} of resource a not found`,
		},
		{
			name: "no inputs",
			want: map[string]int64{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := Resolve(tc.cands)
			if reason != tc.reason {
				t.Fatalf("reason %q, want %q", reason, tc.reason)
			}
			if tc.reason == "" && !maps.Equal(got, tc.want) {
				t.Fatalf("chose %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseCheckSettingsAndJitter(t *testing.T) {
	cs, err := ParseCheckSettings(&concourse.ResourceConfig{Name: "r"})
	if err != nil || cs.Every != DefaultCheckEvery || cs.Timeout != DefaultCheckTimeout {
		t.Fatalf("defaults %+v, %v", cs, err)
	}
	cs, err = ParseCheckSettings(&concourse.ResourceConfig{Name: "r", CheckEvery: "never", CheckTimeout: "5s"})
	if err != nil || cs.Every != 0 || cs.Timeout.Seconds() != 5 {
		t.Fatalf("never %+v, %v", cs, err)
	}
	if _, err := ParseCheckSettings(&concourse.ResourceConfig{Name: "r", CheckEvery: "soon"}); err == nil {
		t.Fatal("check_every: soon was accepted")
	}
	for range 1000 {
		j := Jitter(DefaultCheckEvery)
		if j < 54e9 || j > 66e9 {
			t.Fatalf("jittered %v outside ±10%%", j)
		}
	}
}
