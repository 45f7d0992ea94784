package fly_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/test/testenv"
)

// expectInOrder checks that out has each of parts, in this order.
func expectInOrder(res testenv.FlyResult, parts ...string) {
	GinkgoHelper()
	out := plain(res.Stdout)
	at := 0
	for _, p := range parts {
		i := strings.Index(out[at:], p)
		Expect(i).To(BeNumerically(">=", 0), "%q not found (in order) in:\n%s", p, res.String())
		at += i + len(p)
	}
}

// Every execute flag gets its own spec, but the builds behind them run at
// once in BeforeAll: pod start-up, not fly, is what takes the time.
var _ = Describe("fly execute", Ordered, ContinueOnFailure, func() {
	var (
		results             map[string]testenv.FlyResult
		outputs, inputs     string // -o's directory; -i's directory
		privileged, regular string // names of the results compared by -p
	)

	BeforeAll(func(ctx SpecContext) {
		_, err := exec.LookPath("git")
		Expect(err).NotTo(HaveOccurred(), "fly reads .gitignore through git")
		inputs = filepath.Join(GinkgoT().TempDir(), "proj")
		Expect(os.MkdirAll(filepath.Join(inputs, "sub"), 0o755)).To(Succeed())
		for name, content := range map[string]string{
			".gitignore": "ignored.txt\n", "kept.txt": "kept\n", "ignored.txt": "ignored\n", "sub/nested.txt": "nested\n",
		} {
			Expect(os.WriteFile(filepath.Join(inputs, name), []byte(content), 0o644)).To(Succeed())
		}
		git := exec.CommandContext(ctx, "git", "init", "-q", inputs)
		out, err := git.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
		outputs = GinkgoT().TempDir()
		varsFile := filepath.Join(GinkgoT().TempDir(), "vars.yml")
		Expect(os.WriteFile(varsFile, []byte("from_file: from-a-file\n"), 0o644)).To(Succeed())

		listInputs := taskFile(`inputs: [{name: proj}]
run: {path: sh, args: [-c, "cd proj && find . -type f -not -path './.git/*' | sort"]}
`)
		caps := shTask("grep CapEff /proc/self/status")
		privileged, regular = "privileged", "unprivileged"
		cases := map[string]testenv.FlyCmd{
			"config":          {Args: []string{"execute", "-c", taskFile("run: {path: echo, args: [\"Hello, world!\"]}\n")}},
			"inputs":          {Args: []string{"execute", "-c", listInputs, "-i", "proj=" + inputs}},
			"include-ignored": {Args: []string{"execute", "-c", listInputs, "-i", "proj=" + inputs, "--include-ignored"}},
			"outputs": {Args: []string{"execute", "-o", "out=" + outputs, "-c", taskFile(`outputs: [{name: out}]
run: {path: sh, args: [-c, "printf content-$((6*7)) > out/result.txt && mkdir out/sub && echo nested > out/sub/n.txt"]}
`)}},
			privileged: {Args: []string{"execute", "-p", "-c", caps}},
			regular:    {Args: []string{"execute", "-c", caps}},
			"vars": {Args: []string{"execute", "-v", "greeting=hello", "-y", "count=3", "-l", varsFile, "-c", taskFile(`params:
  STR: ((greeting))
  NUM: ((count))
  FILE: ((from_file))
run: {path: sh, args: [-c, 'echo "vars: $STR/$NUM/$FILE"']}
`)}},
			"tag":         {Args: []string{"execute", "--tag", workerTag, "-c", shTask("echo tagged")}},
			"unknown-tag": {Args: []string{"execute", "--tag", "no-such-tag", "-c", shTask("echo never")}},
			"args":        {Args: []string{"execute", "-c", taskFile("run: {path: echo, args: [one]}\n"), "--", "two", "three"}},
			"params": {
				Args: []string{"execute", "-c", taskFile(`params:
  FLY_E2E_GREETING: from-the-file
  FLY_E2E_KEPT: kept
run: {path: sh, args: [-c, 'echo "params: $FLY_E2E_GREETING $FLY_E2E_KEPT"']}
`)},
				Env: []string{"FLY_E2E_GREETING=from-the-environment"},
			},
			"porter-params": {Args: []string{"execute", "-c", taskFile(`params:
  PORTER_VERSION: "1.2"
run: {path: sh, args: [-c, 'echo "param: $PORTER_VERSION"']}
`)}},
			"failing": {Args: []string{"execute", "-c", shTask("echo failing; exit 7")}},
		}

		results = map[string]testenv.FlyResult{}
		var mu sync.Mutex
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(4)
		for name, c := range cases {
			c.Dir = GinkgoT().TempDir() // not an input's directory: fly would upload it
			g.Go(func() error {
				res, err := s.adminFly.Exec(gctx, c)
				mu.Lock()
				results[name] = res
				mu.Unlock()
				return err
			})
		}
		Expect(g.Wait()).To(Succeed())
	})

	It("runs a task config (-c) and shows its events", func() {
		res := results["config"]
		Expect(res.ExitCode).To(Equal(0), res.String())
		id := buildID(res.Stdout)
		Expect(res.Stdout).To(HavePrefix("executing build %d at %s/builds/%d\n", id, s.server.URL(), id))
		expectInOrder(res, "initializing\n", "running echo Hello, world!\n", "Hello, world!\n", "succeeded\n")
		Expect(res.Stderr).To(BeEmpty())
	})

	It("uploads an input (-i), leaving out what .gitignore names", func() {
		res := results["inputs"]
		Expect(res.ExitCode).To(Equal(0), res.String())
		Expect(lines(res.Stdout)).To(ContainElements("./.gitignore", "./kept.txt", "./sub/nested.txt"))
		Expect(lines(res.Stdout)).NotTo(ContainElement("./ignored.txt"))
	})

	It("uploads .gitignore'd files with --include-ignored", func() {
		res := results["include-ignored"]
		Expect(res.ExitCode).To(Equal(0), res.String())
		Expect(lines(res.Stdout)).To(ContainElements("./.gitignore", "./kept.txt", "./sub/nested.txt", "./ignored.txt"))
	})

	It("downloads an output (-o)", func() {
		res := results["outputs"]
		Expect(res.ExitCode).To(Equal(0), res.String())
		Expect(filepath.Join(outputs, "result.txt")).To(BeARegularFile())
		Expect(os.ReadFile(filepath.Join(outputs, "result.txt"))).To(BeEquivalentTo("content-42"))
		Expect(os.ReadFile(filepath.Join(outputs, "sub", "n.txt"))).To(BeEquivalentTo("nested\n"))
	})

	It("runs privileged with -p, and only then", func() {
		const capSysAdmin = 21
		for name, want := range map[string]bool{privileged: true, regular: false} {
			res := results[name]
			Expect(res.ExitCode).To(Equal(0), res.String())
			m := regexp.MustCompile(`CapEff:\s*([0-9a-f]+)`).FindStringSubmatch(res.Stdout)
			Expect(m).NotTo(BeNil(), res.String())
			caps, err := strconv.ParseUint(m[1], 16, 64)
			Expect(err).NotTo(HaveOccurred())
			Expect(caps&(1<<capSysAdmin) != 0).To(Equal(want), "%s: CapEff %s", name, m[1])
		}
	})

	It("fills ((vars)) from -v, -y and -l", func() {
		res := results["vars"]
		Expect(res.ExitCode).To(Equal(0), res.String())
		Expect(lines(res.Stdout)).To(ContainElement("vars: hello/3/from-a-file"))
	})

	It("runs a step tagged with a worker's tag on that worker (--tag) with the tag's placement, and untagged steps elsewhere", func(ctx SpecContext) {
		res := results["tag"]
		Expect(res.ExitCode).To(Equal(0), res.String())
		Expect(lines(res.Stdout)).To(ContainElement("tagged"))
		Expect(plain(res.Stdout)).To(ContainSubstring("selected worker: "+taggedWorker+"\n"), res.String())
		pods, err := s.env.Admin.CoreV1().Pods(s.tagged.Name).List(ctx, metav1.ListOptions{
			LabelSelector: "porter.dev/build=" + strconv.Itoa(buildID(res.Stdout))})
		Expect(err).NotTo(HaveOccurred())
		i := slices.IndexFunc(pods.Items, func(p corev1.Pod) bool { return strings.Contains(p.Name, "-one-off-") })
		Expect(i).NotTo(Equal(-1), "no pod of the task in %s", s.tagged.Name)
		task := pods.Items[i]
		Expect(task.Spec.NodeSelector).To(HaveKeyWithValue("kubernetes.io/os", "linux"))
		Expect(task.Spec.Tolerations).To(ContainElement(HaveField("Key", "porter.dev/e2e")))
		res = results["config"]
		Expect(plain(res.Stdout)).To(ContainSubstring("selected worker: "+sharedWorker+"\n"), res.String())
	})

	It("refuses a tag no worker has, clearly", func() {
		res := results["unknown-tag"]
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		Expect(res.Output()).To(ContainSubstring("no-such-tag"))
		Expect(res.Output()).To(ContainSubstring("no worker"))
		Expect(res.Stdout).NotTo(ContainSubstring("never"))
	})

	It("appends the arguments after -- to run.args", func() {
		res := results["args"]
		Expect(res.ExitCode).To(Equal(0), res.String())
		expectInOrder(res, "running echo one two three\n", "one two three\n", "succeeded\n")
	})

	It("takes params from the environment", func() {
		res := results["params"]
		Expect(res.ExitCode).To(Equal(0), res.String())
		Expect(lines(res.Stdout)).To(ContainElement("params: from-the-environment kept"))
	})

	It("passes params of any name, PORTER_* too, as Concourse does", func() {
		res := results["porter-params"]
		Expect(res.ExitCode).To(Equal(0), res.String())
		Expect(lines(res.Stdout)).To(ContainElement("param: 1.2"))
	})

	It("exits with a failing task's exit code", func() {
		res := results["failing"]
		Expect(res.ExitCode).To(Equal(7), res.String())
		expectInOrder(res, "failing\n", "failed\n")
	})
})
