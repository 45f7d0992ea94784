package pipeline

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/concourse"
)

// typeChain is a pipeline whose resource r is of type t<n-1>, each t<i>
// fetched by t<i-1> and t0 by registry-image: a chain of n custom types.
func typeChainConfig(n int) string {
	var b strings.Builder
	b.WriteString("resource_types:\n- {name: t0, type: registry-image, source: {repository: busybox}}\n")
	for i := 1; i < n; i++ {
		fmt.Fprintf(&b, "- {name: t%d, type: t%d, source: {repository: busybox}}\n", i, i-1)
	}
	fmt.Fprintf(&b, "resources:\n- {name: r, type: t%d, source: {}}\njobs:\n- name: j\n  plan:\n  - get: r\n  - put: r\n", n-1)
	return b.String()
}

// nestedConfig is a job whose task sits depth steps deep (1: a plan step),
// alternating do, try and on_failure so each way of nesting counts.
func nestedConfig(depth int) string {
	step := "{task: t, file: f}"
	for d := 1; d < depth; d++ {
		switch d % 3 {
		case 0:
			step = "{do: [" + step + "]}"
		case 1:
			step = "{try: " + step + "}"
		default:
			step = "{task: t" + fmt.Sprint(d) + ", file: f, on_failure: " + step + "}"
		}
	}
	return "jobs:\n- name: j\n  plan:\n  - " + step + "\n"
}

// parallelConfig is one job of an in_parallel of n tasks.
func parallelConfig(n int, attempts int) string {
	var b strings.Builder
	b.WriteString("jobs:\n- name: j\n  plan:\n  - in_parallel:\n")
	for i := range n {
		fmt.Fprintf(&b, "    - {task: t%d, file: f, attempts: %d}\n", i, attempts)
	}
	return b.String()
}

// manyJobsConfig is n jobs, each getting a resource that passed the job
// before it.
func manyJobsConfig(n int) string {
	var b strings.Builder
	b.WriteString("resources:\n- {name: r, type: mock, source: {}}\njobs:\n- {name: j0, plan: [{get: r}]}\n")
	for i := 1; i < n; i++ {
		fmt.Fprintf(&b, "- {name: j%d, plan: [{get: r, passed: [j%d]}, {task: t, file: f}]}\n", i, i-1)
	}
	return b.String()
}

// bounded fails t if f takes more than 20 s: an exponential walk takes
// hours or all memory on these inputs, a linear one well under a second
// even on a loaded machine (the bound is loose so that load cannot fail it;
// make bench-set-pipeline has the timings).
func bounded[T any](t *testing.T, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	start := time.Now()
	go func() { done <- f() }()
	select {
	case v := <-done:
		t.Logf("took %v", time.Since(start))
		return v
	case <-time.After(20 * time.Second):
		t.Fatal("did not finish within 20 s")
		panic("unreachable")
	}
}

// validateYAML parses and validates yml: the problems found, a parse
// error as one.
func validateYAML(t *testing.T, yml string) []string {
	t.Helper()
	return bounded(t, func() []string {
		cfg, err := Parse([]byte(yml))
		if err != nil {
			return []string{err.Error()}
		}
		_, errs := Validate(cfg, Options{})
		return errs
	})
}

func TestLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		yml  string
		want string // "" to accept
	}{
		{"30-deep type chain", typeChainConfig(MaxTypeChainDepth), ""},
		{"31-deep type chain", typeChainConfig(MaxTypeChainDepth + 1), "resource_types.t30: type chain deeper than 30 (the limit)"},
		{"1000-deep type chain", typeChainConfig(1000), "resource_types.t30: type chain deeper than 30 (the limit)"},
		{"steps 50 deep", nestedConfig(MaxNestingDepth), ""},
		{"steps 51 deep", nestedConfig(MaxNestingDepth + 1), "steps nested deeper than 50 (the limit)"},
		{"steps 5000 deep", nestedConfig(5000), "steps nested deeper than 50 (the limit)"},
		{"1998 steps", parallelConfig(MaxPlanSteps-2, 0), ""},
		{"1999 steps", parallelConfig(MaxPlanSteps-1, 0), "jobs.j: plan has more than 2000 steps (the limit)"},
		{"attempts multiply", parallelConfig(10, 200), "jobs.j: plan has more than 2000 steps (the limit)"},
		{"a billion attempts", parallelConfig(1, 1_000_000_000), "jobs.j: plan has more than 2000 steps (the limit)"},
		{"1000 jobs", manyJobsConfig(1000), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := validateYAML(t, tc.yml)
			got := strings.Join(errs, "\n")
			if tc.want == "" {
				if len(errs) > 0 {
					t.Fatalf("refused: %s", got)
				}
				return
			}
			if !strings.Contains(got, tc.want) {
				t.Fatalf("errors %q do not contain %q", got, tc.want)
			}
			// Named once, however far past the cap.
			if n := strings.Count(got, tc.want); n != 1 {
				t.Errorf("%d cap errors, want 1: %s", n, got)
			}
		})
	}
}

// A resource type in a cycle is refused, naming the cycle.
func TestTypeCycle(t *testing.T) {
	errs := validateYAML(t, "resource_types:\n- {name: a, type: c}\n- {name: b, type: a}\n- {name: c, type: b}\n"+
		"resources:\n- {name: r, type: a}\njobs:\n- {name: j, plan: [{get: r}]}\n")
	if got := strings.Join(errs, "\n"); !strings.Contains(got, "resource_types.a: resource types form a cycle: a -> c -> b -> a") {
		t.Fatalf("errors: %s", got)
	}
}

// countImagePlans counts the image sub-plans under a type image.
func countImagePlans(ti concourse.TypeImage) int {
	n := 0
	for _, p := range []*concourse.Plan{ti.CheckPlan, ti.GetPlan} {
		if p == nil {
			continue
		}
		n++
		switch {
		case p.Check != nil:
			n += countImagePlans(p.Check.TypeImage)
		case p.Get != nil:
			n += countImagePlans(p.Get.TypeImage)
		}
	}
	return n
}

// A step of a type at the end of a chain carries a check and a get per
// custom type, not two copies of the chain below each.
func TestTypeChainPlanIsLinear(t *testing.T) {
	cfg, err := Parse([]byte(typeChainConfig(MaxTypeChainDepth)))
	if err != nil {
		t.Fatal(err)
	}
	plan := bounded(t, func() concourse.Plan {
		plan, err := JobPlan(cfg, &cfg.Jobs[0], map[string]InputVersion{"r": v("1")}, PlanOptions{})
		if err != nil {
			t.Error(err)
		}
		return plan
	})
	get := (*plan.Do)[0].Get
	if n := countImagePlans(get.TypeImage); n != 2*MaxTypeChainDepth {
		t.Errorf("%d image plans under the get, want %d", n, 2*MaxTypeChainDepth)
	}
	// The executor checks the chain from its bottom: every level's check
	// has its parent's image.
	ti, depth := get.TypeImage, 0
	for ti.CheckPlan != nil {
		depth++
		if want := fmt.Sprintf("t%d", MaxTypeChainDepth-depth); ti.CheckPlan.Check.Name != want {
			t.Fatalf("check at depth %d is of %s, want %s", depth, ti.CheckPlan.Check.Name, want)
		}
		ti = ti.CheckPlan.Check.TypeImage
	}
	if depth != MaxTypeChainDepth || ti.BaseType != "registry-image" {
		t.Errorf("check chain %d deep ending at %+v", depth, ti)
	}
	check := bounded(t, func() error {
		_, err := CheckPlan(cfg, &cfg.Resources[0], nil, PlanOptions{})
		return err
	})
	if check != nil {
		t.Error(check)
	}
}

// Resolving a pass's steps resolves each type once.
func TestTypeResolverMemo(t *testing.T) {
	cfg, err := Parse([]byte(typeChainConfig(20)))
	if err != nil {
		t.Fatal(err)
	}
	r := newTypeResolver(cfg.ResourceTypes, DefaultBaseTypes())
	first := r.chain("t19")
	if first.err != nil || len(first.custom) != 20 || first.base != "registry-image" {
		t.Fatalf("chain: %+v", first)
	}
	if _, err := r.image("1", "t19", nil); err != nil {
		t.Fatal(err)
	}
	if len(r.memo) != 1 {
		t.Errorf("%d chains resolved, want 1", len(r.memo))
	}
}

// jobPlanSize counts what JobPlan makes.
func TestJobPlanSizeMatchesThePlanner(t *testing.T) {
	cfg := parseFile(t, "testdata/job.yml")
	for _, yml := range []string{
		nestedConfig(12),
		parallelConfig(5, 3),
		"resources:\n- {name: r, type: mock}\njobs:\n- name: j\n  plan:\n  - {put: r, attempts: 2, timeout: 1m}\n  - {put: r, no_get: true, ensure: {get: r}}\n" +
			"  - {do: [{get: r}], timeout: 1m, on_success: {try: {task: x, file: f}}}\n  on_failure: {task: ty, file: f}\n  ensure: {in_parallel: [{task: z, file: f}]}\n",
	} {
		c, err := Parse([]byte(yml))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Jobs = append(cfg.Jobs, c.Jobs...)
		cfg.Resources = append(cfg.Resources, c.Resources...)
	}
	for i := range cfg.Jobs {
		j := &cfg.Jobs[i]
		inputs := map[string]InputVersion{}
		j.EachStep(func(s *concourse.Step) {
			if s.Get != "" {
				inputs[s.Get] = v("1")
			}
		})
		plan, err := JobPlan(cfg, j, inputs, PlanOptions{})
		if err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
		nodes := 0
		plan.Each(func(*concourse.Plan) { nodes++ })
		if got := jobPlanSize(j); got != nodes {
			t.Errorf("job %d (%s): size %d, the planner made %d", i, j.Name, got, nodes)
		}
	}
}

// The example pipelines are well within the caps.
func TestExamplesWithinLimits(t *testing.T) {
	paths, err := filepath.Glob("../../examples/*.yml")
	if err != nil {
		t.Fatal(err)
	}
	paths = append(paths, "testdata/job.yml")
	checked := 0
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "\njobs:") {
			continue // a task config
		}
		cfg, err := Parse(data)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if _, errs := Validate(cfg, Options{}); len(errs) > 0 {
			t.Errorf("%s: %q", path, errs)
		}
		checked++
	}
	if checked < 2 {
		t.Fatalf("checked %d pipelines", checked)
	}
}

func TestCheckPlanLimits(t *testing.T) {
	task := func() concourse.Plan { return concourse.Plan{ID: "t", Task: &concourse.TaskPlan{Name: "t"}} }
	nest := func(depth int) concourse.Plan {
		p := task()
		for range depth - 1 {
			p = concourse.Plan{Try: &concourse.TryPlan{Step: p}}
		}
		return p
	}
	wide := func(n int) concourse.Plan {
		steps := make(concourse.DoPlan, n-1)
		for i := range steps {
			steps[i] = task()
		}
		return concourse.Plan{Do: &steps}
	}
	chain := func(n int) concourse.Plan {
		ti := concourse.TypeImage{BaseType: "registry-image"}
		for i := range n {
			check := concourse.Plan{ID: concourse.PlanID(fmt.Sprint(i)), Check: &concourse.CheckPlan{Type: "x", TypeImage: ti}}
			ti = concourse.TypeImage{BaseType: "registry-image", CheckPlan: &check}
		}
		return concourse.Plan{ID: "g", Get: &concourse.GetPlan{Type: "x", TypeImage: ti}}
	}
	for _, tc := range []struct {
		name string
		plan concourse.Plan
		want string
	}{
		{"a task", task(), ""},
		{"50 deep", nest(MaxNestingDepth), ""},
		{"51 deep", nest(MaxNestingDepth + 1), "plan: steps nested deeper than 50 (the limit)"},
		{"2000 steps", wide(MaxPlanSteps), ""},
		{"2001 steps", wide(MaxPlanSteps + 1), "plan: more than 2000 steps (the limit)"},
		{"30-deep image chain", chain(MaxTypeChainDepth), ""},
		{"31-deep image chain", chain(MaxTypeChainDepth + 1), "type chain deeper than 30 (the limit)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckPlanLimits(&tc.plan)
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// A config built without Parse is held to the nesting cap by Validate.
func TestValidateNestingDepth(t *testing.T) {
	s := concourse.Step{Task: "t", File: "f"}
	for range MaxNestingDepth {
		inner := s
		s = concourse.Step{Try: &inner}
	}
	cfg := &concourse.Config{Jobs: []concourse.JobConfig{{Name: "j", Plan: []concourse.Step{s}}}}
	_, errs := Validate(cfg, Options{})
	if got := strings.Join(errs, "\n"); !strings.Contains(got, "steps nested deeper than 50 (the limit)") {
		t.Fatalf("errors: %s", got)
	}
}

// A config as deep as a request may carry is refused quickly.
func TestParseDeepConfig(t *testing.T) {
	const size = 4 << 20 // maxConfigSize
	for name, body := range map[string]string{
		"yaml flow": "jobs:\n- name: j\n  plan:\n  - " + strings.Repeat("{try: ", size/7) + "{task: t}" + strings.Repeat("}", size/7),
		"json":      `{"jobs":[{"name":"j","plan":[` + strings.Repeat(`{"try":`, size/8) + `{"task":"t"}` + strings.Repeat("}", size/8) + "]}]}",
	} {
		t.Run(name, func(t *testing.T) {
			errs := validateYAML(t, body)
			if len(errs) == 0 {
				t.Fatal("accepted")
			}
			t.Logf("%.200s", errs[0])
		})
	}
}
