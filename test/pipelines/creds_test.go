package pipelines_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/klauspost/compress/zstd"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/protobuf/encoding/protojson"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/test/testenv"
	"github.com/porter-ci/porter/test/testenv/gitserver"
)

// secretValue is a credential no spec shares and no log holds by chance.
func secretValue(what string) string {
	return what + "-" + strings.ToLower(rand.Text()[:12])
}

// varName is a var (and Secret) name no other spec uses.
func varName(base string) string {
	return base + "-" + strings.ToLower(rand.Text()[:6])
}

// createCredential writes a var of team main: Secret name with data.
func createCredential(ctx context.Context, name string, data map[string]string) {
	GinkgoHelper()
	Expect(testenv.CreateSecret(ctx, s.env.Admin, s.credNS, name, data)).To(Succeed())
}

// lastBuildID is the id of a job's newest build.
func lastBuildID(ctx context.Context, f *testenv.Fly, pipeline, job string) int64 {
	GinkgoHelper()
	builds := jobBuilds(ctx, f, pipeline, job)
	Expect(builds).NotTo(BeEmpty())
	id, ok := builds[0]["id"].(float64)
	Expect(ok).To(BeTrue(), "build without an id: %v", builds[0])
	return int64(id)
}

// auditStore is the shared server's audit bucket, as the admin sees it.
func auditStore(ctx context.Context) blobstore.Store {
	GinkgoHelper()
	cl := s.env.Cluster
	store, err := blobstore.Open(ctx, blobstore.Config{Driver: blobstore.DriverMinio,
		Endpoint: cl["PORTER_CLUSTER_MINIO_ENDPOINT"], Bucket: s.server.Config.Bucket + "-audit", Region: cl["PORTER_CLUSTER_MINIO_REGION"],
		AccessKey: cl["PORTER_CLUSTER_MINIO_ACCESS_KEY"], SecretKey: cl["PORTER_CLUSTER_MINIO_SECRET_KEY"]})
	Expect(err).NotTo(HaveOccurred())
	return store
}

// apiGet reads an API path as the admin.
func apiGet(ctx context.Context, path string) string {
	GinkgoHelper()
	token, err := s.server.Login(ctx, adminUser, s.password)
	Expect(err).NotTo(HaveOccurred())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.server.URL()+path, nil)
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	Expect(resp.StatusCode).To(Equal(http.StatusOK), "GET %s: %s", path, body)
	return string(body)
}

// auditPods are the pods of a build as they were created, from its audit
// trail (pod.yaml of each step).
func auditPods(ctx context.Context, buildID int64) []corev1.Pod {
	GinkgoHelper()
	store := auditStore(ctx)
	prefix, err := testenv.AuditPrefix(ctx, store, buildID)
	Expect(err).NotTo(HaveOccurred())
	objs, err := store.List(ctx, prefix)
	Expect(err).NotTo(HaveOccurred())
	var pods []corev1.Pod
	for _, o := range objs {
		if !strings.HasSuffix(o.Key, "/"+blobstore.PodObject) {
			continue
		}
		rc, _, err := store.Get(ctx, o.Key)
		Expect(err).NotTo(HaveOccurred())
		body, err := io.ReadAll(rc)
		rc.Close()
		Expect(err).NotTo(HaveOccurred())
		var pod corev1.Pod
		Expect(yaml.Unmarshal(body, &pod)).To(Succeed(), "read %s", o.Key)
		pods = append(pods, pod)
	}
	return pods
}

// expectNowhere checks that no trace the build left outside its events
// holds any of values: its pods' specs (read with the admin's client), its
// audit trail in the blobstore, its plan in the API and in the database
// (which keeps the ((vars)) as written).
func expectNowhere(ctx context.Context, buildID int64, values []string, planVars []string) {
	GinkgoHelper()
	// The pods as declared, from the audit trail (a kept pod may be gone
	// already: gc frees kept pods for a step that finds no room), and those
	// still there.
	pods := auditPods(ctx, buildID)
	Expect(pods).NotTo(BeEmpty(), "build %d's audit trail has no pod to look at", buildID)
	live, err := s.env.Admin.CoreV1().Pods(s.ns.Name).List(ctx, metav1.ListOptions{
		LabelSelector: fmt.Sprintf("%s=%d", podspec.LabelBuild, buildID)})
	Expect(err).NotTo(HaveOccurred())
	for _, pod := range append(pods, live.Items...) {
		spec, err := json.Marshal(pod)
		Expect(err).NotTo(HaveOccurred())
		for _, v := range values {
			Expect(string(spec)).NotTo(ContainSubstring(v), "pod %s shows a credential", pod.Name)
		}
	}

	store := auditStore(ctx)
	prefix, err := testenv.AuditPrefix(ctx, store, buildID)
	Expect(err).NotTo(HaveOccurred())
	objs, err := store.List(ctx, prefix)
	Expect(err).NotTo(HaveOccurred())
	var names []string
	journals := 0
	for _, o := range objs {
		names = append(names, o.Key[strings.LastIndex(o.Key, "/")+1:])
		rc, _, err := store.Get(ctx, o.Key)
		Expect(err).NotTo(HaveOccurred())
		body, err := io.ReadAll(rc)
		rc.Close()
		Expect(err).NotTo(HaveOccurred())
		if strings.HasSuffix(o.Key, ".zst") {
			// The event journal is compressed: a value in it would not
			// show in its bytes.
			dec, err := zstd.NewReader(nil)
			Expect(err).NotTo(HaveOccurred())
			body, err = dec.DecodeAll(body, nil)
			dec.Close()
			Expect(err).NotTo(HaveOccurred(), "decompress %s", o.Key)
			journals++
			// Output is bytes, base64 in the journal: decode it.
			for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
				var ev eventspb.Event
				Expect(protojson.Unmarshal([]byte(line), &ev)).To(Succeed(), "journal line %q", line)
				body = append(body, ev.GetOutput().GetData()...)
			}
		}
		for _, v := range values {
			Expect(string(body)).NotTo(ContainSubstring(v), "audit object %s shows a credential", o.Key)
		}
	}
	Expect(journals).To(BeNumerically(">", 0), "the audit trail has no event journal to look at")
	audit := apiGet(ctx, fmt.Sprintf("/api/v1/builds/%d/audit", buildID))
	for _, v := range values {
		Expect(audit).NotTo(ContainSubstring(v), "the audit API shows a credential")
	}
	Expect(names).To(ContainElements(blobstore.PodObject, "action.json"), "the audit trail has no pod or action to look at")

	plan := apiGet(ctx, fmt.Sprintf("/api/v1/builds/%d/plan", buildID))
	for _, v := range values {
		Expect(plan).NotTo(ContainSubstring(v), "the build's plan shows a credential")
	}
	conn, err := pgx.Connect(ctx, s.dsn)
	Expect(err).NotTo(HaveOccurred())
	defer conn.Close(context.WithoutCancel(ctx))
	var stored, state string
	Expect(conn.QueryRow(ctx, "SELECT plan::text, coalesce(state::text, '') FROM builds WHERE id = $1", buildID).Scan(&stored, &state)).To(Succeed())
	for _, v := range values {
		Expect(stored).NotTo(ContainSubstring(v), "the stored plan holds a credential")
		Expect(state).NotTo(ContainSubstring(v), "the stored build state holds a credential")
	}
	for _, name := range planVars {
		Expect(stored).To(ContainSubstring("(("+name+"))"), "the stored plan lost its ((vars))")
	}
}

var _ = Describe("credentials from Kubernetes Secrets", func() {
	It("fills in ((var)) and ((var.field)) when the steps run, redacts them from the build log and keeps them out of pod specs and the audit trail", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("creds")
		login := varName("login")
		user, password, token := secretValue("user"), secretValue("pw"), secretValue("token")
		// A pipeline's own Secret is "<pipeline>.<var>"; a team-wide one is "<var>".
		createCredential(ctx, p+".token", map[string]string{"value": token})
		createCredential(ctx, login, map[string]string{"username": user, "password": password})
		setPipeline(ctx, f, p, `
resources:
- name: src
  type: mock
  check_every: never
  source:
    initial_version: v1
    create_files: {pw: ((`+login+`.password))}
    log: "fetching as ((`+login+`.username))"
jobs:
- name: show
  plan:
  - get: src
  - task: print
    params: {TOKEN: ((token)), USER: ((`+login+`.username)), PLAIN: not-secret}
    config:
`+busyboxTask("      ", `inputs: [{name: src}]
run: {path: sh, args: [-c, 'echo "token=$TOKEN user=$USER file=$(cat src/pw) plain=$PLAIN"; echo "token-sha256=$(printf %s "$TOKEN" | sha256sum)"']}`))
		succeed(ctx, f, "check-resource", "-r", p+"/src")
		res := succeed(ctx, f, "trigger-job", "-j", p+"/show", "-w")
		Expect(res.Stdout).To(ContainSubstring("token=((redacted)) user=((redacted)) file=((redacted)) plain=not-secret"))
		Expect(res.Stdout).To(ContainSubstring("fetching as ((redacted))"), "the get's log is not redacted")
		// The process got the real value, not the redaction.
		Expect(res.Stdout).To(ContainSubstring(fmt.Sprintf("token-sha256=%x", sha256.Sum256([]byte(token)))))
		watch := succeed(ctx, f, "watch", "-j", p+"/show")
		Expect(watch.Stdout).To(ContainSubstring("token=((redacted))"))
		secrets := []string{user, password, token}
		for _, v := range secrets {
			Expect(res.Output()).NotTo(ContainSubstring(v))
			Expect(watch.Output()).NotTo(ContainSubstring(v))
		}

		id := lastBuildID(ctx, f, p, "show")
		// The param reaches the process through the step's Secret.
		fromSecret := map[string]bool{}
		for _, pod := range auditPods(ctx, id) {
			for _, c := range pod.Spec.Containers {
				for _, e := range c.Env {
					if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
						fromSecret[e.Name] = true
					}
				}
			}
		}
		Expect(fromSecret).To(HaveKey("TOKEN"))
		Expect(fromSecret).To(HaveKey("USER"))
		Expect(fromSecret).NotTo(HaveKey("PLAIN"))
		expectNowhere(ctx, id, secrets, []string{"token", login + ".username"})
	})

	It("fails the step that uses an undefined var, naming it", func(ctx SpecContext) {
		f := newFly(ctx)
		p := pipelineName("undefined")
		missing, other := varName("missing"), varName("other")
		setPipeline(ctx, f, p, `
jobs:
- name: j
  plan:
  - task: uses-missing
    params: {A: ((`+missing+`)), B: "x-((`+other+`.field))"}
    config:
`+busyboxTask("      ", `run: {path: "true"}`))
		res := run(ctx, f, "trigger-job", "-j", p+"/j", "-w")
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		names := []string{missing, other + ".field"}
		if names[1] < names[0] {
			names[0], names[1] = names[1], names[0]
		}
		Expect(res.Output()).To(ContainSubstring("undefined vars: " + strings.Join(names, ", ")))
		Expect(res.Output()).To(ContainSubstring("errored"))
	})

	It("runs a task.file from a git repository fetched with credentials, with vars: and credentials in the file", func(ctx SpecContext) {
		git, err := gitserver.New(s.env.Cluster["PORTER_CLUSTER_NODE_IP"])
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(git.Close)
		gitUser, gitPassword := secretValue("git"), secretValue("gitpw")
		Expect(git.CreateRepo(ctx, "ci", "main")).To(Succeed())
		_, err = git.Commit(ctx, "ci", "main", map[string]string{"ci/task.yml": `
platform: linux
image_resource:
  type: registry-image
  source: {repository: busybox}
params:
  GREETING: ((greeting))
  TOKEN: ((token))
  EXTRA: from-the-file
run:
  path: sh
  args: [-c, 'echo "greeting=$GREETING token=$TOKEN extra=$EXTRA"']
`}, "the task")
		Expect(err).NotTo(HaveOccurred())
		git.RequireBasicAuth(gitUser, gitPassword)

		f := newFly(ctx)
		p := pipelineName("taskfile")
		gitCreds, token := varName("git"), secretValue("token")
		createCredential(ctx, gitCreds, map[string]string{"username": gitUser, "password": gitPassword})
		createCredential(ctx, p+".token", map[string]string{"value": token})
		setPipeline(ctx, f, p, `
resources:
- name: repo
  type: git
  check_every: never
  source: {uri: `+git.URL("ci")+`, branch: main, username: ((`+gitCreds+`.username)), password: ((`+gitCreds+`.password))}
jobs:
- name: from-file
  plan:
  - get: repo
  - task: t
    file: repo/ci/task.yml
    vars: {greeting: hello-from-vars}
    params: {EXTRA: from-the-step}
- name: missing-file
  plan:
  - get: repo
  - task: t
    file: repo/ci/nope.yml
`)
		succeed(ctx, f, "check-resource", "-r", p+"/repo")
		res := succeed(ctx, f, "trigger-job", "-j", p+"/from-file", "-w")
		Expect(res.Stdout).To(ContainSubstring("greeting=hello-from-vars token=((redacted)) extra=from-the-step"))
		Expect(res.Output()).NotTo(ContainSubstring(token))
		expectNowhere(ctx, lastBuildID(ctx, f, p, "from-file"), []string{token, gitPassword}, []string{gitCreds + ".password"})

		res = run(ctx, f, "trigger-job", "-j", p+"/missing-file", "-w")
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		Expect(res.Output()).To(ContainSubstring(`artifact "repo" has no file "ci/nope.yml"`))
	})

	It("fills in a fly execute task's ((var)) from the team's Secret", func(ctx SpecContext) {
		f := newFly(ctx)
		name, value := varName("exec"), secretValue("exec")
		createCredential(ctx, name, map[string]string{"value": value})
		path := filepath.Join(GinkgoT().TempDir(), "task.yml")
		Expect(os.WriteFile(path, []byte(busyboxTask("", `params: {TOKEN: ((`+name+`))}
run: {path: sh, args: [-c, 'echo "token=$TOKEN"']}`)), 0o644)).To(Succeed())
		res := succeed(ctx, f, "execute", "-c", path)
		Expect(res.Stdout).To(ContainSubstring("token=((redacted))"))
		Expect(res.Output()).NotTo(ContainSubstring(value))
		// fly left the unset ((var)) as written, so the server knows it is
		// a credential: it goes through the Secret and no audit object shows it.
		m := regexp.MustCompile(`executing build (\d+)`).FindStringSubmatch(res.Stdout)
		Expect(m).NotTo(BeNil(), res.String())
		id, err := strconv.ParseInt(m[1], 10, 64)
		Expect(err).NotTo(HaveOccurred())
		expectNowhere(ctx, id, []string{value}, []string{name})
	})

	It("says so when the ATC may not read a team's Secrets, rather than calling the var undefined", func(ctx SpecContext) {
		f := newFly(ctx)
		// No namespace, no grant: the ATC's get is forbidden.
		team := varName("nocreds")
		succeed(ctx, f, "set-team", "-n", team, "--local-user", adminUser, "--non-interactive")
		name := varName("token")
		path := filepath.Join(GinkgoT().TempDir(), "task.yml")
		Expect(os.WriteFile(path, []byte(busyboxTask("", `params: {TOKEN: ((`+name+`))}
run: {path: "true"}`)), 0o644)).To(Succeed())
		res := run(ctx, f, "execute", "--team", team, "-c", path)
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		ns := strings.TrimSuffix(s.credNS, "main") + team
		Expect(res.Output()).To(ContainSubstring("cannot read Secret " + name + " in namespace " + ns))
		Expect(res.Output()).To(ContainSubstring("forbidden"))
		Expect(res.Output()).NotTo(ContainSubstring("undefined vars"))
	})
})
