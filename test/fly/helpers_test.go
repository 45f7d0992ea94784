package fly_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/test/testenv"
)

// newFly is a fly of its own (own HOME, so own ~/.flyrc) for target.
func newFly(target string) *testenv.Fly {
	f := testenv.NewFly(s.flyBin, GinkgoT().TempDir(), target)
	f.Log = GinkgoWriter
	return f
}

// run runs fly to the end; its exit code is for the spec to check.
func run(ctx context.Context, f *testenv.Fly, args ...string) testenv.FlyResult {
	GinkgoHelper()
	return runCmd(ctx, f, testenv.FlyCmd{Args: args})
}

func runCmd(ctx context.Context, f *testenv.Fly, c testenv.FlyCmd) testenv.FlyResult {
	GinkgoHelper()
	res, err := f.Exec(ctx, c)
	Expect(err).NotTo(HaveOccurred(), res.String())
	return res
}

// succeed runs fly and expects exit code 0.
func succeed(ctx context.Context, f *testenv.Fly, args ...string) testenv.FlyResult {
	GinkgoHelper()
	res := run(ctx, f, args...)
	Expect(res.ExitCode).To(Equal(0), res.String())
	return res
}

// login logs f in to srv and expects fly to accept the server's version
// without a warning.
func login(ctx context.Context, f *testenv.Fly, srv *testenv.ATC, user, password string, extra ...string) testenv.FlyResult {
	GinkgoHelper()
	res, err := f.Login(ctx, srv.URL(), user, password, extra...)
	Expect(err).NotTo(HaveOccurred())
	Expect(res.ExitCode).To(Equal(0), res.String())
	Expect(res.Stdout).To(ContainSubstring("target saved"), res.String())
	Expect(res.Stderr).NotTo(ContainSubstring("out of sync"), res.String())
	return res
}

// busybox is a task config's head: the image every task here runs in.
const busybox = `platform: linux
image_resource:
  type: registry-image
  source: {repository: busybox}
`

// taskFile writes a task config (busybox plus rest) into a fresh directory
// and returns its path.
func taskFile(rest string) string {
	GinkgoHelper()
	path := filepath.Join(GinkgoT().TempDir(), "task.yml")
	Expect(os.WriteFile(path, []byte(busybox+rest), 0o644)).To(Succeed())
	return path
}

// shTask is a task running script with sh -c.
func shTask(script string) string {
	GinkgoHelper()
	return taskFile("run:\n  path: sh\n  args: [-c, " + strconv.Quote(script) + "]\n")
}

var executingBuild = regexp.MustCompile(`executing build (\d+) at (\S+)`)

// buildID reads the build id from execute's first line.
func buildID(stdout string) int {
	GinkgoHelper()
	m := executingBuild.FindStringSubmatch(stdout)
	Expect(m).NotTo(BeNil(), "no 'executing build N' line in:\n%s", stdout)
	id, err := strconv.Atoi(m[1])
	Expect(err).NotTo(HaveOccurred())
	return id
}

// startBuild creates a build with `fly execute --background` and returns
// its id.
func startBuild(ctx context.Context, f *testenv.Fly, script string) int {
	GinkgoHelper()
	res := succeed(ctx, f, "execute", "--background", "-c", shTask(script))
	return buildID(res.Stdout)
}

// apiBuild is the part of a build's API answer the specs read.
type apiBuild struct {
	ID        int     `json:"id"`
	Name      string  `json:"name"`
	Status    string  `json:"status"`
	TeamName  string  `json:"team_name"`
	CreatedBy *string `json:"created_by"`
	StartTime int64   `json:"start_time"`
	EndTime   int64   `json:"end_time"`
}

// getBuild reads a build from srv's API as the holder of token.
func getBuild(ctx context.Context, srv *testenv.ATC, token string, id int) apiBuild {
	GinkgoHelper()
	code, body := call(ctx, http.MethodGet, srv.URL()+"/api/v1/builds/"+strconv.Itoa(id), token, nil, nil)
	Expect(code).To(Equal(http.StatusOK), body)
	var b apiBuild
	Expect(json.Unmarshal([]byte(body), &b)).To(Succeed(), body)
	return b
}

// buildStatus is the status of a build of the shared server.
func buildStatus(ctx context.Context, id int) string {
	GinkgoHelper()
	return getBuild(ctx, s.server, s.adminToken, id).Status
}

// latestBuildID is the id of the newest build on the shared server (0: none).
func latestBuildID(ctx context.Context) int {
	GinkgoHelper()
	code, body := call(ctx, http.MethodGet, s.server.URL()+"/api/v1/builds?limit=1", s.adminToken, nil, nil)
	Expect(code).To(Equal(http.StatusOK), body)
	var builds []apiBuild
	Expect(json.Unmarshal([]byte(body), &builds)).To(Succeed(), body)
	if len(builds) == 0 {
		return 0
	}
	return builds[0].ID
}

// flyContainer is a row of `fly containers --json`.
type flyContainer struct {
	ID         string `json:"id"`
	WorkerName string `json:"worker_name"`
	Type       string `json:"type"`
	StepName   string `json:"step_name"`
	BuildID    int    `json:"build_id"`
	BuildName  string `json:"build_name"`
	State      string `json:"state"`
}

// containersOf are the containers of a build, as admin's fly lists them.
func containersOf(ctx context.Context, id int) []flyContainer {
	GinkgoHelper()
	res := succeed(ctx, s.adminFly, "containers", "--json")
	var all, out []flyContainer
	Expect(json.Unmarshal([]byte(res.Stdout), &all)).To(Succeed(), res.String())
	for _, c := range all {
		if c.BuildID == id {
			out = append(out, c)
		}
	}
	return out
}

// call makes one HTTP request to the server and returns the status code
// and body. token may be empty; header adds headers.
func call(ctx context.Context, method, url, token string, body io.Reader, header http.Header) (int, string) {
	GinkgoHelper()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	Expect(err).NotTo(HaveOccurred())
	for k, vs := range header {
		req.Header[k] = vs
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	return resp.StatusCode, string(b)
}

// buildPods are the pods of a build of srv's worker.
func buildPods(ctx context.Context, worker string, id int) []corev1.Pod {
	GinkgoHelper()
	pods, err := s.env.Admin.CoreV1().Pods(s.ns.Name).List(ctx, metav1.ListOptions{
		LabelSelector: podspec.BuildSelector(worker, strconv.Itoa(id)),
	})
	Expect(err).NotTo(HaveOccurred())
	return pods.Items
}

// running says whether any of pods still runs a container.
func running(pods []corev1.Pod) bool {
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return true
		}
	}
	return false
}

var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

// plain drops the colours fly prints around build events.
func plain(s string) string { return ansi.ReplaceAllString(s, "") }

// lines splits output into lines without colours or carriage returns.
func lines(s string) []string {
	return strings.Split(strings.ReplaceAll(plain(s), "\r", ""), "\n")
}
