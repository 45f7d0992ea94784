package runtime_test

// What the specs share: Porter's own CLI run in-process as a person who
// logged in with it (its own HOME, so its own ~/.flyrc), a typed client of
// the API holding the same token, the build's events, and the step pods
// found by the labels podspec puts on them.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/atcclient"
	"github.com/porter-ci/porter/pkg/cli"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/test/testenv"
)

// target is the name the specs' ~/.flyrc knows the server by.
const target = "rt"

// home is the current spec's HOME: Porter's CLI logged in to the server
// there (BeforeEach), and the CLI and api() read the target from it.
var home string

// Every spec logs in with Porter's own CLI, as a person would, into a HOME
// of its own: a spec never depends on another's login.
var _ = BeforeEach(func(ctx SpecContext) {
	home = GinkgoT().TempDir()
	res := porter(ctx, "login", "-c", server.URL(), "-u", user, "-p", password)
	Expect(res.Code).To(Equal(0), res.String())
	Expect(res.Stdout).To(ContainSubstring("target saved"), res.String())
})

// cliResult is what a finished CLI command printed, and its exit code.
type cliResult struct {
	Args           []string
	Code           int
	Stdout, Stderr string
}

func (r cliResult) String() string {
	return fmt.Sprintf("atc-porter-runtime %s\nexit code: %d\n--- stdout\n%s--- stderr\n%s", shown(r.Args), r.Code, r.Stdout, r.Stderr)
}

// cliEnv is what a CLI command sees besides its arguments.
type cliEnv struct {
	Stdin string
	// Env is the command's whole environment besides HOME (task params
	// come from it): nothing of the test process leaks in.
	Env map[string]string
}

// porter runs Porter's CLI with -t target, as a person would type it.
func porter(ctx context.Context, args ...string) cliResult {
	return porterWith(ctx, cliEnv{}, args...)
}

// porterWith runs Porter's CLI with stdin and environment.
func porterWith(ctx context.Context, e cliEnv, args ...string) cliResult {
	stdout, stderr := &testenv.Buffer{Tee: GinkgoWriter}, &testenv.Buffer{Tee: GinkgoWriter}
	full := append([]string{"-t", target}, args...)
	fmt.Fprintf(GinkgoWriter, "$ atc-porter-runtime %s\n", shown(full))
	code := cli.Run(ctx, full, cliRunEnv(e, stdout, stderr))
	return cliResult{Args: full, Code: code, Stdout: stdout.String(), Stderr: stderr.String()}
}

// porterInBackground runs Porter's CLI while the spec goes on; done
// delivers its exit code.
func porterInBackground(ctx context.Context, args ...string) (stdout, stderr *testenv.Buffer, done <-chan int) {
	stdout, stderr = &testenv.Buffer{Tee: GinkgoWriter}, &testenv.Buffer{Tee: GinkgoWriter}
	full := append([]string{"-t", target}, args...)
	fmt.Fprintf(GinkgoWriter, "$ atc-porter-runtime %s &\n", shown(full))
	env := cliRunEnv(cliEnv{}, stdout, stderr)
	codes := make(chan int, 1)
	go func() {
		defer GinkgoRecover()
		codes <- cli.Run(ctx, full, env)
	}()
	return stdout, stderr, codes
}

// shown is a command line for the log, without the password.
func shown(args []string) string {
	out := append([]string(nil), args...)
	for i := 1; i < len(out); i++ {
		if out[i-1] == "-p" && out[i] == password {
			out[i] = "REDACTED"
		}
	}
	return strings.Join(out, " ")
}

func cliRunEnv(e cliEnv, stdout, stderr io.Writer) cli.Env {
	h := home
	return cli.Env{
		Stdin: strings.NewReader(e.Stdin), Stdout: stdout, Stderr: stderr,
		LookupEnv: func(k string) (string, bool) {
			if k == "HOME" {
				return h, true
			}
			v, ok := e.Env[k]
			return v, ok
		},
		// No input is named like this directory: fly's "the current
		// directory is the input of its name" never applies by accident.
		WorkDir: h,
	}
}

// executingBuild is execute's first line, as fly's.
var executingBuild = regexp.MustCompile(`^executing build (\d+) at (\S+)\n`)

// buildID reads the build's ID from execute's first line.
func buildID(stdout string) int64 {
	GinkgoHelper()
	m := executingBuild.FindStringSubmatch(stdout)
	Expect(m).NotTo(BeNil(), "no 'executing build N at URL' line first in:\n%s", stdout)
	Expect(m[2]).To(Equal(fmt.Sprintf("%s/builds/%s", server.URL(), m[1])))
	id, err := strconv.ParseInt(m[1], 10, 64)
	Expect(err).NotTo(HaveOccurred())
	return id
}

// taskOutput is what a build's one task printed, out of execute's or
// watch's rendering (fly's): everything between "running ..." and the
// build's final status line.
func taskOutput(stdout string) string {
	GinkgoHelper()
	_, rest, ok := strings.Cut(stdout, "\nrunning ")
	Expect(ok).To(BeTrue(), "no 'running ...' line in:\n%s", stdout)
	_, rest, ok = strings.Cut(rest, "\n")
	Expect(ok).To(BeTrue(), stdout)
	m := regexp.MustCompile(`(?s)^(.*?)(succeeded|failed|errored|aborted)\n$`).FindStringSubmatch(rest)
	Expect(m).NotTo(BeNil(), "no final status line in:\n%s", stdout)
	return m[1]
}

// api is a client of the server with the token the spec's login saved in
// ~/.flyrc.
func api() *atcclient.Client {
	GinkgoHelper()
	data, err := os.ReadFile(filepath.Join(home, ".flyrc"))
	Expect(err).NotTo(HaveOccurred())
	var rc struct {
		Targets map[string]struct {
			API   string `json:"api"`
			Team  string `json:"team"`
			Token struct {
				Value string `json:"value"`
			} `json:"token"`
		} `json:"targets"`
	}
	Expect(yaml.Unmarshal(data, &rc)).To(Succeed())
	t, ok := rc.Targets[target]
	Expect(ok).To(BeTrue(), "no target %s in:\n%s", target, data)
	Expect(t.API).To(Equal(server.URL()))
	Expect(t.Team).To(Equal("main"))
	Expect(t.Token.Value).NotTo(BeEmpty())
	c, err := atcclient.New(atcclient.Options{URL: server.URL(), Token: t.Token.Value})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// getJSON reads an API route the client has no method for.
func getJSON(ctx context.Context, path string, out any) {
	GinkgoHelper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server.URL()+path, nil)
	Expect(err).NotTo(HaveOccurred())
	req.Header = api().AuthHeader()
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	Expect(resp.StatusCode).To(Equal(http.StatusOK), "GET %s: %s", path, body)
	Expect(json.Unmarshal(body, out)).To(Succeed(), string(body))
}

// getBuild reads a build from the API.
func getBuild(ctx context.Context, id int64) concourse.Build {
	GinkgoHelper()
	b, err := api().Build(ctx, id)
	Expect(err).NotTo(HaveOccurred())
	return b
}

// endedStatus is the status of a build whose end a command has just shown
// (execute or watch exited): the API must already say so, as Concourse's
// does, whose final status event and the build's row are one transaction.
func endedStatus(ctx context.Context, id int64) concourse.BuildStatus {
	GinkgoHelper()
	return getBuild(ctx, id).Status
}

// logCount counts s in build id's log.
func logCount(ctx context.Context, id int64, s string) int {
	GinkgoHelper()
	n := 0
	for _, l := range eventsOf[events.Log](buildEvents(ctx, id)) {
		n += strings.Count(l.Payload, s)
	}
	return n
}

// buildPodNames are the names of build id's step pods.
func buildPodNames(ctx context.Context, id int64) []string {
	GinkgoHelper()
	var names []string
	for _, pod := range buildPods(ctx, id) {
		names = append(names, pod.Name)
	}
	return names
}

// buildState is the build's state as its server saved it.
func buildState(ctx context.Context, id int64) buildstate.BuildState {
	GinkgoHelper()
	conn, err := pgx.Connect(ctx, databaseDSN)
	Expect(err).NotTo(HaveOccurred())
	defer conn.Close(context.WithoutCancel(ctx))
	var (
		raw []byte
		st  buildstate.BuildState
	)
	Expect(conn.QueryRow(ctx, "SELECT coalesce(state, '{}') FROM builds WHERE id = $1", id).Scan(&raw)).To(Succeed())
	Expect(json.Unmarshal(raw, &st)).To(Succeed())
	return st
}

// saveBuildState writes a build's state as a server would.
func saveBuildState(ctx context.Context, id int64, st buildstate.BuildState) {
	GinkgoHelper()
	raw, err := json.Marshal(st)
	Expect(err).NotTo(HaveOccurred())
	conn, err := pgx.Connect(ctx, databaseDSN)
	Expect(err).NotTo(HaveOccurred())
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, "UPDATE builds SET state = $2::jsonb WHERE id = $1", id, string(raw))
	Expect(err).NotTo(HaveOccurred())
}

// awaitEnded waits until the server's database has recorded the end of a
// build: the precondition of the specs that crash the server after a
// build ended.
func awaitEnded(ctx context.Context, id int64) {
	GinkgoHelper()
	Eventually(func() bool { return getBuild(ctx, id).Status.Finished() }).WithTimeout(time.Minute).Should(BeTrue())
}

// latestBuildID is the newest build's ID (0: none).
func latestBuildID(ctx context.Context) int64 {
	GinkgoHelper()
	bs, err := api().Builds(ctx, 1)
	Expect(err).NotTo(HaveOccurred())
	if len(bs) == 0 {
		return 0
	}
	return bs[0].ID
}

// buildEvents reads a build's events to their end (the build's end).
func buildEvents(ctx context.Context, id int64) []events.Event {
	GinkgoHelper()
	return eventsFrom(ctx, api(), id)
}

// eventsFrom reads a build's events to their end through c.
func eventsFrom(ctx context.Context, c *atcclient.Client, id int64) []events.Event {
	GinkgoHelper()
	s, err := c.BuildEvents(ctx, id)
	Expect(err).NotTo(HaveOccurred())
	defer s.Close()
	var evs []events.Event
	for {
		_, env, err := s.Next()
		if errors.Is(err, io.EOF) {
			return evs
		}
		Expect(err).NotTo(HaveOccurred())
		ev, err := env.Decode()
		Expect(err).NotTo(HaveOccurred(), "event %s %s: %s", env.Event, env.Version, env.Data)
		evs = append(evs, ev)
	}
}

// logs is what the steps printed on one stream, in order.
func logs(evs []events.Event, source string) string {
	var b strings.Builder
	for _, ev := range evs {
		if l, ok := ev.(events.Log); ok && l.Origin.Source == source {
			b.WriteString(l.Payload)
		}
	}
	return b.String()
}

// errorMessages are the build's error events' messages.
func errorMessages(evs []events.Event) []string {
	var out []string
	for _, ev := range evs {
		if e, ok := ev.(events.Error); ok {
			out = append(out, e.Message)
		}
	}
	return out
}

// planIDs hands out the IDs of a plan the spec writes, unique in it.
type planIDs int

func (p *planIDs) next() concourse.PlanID {
	*p++
	return concourse.PlanID(fmt.Sprintf("rt%d", *p))
}

// oneOff is the plan fly execute sends for one task with uploaded inputs
// (build artifact name -> artifact ID), wrapped, when outputs are asked
// for, in an ensure that keeps them:
//
//	ensure{do[in_parallel[artifact_input...], task], in_parallel[artifact_output...]}
//
// It returns the plan and the task's plan ID, which its events carry as
// origin.id.
func oneOff(task concourse.TaskPlan, inputs map[string]int64, outputs ...string) (concourse.Plan, concourse.PlanID) {
	var ids planIDs
	var in []concourse.Plan
	for name, id := range inputs {
		in = append(in, concourse.Plan{ID: ids.next(), ArtifactInput: &concourse.ArtifactInputPlan{ArtifactID: id, Name: name}})
	}
	if task.Name == "" {
		task.Name = "one-off"
	}
	taskPlan := concourse.Plan{ID: ids.next(), Task: &task}
	do := concourse.Plan{ID: ids.next(), Do: &concourse.DoPlan{
		{ID: ids.next(), InParallel: &concourse.InParallelPlan{Steps: in}}, taskPlan,
	}}
	if len(outputs) == 0 {
		return do, taskPlan.ID
	}
	var out []concourse.Plan
	for _, name := range outputs {
		out = append(out, concourse.Plan{ID: ids.next(), ArtifactOutput: &concourse.ArtifactOutputPlan{Name: name}})
	}
	return concourse.Plan{ID: ids.next(), Ensure: &concourse.HookPlan{Hook: concourse.HookEnsure, Step: do,
		Next: concourse.Plan{ID: ids.next(), InParallel: &concourse.InParallelPlan{Steps: out}}}}, taskPlan.ID
}

// taskConfigJSON turns a task file's YAML into the JSON a plan carries.
func taskConfigJSON(yamlText string) json.RawMessage {
	GinkgoHelper()
	j, err := yaml.YAMLToJSON([]byte(yamlText))
	Expect(err).NotTo(HaveOccurred())
	return j
}

// worker is the server's worker name, which its pods are labelled with.
func worker() string {
	if server.Config.WorkerName != "" {
		return server.Config.WorkerName
	}
	return "e2e" // testenv's default
}

// buildPods are the step pods of a build, found by their labels.
func buildPods(ctx context.Context, id int64) []corev1.Pod {
	GinkgoHelper()
	pods, err := admin.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: podspec.BuildSelector(worker(), strconv.FormatInt(id, 10)),
	})
	Expect(err).NotTo(HaveOccurred())
	return pods.Items
}

// stepPod reads the pod of a build's one step.
func stepPod(ctx context.Context, id int64) *corev1.Pod {
	GinkgoHelper()
	pods := buildPods(ctx, id)
	Expect(pods).To(HaveLen(1), "build %d has one step pod", id)
	return &pods[0]
}

// stepID is the step ID of a build's one step, from its pod's labels; the
// pod is named after it.
func stepID(ctx context.Context, id int64) string {
	GinkgoHelper()
	pod := stepPod(ctx, id)
	sid := pod.Labels[podspec.LabelStep]
	Expect(sid).NotTo(BeEmpty())
	Expect(pod.Name).To(Equal(podspec.Name(sid)))
	return sid
}

// deletePod deletes a build's one step pod at once and waits until it is
// gone.
func deletePod(ctx context.Context, id int64) {
	GinkgoHelper()
	name := stepPod(ctx, id).Name
	grace := int64(0)
	Expect(admin.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})).To(Succeed())
	Eventually(func() []corev1.Pod { return buildPods(ctx, id) }).WithTimeout(time.Minute).Should(BeEmpty())
}

// podContainer is one of a pod's containers (init containers included).
func podContainer(pod *corev1.Pod, name string) corev1.Container {
	GinkgoHelper()
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		if c.Name == name {
			return c
		}
	}
	Fail("no container " + name)
	return corev1.Container{}
}

// stepTerminated is the step container's terminated state, nil while it
// has not terminated.
func stepTerminated(pod *corev1.Pod) *corev1.ContainerStateTerminated {
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == podspec.StepContainerName {
			return s.State.Terminated
		}
	}
	return nil
}

// buildContainer is a build's one container as the API lists it.
func buildContainer(ctx context.Context, id int64) concourse.Container {
	GinkgoHelper()
	cs, err := api().Containers(ctx, "", atcclient.ContainerFilter{BuildID: id})
	Expect(err).NotTo(HaveOccurred())
	Expect(cs).To(HaveLen(1), "build %d has one container", id)
	return cs[0]
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// lastLines is the last n lines of s (a server's log, for a failure's message).
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
