package flydocs

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/porter-ci/porter/test/testenv"
)

// The committed page is what the specs and Commands make of it now.
func TestDocIsGenerated(t *testing.T) {
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	want, err := Generate(root)
	if err != nil {
		t.Fatalf("generate: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(root, DocPath))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		gotLines, wantLines := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := range max(len(gotLines), len(wantLines)) {
			g, w := line(gotLines, i), line(wantLines, i)
			if g != w {
				t.Fatalf("%s differs from what the specs make of it, from line %d:\n  committed: %s\n  generated: %s\nrun `go run ./hack/flydocs`", DocPath, i+1, g, w)
			}
		}
	}
}

func line(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(nothing)"
}

// Commands are exactly the commands `fly --help` lists.
func TestCommandsAreFlys(t *testing.T) {
	fly, err := testenv.FindFly()
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	out, _ := exec.Command(fly, "--help").CombinedOutput() // fly exits non-zero after its help
	_, list, ok := strings.Cut(string(out), "Available commands:")
	if !ok {
		t.Fatalf("fly --help lists no commands:\n%s", out)
	}
	var flys []string
	for _, l := range strings.Split(list, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			flys = append(flys, f[0])
		}
	}
	var ours []string
	for _, c := range Commands {
		ours = append(ours, c.Name)
	}
	sort.Strings(flys)
	if strings.Join(ours, " ") != strings.Join(flys, " ") {
		t.Fatalf("Commands (in order) are\n  %v\nfly --help lists\n  %v", ours, flys)
	}
}

// Specs are found with their containers' set-up and the helpers they call,
// however deep; a command's status needs a spec that runs it.
func TestSpecsAndStatus(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "test", "x")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := `package x_test

func setPipeline() { run("set-pipeline") }
func viaHelper()   { setPipeline() }

var _ = Describe("outer", func() {
	BeforeAll(func() { run("execute") })
	It("runs builds", func(ctx SpecContext) { run("builds") }, SpecTimeout(1))
	It("sets a pipeline through two helpers", func() { viaHelper() })
	It("sets a pipeline again", func() { viaHelper() })
})

var _ = Describe("other", func() {
	It("runs nothing", func() {})
})
`
	if err := os.WriteFile(filepath.Join(dir, "x_test.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	specs, err := loadSpecs(root)
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]string{}
	for _, s := range specs {
		var names []string
		for l := range s.runs {
			names = append(names, l)
		}
		sort.Strings(names)
		runs[s.text] = strings.Join(names, ",")
	}
	for text, want := range map[string]string{
		"runs builds":                         "builds,execute",
		"sets a pipeline through two helpers": "execute,set-pipeline",
		"runs nothing":                        "",
	} {
		if runs[text] != want {
			t.Errorf("spec %q runs %q, want %q", text, runs[text], want)
		}
	}

	const file = "test/x/x_test.go :: "
	doc, err := render([]Command{
		{Name: "builds", Specs: []string{file + "runs builds"}},
		{Name: "execute", Specs: []string{file + "runs b"}},
		{Name: "sync", Kind: Refused, Specs: nil},
	}, specs)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| `builds` | yes |  | test/x/x_test :: runs builds |",
		"| `execute` | yes |  | test/x/x_test :: runs b… |",
		"| `sync` | untested |  |  |",
		"2 call the server and work; 1 untested (`sync`)",
	} {
		if !bytes.Contains(doc, []byte(want)) {
			t.Errorf("page lacks %q:\n%s", want, doc)
		}
	}

	for _, tc := range []struct {
		cmd  Command
		want string
	}{
		{Command{Name: "builds", Specs: []string{file + "runs nothing"}}, `does not run it`},
		{Command{Name: "builds", Specs: []string{file + "was renamed"}}, `no spec "was renamed" in test/x/x_test.go (renamed or gone?)`},
		{Command{Name: "set-pipeline", Specs: []string{file + "sets a pipeline"}}, `2 specs of test/x/x_test.go start with "sets a pipeline"`},
		{Command{Name: "builds", Specs: []string{"runs builds"}}, `is not "PATH :: TEXT"`},
	} {
		if _, err := render([]Command{tc.cmd}, specs); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("render %v: err = %v, want %q", tc.cmd.Specs, err, tc.want)
		}
	}
}
