package testenv

// The shared harness of the suites that run the real `atc-porter-runtime
// serve` (test/runtime, test/fly) and of the suites that drive it with
// Concourse's real `fly`. It has no Ginkgo in it: every function returns an
// error, and every cleanup is a function the suite hands to DeferCleanup.
//
// A suite sets up once:
//
//	env, err := testenv.NewATCEnv(ctx, dir)  // cluster, PostgreSQL, the binary built into dir
//	if testenv.Unavailable(err) { Skip or, when CI is set, Fail }
//	ns, deleteNS, err := env.NewWorkerNamespace(ctx, "porter-e2e-")  // + deploy/atc's RBAC
//	dsn, dropDB, err := env.NewDatabase(ctx)                         // a fresh database
//	srv, err := env.NewATC(testenv.ATCConfig{Worker: ns, Database: dsn,
//	        LocalUsers: []string{"admin:secret"}, MainTeamUsers: []string{"admin"}})
//	err = srv.Start(ctx)   // waits for /healthz; DeferCleanup(srv.Stop)
//
// and then, per spec:
//
//	srv.URL()                   // http://127.0.0.1:port
//	srv.Kill(); srv.Start(ctx)  // a crash (SIGKILL) and a restart on the same ports, state dir and log
//	srv.Stop(); srv.Config.KeepAlive = time.Minute; srv.Start(ctx)  // restart with other flags
//	srv.Log()                   // everything the server logged (all its runs)
//	token, err := srv.Login(ctx, "admin", "secret")  // a bearer token, as fly's login gets it
//	srv.Launch(); code, err := srv.Wait(ctx)  // for a server that must fail to start
//
// Porting from test/runtime's old atcServer: url() is URL(), start() is
// Start(ctx), stopWith(SIGKILL) is Kill(), stopWith(SIGTERM) and stop() are
// Stop(), the keepAlive and podRetention fields are Config.KeepAlive and
// Config.PodRetention (set them while the server is stopped).
//
// fly, Concourse's own client, is found by FindFly and run by Fly: each Fly
// has its own HOME (so its own ~/.flyrc) and target name:
//
//	bin, err := testenv.FindFly()  // $FLY, <repo>/../shared/tools/fly, or fly on PATH; ErrNoFly if none
//	fly := testenv.NewFly(bin, t.TempDir(), "porter")
//	res, err := fly.Login(ctx, srv.URL(), "admin", "secret")
//	res, err = fly.Run(ctx, "execute", "-c", "task.yml")  // res.Stdout, res.Stderr, res.ExitCode
//	p, err := fly.Start(testenv.FlyCmd{Args: []string{"execute", "-c", "task.yml"}})
//	p.Interrupt(); res, err = p.Wait(ctx)                  // Ctrl-C
//	cmd := fly.Command(ctx, testenv.FlyCmd{...})            // an *exec.Cmd to run under a pty

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ErrNoFly says no fly binary was found; suites skip on it (or fail under CI).
var ErrNoFly = errors.New("no fly binary")

// Unavailable reports whether err only says that a part the suite needs (the
// cluster, PostgreSQL, fly) is not there: suites skip then, unless CI is set.
func Unavailable(err error) bool {
	return errors.Is(err, ErrNoCluster) || errors.Is(err, ErrNoPostgres) || errors.Is(err, ErrNoFly)
}

// ATCEnv is what every server of a suite shares: the local cluster (admin
// access and cluster-up's settings), the PostgreSQL server and the
// atc-porter-runtime binary built once.
type ATCEnv struct {
	Admin       kubernetes.Interface
	AdminConfig *rest.Config
	Cluster     map[string]string // ClusterEnv(): node IP, MinIO endpoints and credentials
	Bin         string            // the built atc-porter-runtime
	Dir         string            // the suite's directory: the binary, kubeconfigs, each server's state and log

	postgresAdminDSN string
}

// NewATCEnv checks that the cluster and PostgreSQL are there, then builds
// atc-porter-runtime (CGO_ENABLED=0) into dir, which the caller removes.
// Errors that mean "not there" satisfy Unavailable.
func NewATCEnv(ctx context.Context, dir string) (*ATCEnv, error) {
	cfg, err := AdminConfig(ctx, KubeconfigPath())
	if err != nil {
		return nil, err
	}
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("admin client: %w", err)
	}
	cluster, err := ClusterEnv()
	if err != nil {
		return nil, err
	}
	pgAdmin, err := PostgresAdminDSN()
	if err != nil {
		return nil, err
	}
	bin, err := BuildATC(ctx, dir)
	if err != nil {
		return nil, err
	}
	return &ATCEnv{Admin: admin, AdminConfig: cfg, Cluster: cluster, Bin: bin, Dir: dir, postgresAdminDSN: pgAdmin}, nil
}

// BuildATC builds cmd/atc-porter-runtime into dir and returns its path.
func BuildATC(ctx context.Context, dir string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "atc-porter-runtime")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/atc-porter-runtime")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build atc-porter-runtime: %w\n%s", err, out)
	}
	return bin, nil
}

// NewDatabase creates a fresh database on the shared PostgreSQL server and
// returns its DSN and the function that drops it.
func (e *ATCEnv) NewDatabase(ctx context.Context) (dsn string, drop func(context.Context) error, err error) {
	return NewPostgresDatabase(ctx, e.postgresAdminDSN)
}

// WorkerNamespace is where a server's step pods run, and the server's
// Kubernetes identity there.
type WorkerNamespace struct {
	Name       string // the namespace
	Kubeconfig string // acts as deploy/atc's service account in it, and nothing more
}

// NewWorkerNamespace creates a namespace named prefix plus a random suffix,
// applies deploy/atc/rbac.yaml in it and writes a kubeconfig that acts as
// that service account, so a server run with it proves the Role is enough.
// remove deletes the namespace (and every pod in it).
func (e *ATCEnv) NewWorkerNamespace(ctx context.Context, prefix string) (ns WorkerNamespace, remove func(context.Context) error, err error) {
	name, err := CreateNamespace(ctx, e.Admin, prefix)
	remove = func(ctx context.Context) error {
		if name == "" {
			return nil
		}
		if err := e.Admin.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("delete namespace %s: %w", name, err)
		}
		return nil
	}
	if err != nil {
		return WorkerNamespace{}, remove, err
	}
	if err := e.applyRBAC(ctx, name); err != nil {
		return WorkerNamespace{}, remove, err
	}
	sa, err := ServiceAccountKubeconfig(ctx, e.AdminConfig, name, "atc-porter-runtime")
	if err != nil {
		return WorkerNamespace{}, remove, err
	}
	path := filepath.Join(e.Dir, name+".kubeconfig")
	if err := writeKubeconfig(sa, name, path); err != nil {
		return WorkerNamespace{}, remove, err
	}
	return WorkerNamespace{Name: name, Kubeconfig: path}, remove, nil
}

func (e *ATCEnv) applyRBAC(ctx context.Context, ns string) error {
	return ApplyATCRBAC(ctx, e.Admin, ns)
}

// ApplyATCRBAC creates deploy/atc's ServiceAccount, Role and RoleBinding in
// ns, as `kubectl apply -k` would with the namespace set to ns.
func ApplyATCRBAC(ctx context.Context, kube kubernetes.Interface, ns string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	objs, err := DecodeManifests(filepath.Join(root, "deploy", "atc", "rbac.yaml"))
	if err != nil {
		return err
	}
	for _, obj := range objs {
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			o.Namespace = ns
			_, err = kube.CoreV1().ServiceAccounts(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			o.Namespace = ns
			_, err = kube.RbacV1().Roles(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			o.Namespace = ns
			for i := range o.Subjects {
				if o.Subjects[i].Kind == rbacv1.ServiceAccountKind {
					o.Subjects[i].Namespace = ns
				}
			}
			_, err = kube.RbacV1().RoleBindings(ns).Create(ctx, o, metav1.CreateOptions{})
		default:
			return fmt.Errorf("unexpected %T in deploy/atc/rbac.yaml", obj)
		}
		if err != nil {
			return fmt.Errorf("apply deploy/atc/rbac.yaml in %s: %w", ns, err)
		}
	}
	return nil
}

// ApplyTeamNamespacesRBAC gives deploy/atc's service account of ns the
// rights of deploy/atc/team-namespaces.yaml: its ClusterRoles (created
// once, shared by every test) and a ClusterRoleBinding of its own, which
// remove deletes.
func ApplyTeamNamespacesRBAC(ctx context.Context, kube kubernetes.Interface, ns string) (remove func(context.Context) error, err error) {
	return applyClusterRBAC(ctx, kube, ns, "team-namespaces.yaml")
}

// ApplyNodeReaderRBAC gives deploy/atc's service account of ns the rights
// of deploy/atc/node-reader.yaml (reading nodes), as
// ApplyTeamNamespacesRBAC does.
func ApplyNodeReaderRBAC(ctx context.Context, kube kubernetes.Interface, ns string) (remove func(context.Context) error, err error) {
	return applyClusterRBAC(ctx, kube, ns, "node-reader.yaml")
}

// applyClusterRBAC applies deploy/atc/file's ClusterRoles (shared) and
// ClusterRoleBindings (one per ns, which remove deletes).
func applyClusterRBAC(ctx context.Context, kube kubernetes.Interface, ns, file string) (remove func(context.Context) error, err error) {
	remove = func(context.Context) error { return nil }
	root, err := RepoRoot()
	if err != nil {
		return remove, err
	}
	objs, err := DecodeManifests(filepath.Join(root, "deploy", "atc", file))
	if err != nil {
		return remove, err
	}
	for _, obj := range objs {
		switch o := obj.(type) {
		case *rbacv1.ClusterRole:
			_, err = kube.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				var have *rbacv1.ClusterRole
				if have, err = kube.RbacV1().ClusterRoles().Get(ctx, o.Name, metav1.GetOptions{}); err == nil {
					have.Rules = o.Rules
					_, err = kube.RbacV1().ClusterRoles().Update(ctx, have, metav1.UpdateOptions{})
				}
			}
		case *rbacv1.ClusterRoleBinding:
			o.Name += "-" + ns
			for i := range o.Subjects {
				o.Subjects[i].Namespace = ns
			}
			_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
			name := o.Name
			remove = func(ctx context.Context) error {
				if err := kube.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					return fmt.Errorf("delete ClusterRoleBinding %s: %w", name, err)
				}
				return nil
			}
		default:
			return remove, fmt.Errorf("unexpected %T in deploy/atc/%s", obj, file)
		}
		if err != nil {
			return remove, fmt.Errorf("apply deploy/atc/%s for %s: %w", file, ns, err)
		}
	}
	return remove, nil
}

func writeKubeconfig(cfg *rest.Config, ns, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["atc"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["atc"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "atc", Namespace: ns}
	kc.CurrentContext = "atc"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// ATCConfig is how a server is run. Worker and Database are required.
type ATCConfig struct {
	Worker        WorkerNamespace // --kubeconfig and --namespace
	WorkerName    string          // --worker (default "e2e")
	Database      string          // --postgres-dsn
	Bucket        string          // PORTER_BLOBSTORE_BUCKET (default: a fresh name per ATC; share it between servers of one database)
	LocalUsers    []string        // --add-local-user NAME:PASSWORD
	MainTeamUsers []string        // --main-team-local-user NAME (admins)
	Tags          []string        // --tag
	KeepAlive     time.Duration   // --keep-alive (default 0)
	PodRetention  time.Duration   // --pod-retention and --gc-one-off-grace-period (default 10m)
	TokenTTL      time.Duration   // --token-ttl (default: the server's)
	ServerID      string          // --server-id (default: the server's)
	// BaseResourceTypes are --base-resource-type NAME=IMAGE flags. nil
	// means LocalBaseResourceTypes; an empty list passes none (the server's
	// porter.local images).
	BaseResourceTypes []string
	// BaseResourceTypeDefaults go to --base-resource-type-defaults (a file
	// in the server's directory). nil means LocalBaseResourceTypeDefaults;
	// an empty map passes no defaults.
	BaseResourceTypeDefaults map[string]map[string]any
	// CredentialNamespacePrefix is --kubernetes-credential-namespace-prefix
	// (default: the server's, "concourse-"); see NewCredentialNamespace.
	CredentialNamespacePrefix string
	// Privileged makes the first worker allow privileged steps
	// (`privileged: allow`); label its namespace with SetPodSecurity
	// "privileged" too.
	Privileged bool
	// TeamNamespaces are the first worker's team_namespaces (team:
	// namespace); the server creates them, with the rights of
	// ApplyTeamNamespacesRBAC.
	TeamNamespaces map[string]string
	// MoreWorkers are workers beside the first (Worker, WorkerName, Tags):
	// with any (or Privileged), the server gets them all in a
	// --workers-config file.
	MoreWorkers []Worker
	Args        []string // more flags, last
	Env         []string // more environment, last
}

// usesWorkersFile: the server's workers need more than --worker and --tag.
func (c ATCConfig) usesWorkersFile() bool {
	return len(c.MoreWorkers) > 0 || c.Privileged || len(c.TeamNamespaces) > 0
}

// Worker is one more worker of a server: a worker namespace (with its own
// kubeconfig), its name, tags and team.
type Worker struct {
	Name      string
	Namespace WorkerNamespace
	Tags      []string
	Team      string
	// Kubeconfig overrides Namespace.Kubeconfig (e.g. one through a proxy).
	Kubeconfig string
	// TagPlacement is the worker's tag_placement (tag: node_selector,
	// tolerations), as the workers file has it.
	TagPlacement map[string]any
	// Privileged is `privileged: allow`.
	Privileged bool
	// TeamNamespaces are its team_namespaces.
	TeamNamespaces map[string]string
}

// workersFile writes the --workers-config file of the server's workers.
func (a *ATC) workersFile(first string) (string, error) {
	c := a.Config
	ws := append([]Worker{{Name: first, Namespace: c.Worker, Tags: c.Tags, Privileged: c.Privileged, TeamNamespaces: c.TeamNamespaces}}, c.MoreWorkers...)
	var b strings.Builder
	b.WriteString("workers:\n")
	for _, w := range ws {
		kc := w.Kubeconfig
		if kc == "" {
			kc = w.Namespace.Kubeconfig
		}
		tags, _ := json.Marshal(w.Tags)
		placement, err := json.Marshal(w.TagPlacement)
		if err != nil {
			return "", fmt.Errorf("workers file: tag placement of %s: %w", w.Name, err)
		}
		privileged := "deny"
		if w.Privileged {
			privileged = "allow"
		}
		teamNamespaces, _ := json.Marshal(w.TeamNamespaces)
		fmt.Fprintf(&b, "- {name: %q, kubeconfig: %q, namespace: %q, team: %q, tags: %s, tag_placement: %s, privileged: %s, team_namespaces: %s}\n",
			w.Name, kc, w.Namespace.Name, w.Team, tags, placement, privileged, teamNamespaces)
	}
	path := filepath.Join(a.dir, "workers.yaml")
	if !c.usesWorkersFile() {
		return path, os.Remove(path)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return "", fmt.Errorf("write workers file: %w", err)
	}
	return path, nil
}

// ATC is one `atc-porter-runtime serve` process, which can be stopped,
// crashed and started again on the same ports, state directory and log.
type ATC struct {
	// Config is read at every Launch: change it while the server is stopped
	// to restart it with other flags.
	Config ATCConfig

	env                *ATCEnv
	dir                string
	grpcAddr, httpAddr string
	opsAddr            string

	// baseTypes are the --base-resource-type flags of the current run.
	baseTypes []string

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	exitCode int
	log      *os.File
}

// NewATC prepares a server (ports, state directory); Start runs it.
func (e *ATCEnv) NewATC(cfg ATCConfig) (*ATC, error) {
	if cfg.Worker.Name == "" || cfg.Worker.Kubeconfig == "" {
		return nil, errors.New("ATCConfig.Worker is required (NewWorkerNamespace)")
	}
	if cfg.Database == "" {
		return nil, errors.New("ATCConfig.Database is required (NewDatabase)")
	}
	if cfg.Bucket == "" {
		cfg.Bucket = "porter-e2e-" + randomHex(8)
	}
	dir, err := os.MkdirTemp(e.Dir, "atc-")
	if err != nil {
		return nil, fmt.Errorf("server directory: %w", err)
	}
	// Sidecars in pods dial the gRPC port on the node's address; people and
	// fly use loopback.
	grpcAddr, err := FreeAddr(e.Cluster["PORTER_CLUSTER_NODE_IP"])
	if err != nil {
		return nil, err
	}
	httpAddr, err := FreeAddr("127.0.0.1")
	if err != nil {
		return nil, err
	}
	// The ops endpoints get a port of their own: several servers run at once.
	opsAddr, err := FreeAddr("127.0.0.1")
	if err != nil {
		return nil, err
	}
	return &ATC{Config: cfg, env: e, dir: dir, grpcAddr: grpcAddr, httpAddr: httpAddr, opsAddr: opsAddr}, nil
}

// URL is the HTTP API's base URL.
func (a *ATC) URL() string { return "http://" + a.httpAddr }

// OpsURL is the base URL of /metrics, /livez and /readyz.
func (a *ATC) OpsURL() string { return "http://" + a.opsAddr }

// GRPCAddr is where sidecars connect.
func (a *ATC) GRPCAddr() string { return a.grpcAddr }

// Pid is the running server's process id (0: not running).
func (a *ATC) Pid() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd == nil || a.cmd.Process == nil {
		return 0
	}
	return a.cmd.Process.Pid
}

// LogPath is the file every run of the server appends its output to.
func (a *ATC) LogPath() string { return filepath.Join(a.dir, "atc.log") }

// Log returns everything the server has written so far.
func (a *ATC) Log() string {
	b, _ := os.ReadFile(a.LogPath())
	return string(b)
}

// LocalBaseResourceTypeDefaults are the base resource type defaults for the
// local cluster: registry-image talks plain HTTP and finds Docker Hub's
// repositories ("busybox") in the cluster's registry, from which
// containerd pulls them as its docker.io mirror. Without a registry in
// cluster.env there are none.
func (e *ATCEnv) LocalBaseResourceTypeDefaults() map[string]map[string]any {
	addr := e.Cluster["PORTER_CLUSTER_REGISTRY"]
	if addr == "" {
		return map[string]map[string]any{}
	}
	return map[string]map[string]any{
		"registry-image": {"registry_mirror": map[string]any{"host": addr}, "insecure": true},
	}
}

// localResourceTypes are the base resource types hack/images.sh builds and
// pushes to the cluster's registry as resource-NAME:dev.
var localResourceTypes = []string{"registry-image", "git", "time", "mock"}

// LocalBaseResourceTypes are --base-resource-type flags naming the base
// resource types' images in the cluster's registry by digest: the kubelet
// pulls them from there when they are not on the node under that name, so
// steps do not depend on the node's imported porter.local copies (which the
// kubelet refuses to use without a pull once it has pulled the same image
// under another name). Types missing from the registry are left out (the
// server's default image), and without a registry there are none.
func (e *ATCEnv) LocalBaseResourceTypes(ctx context.Context) []string {
	addr := e.Cluster["PORTER_CLUSTER_REGISTRY"]
	if addr == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	var flags []string
	for _, name := range localResourceTypes {
		repo := addr + "/resource-" + name
		req, err := http.NewRequestWithContext(ctx, http.MethodHead, "http://"+addr+"/v2/resource-"+name+"/manifests/dev", nil)
		if err != nil {
			continue
		}
		req.Header.Set("Accept", strings.Join([]string{
			"application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json",
			"application/vnd.docker.distribution.manifest.list.v2+json", "application/vnd.docker.distribution.manifest.v2+json",
		}, ", "))
		resp, err := client.Do(req)
		if err != nil {
			return flags
		}
		resp.Body.Close()
		if digest := resp.Header.Get("Docker-Content-Digest"); resp.StatusCode == http.StatusOK && strings.HasPrefix(digest, "sha256:") {
			flags = append(flags, name+"="+repo+"@"+digest)
		}
	}
	return flags
}

// baseTypeDefaults are the defaults the server gets and the file that
// holds them ("" for none).
func (a *ATC) baseTypeDefaults() (map[string]map[string]any, string) {
	defaults := a.Config.BaseResourceTypeDefaults
	if defaults == nil {
		defaults = a.env.LocalBaseResourceTypeDefaults()
	}
	if len(defaults) == 0 {
		return nil, ""
	}
	return defaults, filepath.Join(a.dir, "base-resource-type-defaults.yml")
}

// Args are the flags of serve with the current Config.
func (a *ATC) Args() []string {
	c := a.Config
	worker := c.WorkerName
	if worker == "" {
		worker = "e2e"
	}
	retention := c.PodRetention
	if retention == 0 {
		retention = 10 * time.Minute
	}
	args := []string{"serve",
		"--kubeconfig", c.Worker.Kubeconfig, "--namespace", c.Worker.Name, "--worker", worker,
		"--grpc-listen", a.grpcAddr, "--http-listen", a.httpAddr, "--ops-listen", a.opsAddr,
		"--state-dir", filepath.Join(a.dir, "state"),
		"--porter-image", "porter.local/porter:dev",
		// The local cluster has no cluster DNS; nothing here resolves names.
		"--dns-policy", "Default",
		"--pod-retention", retention.String(),
		// One-off builds' pods go with the retention, as they did before
		// Concourse's one-off grace period (Args may set it).
		"--gc-one-off-grace-period", retention.String(),
		"--keep-alive", c.KeepAlive.String(),
		"--pod-blobstore-endpoint", a.env.Cluster["PORTER_CLUSTER_MINIO_POD_ENDPOINT"],
		"--postgres-dsn", c.Database,
	}
	for _, u := range c.LocalUsers {
		args = append(args, "--add-local-user", u)
	}
	for _, u := range c.MainTeamUsers {
		args = append(args, "--main-team-local-user", u)
	}
	if c.usesWorkersFile() {
		// Launch writes it.
		args = append(args, "--workers-config", filepath.Join(a.dir, "workers.yaml"))
	} else {
		for _, t := range c.Tags {
			args = append(args, "--tag", t)
		}
	}
	if c.TokenTTL != 0 {
		args = append(args, "--token-ttl", c.TokenTTL.String())
	}
	if c.ServerID != "" {
		args = append(args, "--server-id", c.ServerID)
	}
	for _, t := range a.baseTypes {
		args = append(args, "--base-resource-type", t)
	}
	if _, file := a.baseTypeDefaults(); file != "" {
		args = append(args, "--base-resource-type-defaults", file)
	}
	if c.CredentialNamespacePrefix != "" {
		args = append(args, "--kubernetes-credential-namespace-prefix", c.CredentialNamespacePrefix)
	}
	return append(args, c.Args...)
}

func (a *ATC) environ() []string {
	cl := a.env.Cluster
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		// Only the flags choose the database.
		return strings.HasPrefix(kv, "PORTER_POSTGRES_DSN=")
	})
	env = append(env,
		"PORTER_BLOBSTORE_ENDPOINT="+cl["PORTER_CLUSTER_MINIO_ENDPOINT"],
		"PORTER_BLOBSTORE_ACCESS_KEY="+cl["PORTER_CLUSTER_MINIO_ACCESS_KEY"],
		"PORTER_BLOBSTORE_SECRET_KEY="+cl["PORTER_CLUSTER_MINIO_SECRET_KEY"],
		"PORTER_BLOBSTORE_REGION="+cl["PORTER_CLUSTER_MINIO_REGION"],
		"PORTER_BLOBSTORE_BUCKET="+a.Config.Bucket,
	)
	return append(env, a.Config.Env...)
}

// redact hides the passwords in serve's flags, for the log.
func redact(args []string) []string {
	out := slices.Clone(args)
	for i := 1; i < len(out); i++ {
		switch out[i-1] {
		case "--postgres-dsn":
			if u, err := url.Parse(out[i]); err == nil {
				out[i] = u.Redacted()
			} else {
				out[i] = "REDACTED"
			}
		case "--add-local-user":
			name, _, _ := strings.Cut(out[i], ":")
			out[i] = name + ":REDACTED"
		}
	}
	return out
}

// Launch starts the process without waiting for it to be ready.
func (a *ATC) Launch() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd != nil {
		return errors.New("the server is already running")
	}
	a.baseTypes = a.Config.BaseResourceTypes
	if a.baseTypes == nil {
		a.baseTypes = a.env.LocalBaseResourceTypes(context.Background())
	}
	if defaults, file := a.baseTypeDefaults(); file != "" {
		body, err := json.Marshal(defaults) // YAML's subset
		if err == nil {
			err = os.WriteFile(file, body, 0o644)
		}
		if err != nil {
			return fmt.Errorf("base resource type defaults: %w", err)
		}
	}
	first := a.Config.WorkerName
	if first == "" {
		first = "e2e"
	}
	if _, err := a.workersFile(first); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(a.LogPath(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("server log: %w", err)
	}
	fmt.Fprintf(f, "=== %s %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(redact(a.Args()), " "))
	cmd := exec.Command(a.env.Bin, a.Args()...)
	cmd.Env = a.environ()
	cmd.Stdout, cmd.Stderr = f, f
	// Killed with the test process too, when a panic skips the cleanups:
	// a server left running holds its ports and keeps making pods.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start serve: %w", err)
	}
	a.cmd, a.log, a.done = cmd, f, make(chan struct{})
	go func(done chan struct{}) {
		_ = cmd.Wait()
		a.mu.Lock()
		a.exitCode = cmd.ProcessState.ExitCode()
		a.mu.Unlock()
		close(done)
	}(a.done)
	return nil
}

// WaitHealthy waits (up to a minute) until /healthz answers, or fails at
// once with the server's log if the process exits.
func (a *ATC) WaitHealthy(ctx context.Context) error {
	a.mu.Lock()
	done := a.done
	a.mu.Unlock()
	if done == nil {
		return errors.New("the server was not launched")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.URL()+"/healthz", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("the server exited before it was ready:\n%s", a.Log())
		case <-ctx.Done():
			return fmt.Errorf("the server was not ready within a minute:\n%s", a.Log())
		case <-tick.C:
		}
	}
}

// Start launches the server and waits until it is ready; a server that
// does not get ready is killed.
func (a *ATC) Start(ctx context.Context) error {
	if err := a.Launch(); err != nil {
		return err
	}
	if err := a.WaitHealthy(ctx); err != nil {
		_ = a.Kill()
		return err
	}
	return nil
}

// Wait waits for the process to exit by itself and returns its exit code.
func (a *ATC) Wait(ctx context.Context) (int, error) {
	a.mu.Lock()
	done := a.done
	a.mu.Unlock()
	if done == nil {
		return 0, errors.New("the server was not launched")
	}
	select {
	case <-done:
	case <-ctx.Done():
		return 0, fmt.Errorf("the server is still running: %w", ctx.Err())
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.release()
	return a.exitCode, nil
}

// Stop ends the server gracefully (TERM; KILL after 20 seconds). Stopping
// a stopped server does nothing.
func (a *ATC) Stop() error { return a.stop(syscall.SIGTERM) }

// Kill crashes the server (SIGKILL): nothing of it gets to clean up.
func (a *ATC) Kill() error { return a.stop(syscall.SIGKILL) }

// Restart stops the server gracefully and starts it again.
func (a *ATC) Restart(ctx context.Context) error {
	if err := a.Stop(); err != nil {
		return err
	}
	return a.Start(ctx)
}

func (a *ATC) stop(sig syscall.Signal) error {
	a.mu.Lock()
	cmd, done := a.cmd, a.done
	a.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.release()
	return nil
}

// release forgets an exited process; a.mu is held.
func (a *ATC) release() {
	if a.log != nil {
		a.log.Close()
	}
	a.cmd, a.log = nil, nil
}

// Login gets a bearer token with the password grant, as `fly login -u -p`
// does, for specs that call the API directly.
func (a *ATC) Login(ctx context.Context, user, password string) (string, error) {
	form := url.Values{
		"grant_type": {"password"}, "username": {user}, "password": {password},
		"scope": {"openid profile email federated:id groups"},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.URL()+"/sky/issuer/token", strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth("fly", "Zmx5") // fly's client id and secret
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("log in as %s: %w", user, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("log in as %s: %s: %s", user, resp.Status, body)
	}
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.Unmarshal(body, &tok); err != nil || tok.AccessToken == "" {
		return "", fmt.Errorf("log in as %s: no access_token in %s", user, body)
	}
	return tok.AccessToken, nil
}

// FindFly finds Concourse's fly: $FLY, else ../shared/tools/fly next to the
// repository, else fly on PATH. ErrNoFly when there is none.
func FindFly() (string, error) {
	if p := os.Getenv("FLY"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%w: FLY=%s: %w", ErrNoFly, p, err)
		}
		return p, nil
	}
	if root, err := RepoRoot(); err == nil {
		p := filepath.Join(filepath.Dir(root), "shared", "tools", "fly")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("fly"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w: set FLY, or put fly at ../shared/tools/fly or on PATH", ErrNoFly)
}

// Fly runs fly as one person on one machine: its own HOME (so its own
// ~/.flyrc) and a target name.
type Fly struct {
	Bin     string
	Home    string
	Target  string
	Timeout time.Duration // per command (default 2 minutes)
	Log     io.Writer     // when set, gets every command line and its output (e.g. GinkgoWriter)
}

// NewFly returns a Fly of bin with home as HOME and target as -t.
func NewFly(bin, home, target string) *Fly {
	return &Fly{Bin: bin, Home: home, Target: target, Timeout: 2 * time.Minute}
}

// FlyCmd is one fly command line and how to run it.
type FlyCmd struct {
	Args  []string  // after -t TARGET
	Dir   string    // working directory (default: the test's)
	Env   []string  // added to the environment (task params come from it)
	Stdin io.Reader // default: none
}

// FlyResult is what a finished fly printed, and its exit code.
type FlyResult struct {
	Args     []string
	Stdout   string
	Stderr   string
	ExitCode int
}

// String shows a result in a failure message.
func (r FlyResult) String() string {
	return fmt.Sprintf("fly %s\nexit code: %d\n--- stdout\n%s--- stderr\n%s", strings.Join(r.Args, " "), r.ExitCode, r.Stdout, r.Stderr)
}

// Output is stdout and stderr together.
func (r FlyResult) Output() string { return r.Stdout + r.Stderr }

// Command returns fly with the target, HOME and environment set and no
// standard streams, for callers that attach their own (e.g. a pty).
func (f *Fly) Command(ctx context.Context, c FlyCmd) *exec.Cmd {
	cmd := exec.CommandContext(ctx, f.Bin, append([]string{"-t", f.Target}, c.Args...)...)
	cmd.Dir = c.Dir
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "HOME=") || strings.HasPrefix(kv, "FLY_HOME=")
	})
	cmd.Env = append(append(env, "HOME="+f.Home, "FLY_HOME="+f.Home), c.Env...)
	cmd.Stdin = c.Stdin
	return cmd
}

// Login runs `fly -t TARGET login -c url -u user -p password [extra...]`.
func (f *Fly) Login(ctx context.Context, url, user, password string, extra ...string) (FlyResult, error) {
	return f.Run(ctx, append([]string{"login", "-c", url, "-u", user, "-p", password}, extra...)...)
}

// Run runs `fly -t TARGET args...` to the end (or the timeout). A non-zero
// exit code is a result, not an error.
func (f *Fly) Run(ctx context.Context, args ...string) (FlyResult, error) {
	return f.Exec(ctx, FlyCmd{Args: args})
}

// Exec runs c to the end (or the timeout).
func (f *Fly) Exec(ctx context.Context, c FlyCmd) (FlyResult, error) {
	p, err := f.start(ctx, c)
	if err != nil {
		return FlyResult{}, err
	}
	return p.Wait(ctx)
}

// Start runs c in the background (e.g. for Ctrl-C); Wait collects it. The
// caller must Wait or Kill.
func (f *Fly) Start(c FlyCmd) (*FlyProcess, error) {
	return f.start(context.Background(), c)
}

func (f *Fly) start(ctx context.Context, c FlyCmd) (*FlyProcess, error) {
	timeout := f.Timeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	cmd := f.Command(ctx, c)
	p := &FlyProcess{args: cmd.Args[1:], cancel: cancel, done: make(chan struct{})}
	p.Stdout.Tee, p.Stderr.Tee = f.Log, f.Log
	cmd.Stdout, cmd.Stderr = &p.Stdout, &p.Stderr
	// Its own process group, so a timeout also ends what fly started (fly
	// curl runs curl).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	if f.Log != nil {
		fmt.Fprintf(f.Log, "$ HOME=%s fly %s\n", f.Home, strings.Join(redactFly(p.args), " "))
	}
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("start fly: %w", err)
	}
	p.cmd = cmd
	go func() {
		p.err = cmd.Wait()
		if ctx.Err() != nil {
			p.err = fmt.Errorf("fly %s: no exit within %s: %w", strings.Join(p.args, " "), timeout, ctx.Err())
		}
		cancel()
		close(p.done)
	}()
	return p, nil
}

// redactFly hides the password of a fly login command line, for the log.
func redactFly(args []string) []string {
	if !slices.Contains(args, "login") {
		return args
	}
	out := slices.Clone(args)
	for i := 1; i < len(out); i++ {
		if out[i-1] == "-p" || out[i-1] == "--password" {
			out[i] = "REDACTED"
		}
	}
	return out
}

// FlyProcess is a fly command running in the background.
type FlyProcess struct {
	Stdout, Stderr Buffer // what it has printed so far

	args   []string
	cmd    *exec.Cmd
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// Pid is the process's id.
func (p *FlyProcess) Pid() int { return p.cmd.Process.Pid }

// Interrupt sends SIGINT, as Ctrl-C in a terminal does.
func (p *FlyProcess) Interrupt() error { return p.cmd.Process.Signal(os.Interrupt) }

// Done is closed when the process has exited.
func (p *FlyProcess) Done() <-chan struct{} { return p.done }

// Kill ends the process and its group at once and waits for it.
func (p *FlyProcess) Kill() {
	p.cancel()
	<-p.done
}

// Wait waits for the process to exit and returns what it printed. An exit
// code is a result; a timeout or ctx ending first is an error (the process
// is killed).
func (p *FlyProcess) Wait(ctx context.Context) (FlyResult, error) {
	select {
	case <-p.done:
	case <-ctx.Done():
		p.Kill()
		return p.result(), fmt.Errorf("fly %s: %w", strings.Join(p.args, " "), ctx.Err())
	}
	res := p.result()
	var exit *exec.ExitError
	if p.err != nil && !errors.As(p.err, &exit) {
		return res, p.err
	}
	if exit != nil && p.cmd.ProcessState.ExitCode() < 0 {
		return res, fmt.Errorf("fly %s: %w", strings.Join(p.args, " "), p.err)
	}
	return res, nil
}

func (p *FlyProcess) result() FlyResult {
	code := -1
	if p.cmd.ProcessState != nil {
		code = p.cmd.ProcessState.ExitCode()
	}
	return FlyResult{Args: p.args, Stdout: p.Stdout.String(), Stderr: p.Stderr.String(), ExitCode: code}
}
