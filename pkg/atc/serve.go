// Package atc is the ATC runtime server: Concourse's API, builds and their
// plans, step pods, the sidecar stream and build events.
package atc

import (
	"context"
	"crypto"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/creds"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/metrics"
	"github.com/porter-ci/porter/pkg/names"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/worker"
)

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// serveFlags are serve's settings beyond Config.
type serveFlags struct {
	kubeconfig     string
	postgresDSN    string
	localUsers     listFlag
	mainTeamUsers  listFlag
	signingSecret  string
	signingKeyFile string
	baseTypes      listFlag
	// baseTypeDefaults is the --base-resource-type-defaults file.
	baseTypeDefaults string
	workersConfig    string
}

// ServeCommand runs `atc-porter-runtime serve ARGS...` and returns the exit code.
func ServeCommand(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var cfg Config
	var sf serveFlags
	var lf logFlags
	addObservabilityFlags(fs, &cfg, &lf)
	limitFlags(fs, &cfg.Limits)
	var tags listFlag
	fs.StringVar(&sf.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the worker's cluster (empty: in-cluster service account)")
	fs.StringVar(&sf.postgresDSN, "postgres-dsn", os.Getenv("PORTER_POSTGRES_DSN"), "PostgreSQL connection string (env PORTER_POSTGRES_DSN)")
	fs.Var(&sf.localUsers, "add-local-user", "a local user NAME:PASSWORD (the password may be a bcrypt hash); repeatable")
	fs.Var(&sf.mainTeamUsers, "main-team-local-user", "a local user who owns team main (an admin); repeatable")
	fs.StringVar(&sf.signingSecret, "signing-key-secret", "", "keep the token signing key in this Secret of --namespace (in-cluster) instead of the state directory")
	fs.StringVar(&cfg.Namespace, "namespace", envOr("PORTER_NAMESPACE", "default"), "namespace the worker's step pods run in")
	fs.StringVar(&cfg.Worker, "worker", envOr("PORTER_WORKER", "local"), "the worker's name (pod labels)")
	fs.Var(&tags, "tag", "a tag of the worker: steps with tags run only on workers that have them; repeatable")
	fs.StringVar(&sf.workersConfig, "workers-config", "", "YAML file declaring the workers (name, kubeconfig/context or in_cluster, namespace, platform, tags, team, tag_placement...); replaces --worker, --tag and the worker of --namespace (docs/workers.md)")
	strategy := fs.String("container-placement-strategy", string(worker.FewestBuildContainers), "how a step's worker is chosen: fewest-build-containers, random or limit-active-tasks")
	fs.IntVar(&cfg.Placement.MaxActiveTasks, "max-active-tasks-per-worker", 0, "limit-active-tasks: the most tasks a worker runs at once (0: no limit)")
	fs.DurationVar(&cfg.WorkerHeartbeat, "worker-heartbeat-interval", defaultWorkerHeartbeat, "how often each worker's API server is probed (unanswered: the worker is stalled)")
	fs.StringVar(&cfg.GRPCListen, "grpc-listen", "127.0.0.1:7777", "address sidecars connect to")
	fs.StringVar(&cfg.GRPCAdvertise, "grpc-advertise", "", "address written into step pods for sidecars to dial (default: --grpc-listen)")
	fs.StringVar(&cfg.HTTPListen, "http-listen", "127.0.0.1:8080", "address of the HTTP API")
	fs.StringVar(&cfg.ExternalURL, "external-url", "", "URL people reach the API at (default: http://<--http-listen>)")
	fs.StringVar(&cfg.ClusterName, "cluster-name", "porter", "name shown by fly and the web UI")
	fs.StringVar(&cfg.ServerID, "server-id", "", "this server's name among several sharing a database (default: --worker)")
	fs.DurationVar(&cfg.TokenTTL, "token-ttl", 24*time.Hour, "how long a login lasts")
	fs.Int64Var(&cfg.MaxBuildLogBytes, "max-build-log-bytes", 1<<30, "the most output a build's log keeps; past it the output is dropped with a message and the steps go on (0: no cap)")
	fs.StringVar(&cfg.StateDir, "state-dir", envOr("PORTER_STATE_DIR", defaultStateDir()), "directory for the step token key, the gRPC CA and the token signing key")
	fs.BoolVar(&cfg.Insecure, "insecure-grpc", false, "serve sidecars without TLS (tests only)")
	fs.StringVar(&cfg.PorterImage, "porter-image", "porter.local/porter:dev", "image holding the porter binary")
	fs.StringVar(&cfg.WindowsPorterImage, "windows-porter-image", "", "image holding porter.exe at C:\\bin\\porter.exe, for windows workers (docs/windows-workers.md)")
	fs.BoolVar(&cfg.NativeSidecars, "native-sidecars", true, "run the sidecar as a native sidecar (Kubernetes 1.29+)")
	podspec.AddBoundsFlags(fs, &cfg.StepBounds)
	dns := fs.String("dns-policy", string(corev1.DNSClusterFirst), "step pods' dnsPolicy")
	pull := fs.String("image-pull-policy", string(corev1.PullIfNotPresent), "step images' pull policy: Always, IfNotPresent or Never")
	fs.DurationVar(&cfg.KeepAlive, "keep-alive", 0, "how long a finished step stays interceptible")
	fs.DurationVar(&cfg.PodRetention, "pod-retention", 2*time.Minute, "how long a finished step's pod is kept")
	gcFlags(fs, &cfg.GC)
	fs.Var(&sf.baseTypes, "base-resource-type", "image of a base resource type NAME=IMAGE (defaults: registry-image, git, time and mock from porter.local); repeatable")
	fs.StringVar(&sf.baseTypeDefaults, "base-resource-type-defaults", "", "YAML file of source defaults by base resource type name (e.g. registry-image: {registry_mirror: {host: HOST}}), merged under the source of every resource and image_resource of the type")
	fs.StringVar(&cfg.CredentialNamespacePrefix, "kubernetes-credential-namespace-prefix", creds.DefaultNamespacePrefix,
		"((vars)) of team T are read from Secrets in namespace PREFIX+T (the ATC needs get on secrets there)")
	AddInClusterFlags(fs, &cfg.InClusterConfig)
	addStepCredentialsFlags(fs, &cfg.StepCredentials)
	fs.StringVar(&cfg.AuditBucket, "audit-bucket", os.Getenv("PORTER_AUDIT_BUCKET"), "bucket of the audit trail, created with Object Lock in compliance mode or checked for it at start (default: the blobstore bucket's name + \"-audit\"; env PORTER_AUDIT_BUCKET)")
	fs.DurationVar(&cfg.AuditRetention, "audit-retention", 30*24*time.Hour, "default retention of a new audit bucket, and the least an existing one must have (whole days)")
	fs.StringVar(&cfg.PodBlobstoreEndpoint, "pod-blobstore-endpoint", "", "blobstore endpoint as step pods reach it (default: PORTER_BLOBSTORE_ENDPOINT)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: atc-porter-runtime serve [flags]\n\nThe blobstore comes from PORTER_BLOBSTORE_{ENDPOINT,BUCKET,ACCESS_KEY,SECRET_KEY,REGION,SECURE,DRIVER}.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log, err := lf.logger(os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "serve: %v\n", err)
		return 2
	}
	cfg.WorkerTags = tags
	cfg.Kubeconfig = sf.kubeconfig
	if cfg.Placement.Strategy, err = worker.ParseStrategy(*strategy); err != nil {
		fmt.Fprintf(os.Stderr, "serve: %v\n", err)
		return 2
	}
	if sf.workersConfig != "" {
		if cfg.Workers, err = worker.Load(sf.workersConfig); err != nil {
			fmt.Fprintf(os.Stderr, "serve: --workers-config: %v\n", err)
			return 2
		}
	}
	if cfg.ImagePullPolicy, err = podImagePullPolicy(*pull); err != nil {
		fmt.Fprintf(os.Stderr, "serve: %v\n", err)
		return 2
	}
	cfg.DNSPolicy = corev1.DNSPolicy(*dns)
	if cfg.BaseResourceTypes, err = ParseBaseResourceTypes(sf.baseTypes); err != nil {
		fmt.Fprintf(os.Stderr, "serve: %v\n", err)
		return 2
	}
	if sf.baseTypeDefaults != "" {
		if cfg.BaseResourceTypeDefaults, err = LoadBaseResourceTypeDefaults(sf.baseTypeDefaults, cfg.BaseResourceTypes); err != nil {
			fmt.Fprintf(os.Stderr, "serve: --base-resource-type-defaults: %v\n", err)
			return 2
		}
	}
	if err := serve(ctx, cfg, sf, log); err != nil {
		log.Error("serve failed", "err", err)
		return 1
	}
	return 0
}

func serve(ctx context.Context, cfg Config, sf serveFlags, log *slog.Logger) error {
	if sf.postgresDSN == "" {
		return errors.New("no database: set --postgres-dsn or PORTER_POSTGRES_DSN")
	}
	if err := names.CheckTeam(cfg.Worker); err != nil {
		return fmt.Errorf("worker name: %w", err)
	}
	var err error
	if cfg.Blobstore, err = blobstore.ConfigFromEnv(); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	var rc *rest.Config
	if sf.kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", sf.kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return fmt.Errorf("load Kubernetes config: %w", err)
	}
	rc.QPS, rc.Burst = 50, 100
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	database, err := openDB(ctx, sf.postgresDSN, cfg.DatabaseWait, log.With("component", "db"))
	if err != nil {
		return err
	}
	defer database.Close()
	if err := bootstrapUsers(ctx, database, sf, log); err != nil {
		return err
	}
	var key crypto.Signer
	if sf.signingSecret != "" {
		key, err = auth.LoadOrCreateKeySecret(ctx, kube, cfg.keyNamespace(), sf.signingSecret)
	} else {
		key, err = auth.LoadOrCreateKeyFile(filepath.Join(cfg.StateDir, "token-signing.pem"))
	}
	if err != nil {
		return fmt.Errorf("token signing key: %w", err)
	}
	store, err := blobstore.Open(ctx, cfg.Blobstore)
	if err != nil {
		return err
	}
	if err := blobstore.EnsureBucket(ctx, store); err != nil {
		return fmt.Errorf("blobstore bucket %q: %w", cfg.Blobstore.Bucket, err)
	}
	if cfg.AuditBucket == "" {
		cfg.AuditBucket = cfg.Blobstore.Bucket + "-audit"
	}
	auditCfg := cfg.Blobstore
	auditCfg.Bucket = cfg.AuditBucket
	audit, err := blobstore.Open(ctx, auditCfg)
	if err != nil {
		return err
	}
	if err := blobstore.EnsureLockedBucket(ctx, audit, cfg.AuditRetention); err != nil {
		return fmt.Errorf("--audit-bucket: %w", err)
	}
	tracing, flushSpans := startTracing(ctx, log)
	defer flushSpans()
	srv, err := New(ctx, cfg, Deps{Kube: kube, DB: database, Store: store, Audit: audit, SigningKey: key, Log: log,
		Metrics: metrics.New(), Tracing: tracing})
	if err != nil {
		return err
	}
	return srv.Run(ctx)
}

// bootstrapUsers records the local users and team main's owners given as
// flags, as Concourse's web node does at start.
func bootstrapUsers(ctx context.Context, database *db.DB, sf serveFlags, log *slog.Logger) error {
	known := map[string]bool{}
	users := map[string]string{}
	for _, spec := range sf.localUsers {
		name, hash, err := auth.ParseLocalUser(spec)
		if err != nil {
			return fmt.Errorf("--add-local-user: %w", err)
		}
		users[name] = hash
		known[name] = true
	}
	// The flags are the whole list, as in Concourse: a user no longer named
	// can no longer log in, and its tokens stop working.
	removed, err := database.SetLocalUsers(ctx, users)
	if err != nil {
		return fmt.Errorf("--add-local-user: %w", err)
	}
	if len(removed) > 0 {
		log.Info("removed local users no longer given by --add-local-user", "users", removed)
	}
	owners := db.RoleMembers{Users: []string{}, Groups: []string{}}
	for _, name := range sf.mainTeamUsers {
		if !known[name] {
			if _, err := database.LocalUserHash(ctx, name); err != nil {
				return fmt.Errorf("--main-team-local-user %q: no such local user (add it with --add-local-user)", name)
			}
		}
		owners.Users = append(owners.Users, "local:"+name)
	}
	if len(owners.Users) == 0 {
		if _, err := database.Team(ctx, "main"); err == nil {
			return nil
		}
		log.Warn("team main has no owner: nobody can log in as an admin (set --main-team-local-user)")
	}
	if _, err := database.EnsureTeam(ctx, "main", db.TeamAuth{"owner": owners}); err != nil {
		return fmt.Errorf("set up team main: %w", err)
	}
	return nil
}

func defaultStateDir() string {
	if dir, err := os.UserConfigDir(); err == nil {
		return filepath.Join(dir, "porter-atc")
	}
	return ".porter-atc"
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
