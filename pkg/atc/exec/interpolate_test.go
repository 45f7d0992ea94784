package exec

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/atc/exec/taskplan"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/creds"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/test/testenv"
)

func credSecret(ns, name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// credsExecutor is an executor of a job build of pipeline "pipe" in team
// main, whose credentials are the given Secrets and whose artifacts live in
// store.
func credsExecutor(t *testing.T, store blobstore.Store, objs ...runtime.Object) (*RunState, *fake.Clientset) {
	t.Helper()
	kube := fake.NewSimpleClientset(objs...)
	s := New(Config{}, Deps{Store: (*db.DB)(nil), Blobs: store, Runtime: fakeRuntime{worker: fakeWorker{name: "w", namespace: "steps"}},
		Log: slog.New(slog.DiscardHandler), Delegates: &reports{},
		Credentials: &creds.Kubernetes{Client: kube, NamespacePrefix: creds.DefaultNamespacePrefix}})
	b := &buildstate.Build{ID: 7, Name: "7", Team: "main", TeamID: 1, Pipeline: "pipe", Job: "j"}
	return newRunState(s, b), kube
}

const taskFile = `
platform: linux
image_resource:
  type: registry-image
  source: {repository: busybox, username: ((login.username)), password: ((login.password))}
  version: {digest: "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}
params:
  GREETING: ((greeting))
  FROM_FILE: "token is ((token))"
run:
  path: sh
  args: [-c, 'echo "((greeting))" ((token))']
`

func TestPrepareTaskFromFileWithVarsAndCredentials(t *testing.T) {
	store := testenv.MinIOStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "ci"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ci", "task.yml"), []byte(taskFile), 0o644); err != nil {
		t.Fatal(err)
	}
	art, err := blobstore.UploadDir(ctx, store, dir, blobstore.NewBlobKey("main", "test"), blobstore.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	x, _ := credsExecutor(t, store,
		credSecret("concourse-main", "pipe.token", map[string]string{"value": "t0ken-value"}),
		credSecret("concourse-main", "login", map[string]string{"username": "the-user", "password": "pa55word"}),
		credSecret("concourse-main", "step", map[string]string{"value": "step-secret"}),
	)
	x.setArtifact("repo", artifactRef(art))

	tp := &concourse.TaskPlan{Name: "t", ConfigPath: "repo/ci/task.yml",
		Vars: map[string]any{"greeting": "hello"}, Params: map[string]any{"STEP": "((step))", "PLAIN": "x"}}
	a, eventConfig, _, secretParams, err := x.resolvePreparedTask(ctx, &concourse.Plan{ID: "1", Task: tp})
	if err != nil {
		t.Fatal(err)
	}
	if tp.ConfigPath != "repo/ci/task.yml" || tp.Config != nil || tp.Params["STEP"] != "((step))" {
		t.Errorf("the plan was changed: %+v", tp)
	}
	if a.Params["GREETING"] != "hello" || a.Params["PLAIN"] != "x" {
		t.Errorf("plain params = %v", a.Params)
	}
	if !slices.Equal(a.SecretParams, []string{"FROM_FILE", "STEP"}) {
		t.Errorf("secret params = %v", a.SecretParams)
	}
	if secretParams["FROM_FILE"] != "token is t0ken-value" || secretParams["STEP"] != "step-secret" {
		t.Errorf("secret values = %v", secretParams)
	}
	body, _ := json.Marshal(a.Params)
	for _, v := range []string{"t0ken-value", "step-secret"} {
		if strings.Contains(string(body), v) {
			t.Errorf("the action's params show %q: %s", v, body)
		}
	}
	// The process gets the value; what the build shows and keeps does not.
	if !slices.Equal(a.Run.Args, []string{"-c", `echo "hello" t0ken-value`}) {
		t.Errorf("action args = %v", a.Run.Args)
	}
	if !slices.Equal(eventConfig.Run.Args, []string{"-c", `echo "hello" ((redacted))`}) || eventConfig.Platform != "linux" {
		t.Errorf("event config = %+v", eventConfig)
	}
	// Every key of a Secret with fields is redacted, not only the one used.
	got := x.d.Redactor().Redact("the-user:pa55word t0ken-value \"step-secret\"\n")
	if strings.Contains(got, "pa55word") || strings.Contains(got, "t0ken-value") || strings.Contains(got, "step-secret") ||
		!strings.Contains(got, `((redacted)):((redacted)) ((redacted)) "((redacted))"`) {
		t.Errorf("log event = %s", got)
	}
}

func artifactRef(a blobstore.Artifact) api.ArtifactRef {
	return api.ArtifactRef{Key: a.Key, Digest: a.Digest, Size: a.Size}
}

func TestPrepareTaskErrors(t *testing.T) {
	store := testenv.MinIOStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "other.yml"), []byte("x: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	art, err := blobstore.UploadDir(ctx, store, dir, blobstore.NewBlobKey("main", "test"), blobstore.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	x, kube := credsExecutor(t, store)
	x.setArtifact("repo", artifactRef(art))
	config := json.RawMessage(`{"platform":"linux","run":{"path":"((nope))","args":["((also-nope))"]}}`)
	for _, tc := range []struct {
		tp   concourse.TaskPlan
		want string
	}{
		{concourse.TaskPlan{Name: "t", ConfigPath: "repo/ci/task.yml"}, `task "t": file repo/ci/task.yml: artifact "repo" has no file "ci/task.yml"`},
		{concourse.TaskPlan{Name: "t", ConfigPath: "src/task.yml"}, `task "t": file src/task.yml: the build has no artifact "src"`},
		{concourse.TaskPlan{Name: "t", Config: config}, `undefined vars: also-nope, nope`},
		{concourse.TaskPlan{Name: "t", Config: json.RawMessage(`{"platform":"linux","run":{"path":"true"}}`),
			Params: map[string]any{"A": "((missing.field))"}}, `undefined vars: missing.field`},
		// One error lists the undefined vars of the config and the params.
		{concourse.TaskPlan{Name: "t", Config: config, Params: map[string]any{"A": "((in-params))"}}, `undefined vars: also-nope, in-params, nope`},
	} {
		_, err := x.prepareTask(ctx, &tc.tp)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.tp, err, tc.want)
		}
	}

	// An ATC that may not read the team's Secrets says so rather than
	// calling the var undefined.
	kube.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "nope", nil)
	})
	_, err = x.prepareTask(ctx, &concourse.TaskPlan{Name: "t", Config: json.RawMessage(`{"platform":"linux","run":{"path":"((nope))"}}`)})
	if err == nil || !strings.Contains(err.Error(), "cannot read Secret pipe.nope in namespace concourse-main") ||
		!strings.Contains(err.Error(), "forbidden") {
		t.Errorf("forbidden: got %v", err)
	}
}

func TestValidateTaskPlan(t *testing.T) {
	for _, tc := range []struct {
		tp   concourse.TaskPlan
		want string // "" for valid
	}{
		{concourse.TaskPlan{Name: "t", ConfigPath: "repo/ci/task.yml"}, ""},
		{concourse.TaskPlan{Name: "t", ConfigPath: "task.yml"}, `want <artifact>/<path`},
		{concourse.TaskPlan{Name: "t", ConfigPath: "repo/"}, `want <artifact>/<path`},
		// Checked once its vars are filled in.
		{concourse.TaskPlan{Name: "t", Config: json.RawMessage(`{"platform":"linux","run":{"path":"((p))"},"container_limits":{"memory":"((m))"}}`)}, ""},
		{concourse.TaskPlan{Name: "t", Config: json.RawMessage(`{"platform":"linux","run":{"path":"true"}}`), Params: map[string]any{"A": "((a))"}}, ""},
		{concourse.TaskPlan{Name: "t", Config: json.RawMessage(`{"platform":"linux"}`)}, "missing path to executable to run"},
	} {
		err := taskplan.Validate(&tc.tp)
		if tc.want == "" && err != nil {
			t.Errorf("%+v: %v", tc.tp, err)
		}
		if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: got %v, want %q", tc.tp, err, tc.want)
		}
	}
}
