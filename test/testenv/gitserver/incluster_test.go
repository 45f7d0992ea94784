package gitserver_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/porter-ci/porter/test/testenv"
	"github.com/porter-ci/porter/test/testenv/gitserver"
)

// The in-cluster server takes pushes from the host over smart HTTP, calls
// the repository's webhook from its post-receive hook, and serves clones.
func TestInCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg, err := testenv.AdminConfig(ctx, testenv.KubeconfigPath())
	if testenv.Unavailable(err) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := testenv.ClusterEnv()
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := testenv.CreateNamespace(ctx, kube, "porter-gitserver-")
	t.Cleanup(func() {
		if ns != "" {
			if err := kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}); err != nil {
				t.Error(err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}

	// The webhook's receiver, on the node's address as the ATC's would be.
	var calls atomic.Int32
	ln, err := net.Listen("tcp", net.JoinHostPort(cluster["PORTER_CLUSTER_NODE_IP"], "0"))
	if err != nil {
		t.Fatal(err)
	}
	hook := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Query().Get("webhook_token") == "tok" {
			calls.Add(1)
		}
		w.WriteHeader(http.StatusCreated)
	})}
	go hook.Serve(ln)
	t.Cleanup(func() { hook.Close() })

	srv, err := gitserver.StartInCluster(ctx, kube, ns)
	t.Cleanup(func() {
		if err := srv.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.CreateRepo(ctx, "app", "main", "http://"+ln.Addr().String()+"/check/webhook?webhook_token=tok"); err != nil {
		t.Fatal(err)
	}
	if err := srv.CreateRepo(ctx, "app", "main"); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("creating a repository twice: err = %v", err)
	}
	w, err := srv.Work(ctx, t.TempDir(), "app", "main")
	if err != nil {
		t.Fatal(err)
	}
	for i, content := range []string{"one", "two"} {
		sha, err := w.Commit(ctx, map[string]string{"README": content}, content)
		if err != nil {
			t.Fatal(err)
		}
		said, err := w.Push(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(said, "webhook answered 201 Created") {
			t.Errorf("push %d: the remote said %q, want the hook's call", i+1, said)
		}
		if got := calls.Load(); got != int32(i+1) {
			t.Fatalf("after push %d the webhook was called %d times", i+1, got)
		}
		// The pod's branch is at the commit.
		out, err := exec.CommandContext(ctx, "git", "ls-remote", srv.URL("app"), "refs/heads/main").CombinedOutput()
		if err != nil {
			t.Fatalf("git ls-remote: %v: %s", err, out)
		}
		if got := strings.Fields(string(out)); len(got) == 0 || got[0] != sha {
			t.Fatalf("after push %d the server's main is %q, want %s", i+1, out, sha)
		}
	}
}
