package main

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/porter-ci/porter/pkg/atc"
	"github.com/porter-ci/porter/pkg/atc/apiserver"
	"github.com/porter-ci/porter/pkg/atc/webui"
	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/cli"
	"github.com/porter-ci/porter/pkg/creds"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/gc"
	"github.com/porter-ci/porter/pkg/metrics"
	"github.com/porter-ci/porter/pkg/names"
	"github.com/porter-ci/porter/pkg/netguard"
	"github.com/porter-ci/porter/pkg/stepserver"
	"github.com/porter-ci/porter/pkg/telemetry"
	"github.com/porter-ci/porter/pkg/upload"
	"github.com/porter-ci/porter/pkg/worker"
)

// exitUsage is serve's status for bad flags, as the standard flag package's.
const exitUsage = 2

// serveOptions are serve's flags: atc.Config's own, and what serve turns
// into the server's dependencies.
type serveOptions struct {
	cfg           atc.Config
	kubeconfig    string
	postgresDSN   string
	localUsers    []string
	mainTeamUsers []string
	// oidc is the OIDC connector's flags; oidcCACerts its --oidc-ca-cert
	// files; mainTeamOIDC* team main's OIDC owners.
	oidc               auth.OIDCConfig
	oidcCACerts        []string
	mainTeamOIDCUsers  []string
	mainTeamOIDCGroups []string
	signingSecret      string
	workersConfig      string
	strategy           string
	dnsPolicy          string
	pullPolicy         string
	baseTypes          []string
	logFormat          string
	logLevel           string
	// baseTypeDefaults is the --base-resource-type-defaults file.
	baseTypeDefaults string
	vault            vaultFlags
	// credPrefixSet: --kubernetes-credential-namespace-prefix was given.
	credPrefixSet bool
}

func newServeCommand() *cobra.Command {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the server (" + cli.Program + " serve -h for its flags)",
		Long: `Runs the server.

The blobstore comes from PORTER_BLOBSTORE_{ENDPOINT,BUCKET,ACCESS_KEY,SECRET_KEY,REGION,SECURE,DRIVER}.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError(cmd, fmt.Errorf("unexpected argument %q (serve takes flags only)", args[0]))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd)
		},
	}
	cmd.SetFlagErrorFunc(usageError)
	o.addFlags(cmd.Flags())
	return cmd
}

// usageError says what is wrong with serve's command line; the status is 2.
func usageError(cmd *cobra.Command, err error) error {
	fmt.Fprintf(cmd.ErrOrStderr(), "serve: %v\n(%s serve --help lists the flags)\n", err, cli.Program)
	return cli.Exit(exitUsage)
}

// addFlags declares every flag of serve.
func (o *serveOptions) addFlags(fs *pflag.FlagSet) {
	cfg := &o.cfg
	fs.SortFlags = false

	// Logging, the ops listener and traces.
	fs.StringVar(&cfg.OpsListen, "ops-listen", envOr("PORTER_OPS_LISTEN", "127.0.0.1:9090"), "address of /metrics, /livez and /readyz (\"\": none)")
	fs.StringVar(&cfg.PodOTLPEndpoint, "pod-otlp-endpoint", envOr("PORTER_POD_OTLP_ENDPOINT", ""),
		"OTLP/gRPC endpoint URL step pods export their spans to (http:// for no TLS); empty: the sidecars export none. The server's own spans go to OTEL_EXPORTER_OTLP_ENDPOINT")
	fs.StringVar(&o.logFormat, "log-format", envOr(telemetry.LogFormatEnv, telemetry.FormatText), "log format: text or json")
	fs.StringVar(&o.logLevel, "log-level", envOr(telemetry.LogLevelEnv, "info"), "lowest level logged: debug, info, warn or error")

	// Limits on what clients hold.
	l := &cfg.Limits
	l.MaxArtifactUpload, l.MaxRequestBody = atc.DefaultMaxArtifactUpload, atc.DefaultMaxRequestBody
	l.GRPC.Unsynced = stepserver.DefaultLimits.Unsynced
	l.Upload = upload.Limits{}.WithDefaults()
	fs.Var((*byteSize)(&l.MaxArtifactUpload), "max-artifact-upload", "largest `fly execute -i` upload accepted, as sent (e.g. 10Gi, 500Mi)")
	fs.Var((*byteSize)(&l.Upload.MaxInflated), upload.FlagMaxInflated, "most bytes of tar one `fly execute -i` upload may inflate to (e.g. 1Gi, 4Gi)")
	fs.Func(upload.FlagMaxEntries, fmt.Sprintf("most files, directories and links in one `fly execute -i` upload (default %d)", upload.DefaultMaxEntries), func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("want a positive number, got %q", v)
		}
		l.Upload.MaxEntries = n
		return nil
	})
	fs.Var((*byteSize)(&l.MaxRequestBody), "max-request-body", "largest body of any other API request (e.g. 8Mi)")
	fs.DurationVar(&l.HTTPReadTimeout, "http-read-timeout", atc.DefaultHTTPReadTimeout, "how long reading an API request may take (an upload: each read)")
	fs.DurationVar(&l.HTTPIdleTimeout, "http-idle-timeout", atc.DefaultHTTPIdleTimeout, "how long an idle keep-alive API connection is kept")
	fs.DurationVar(&l.GRPC.Hello, "grpc-hello-timeout", stepserver.DefaultLimits.Hello, "how long a sidecar connection may take to say which step it is before it is closed")
	fs.IntVar(&l.GRPC.StreamsPerStep, "grpc-max-streams-per-step", stepserver.DefaultLimits.StreamsPerStep, "most streams one step's sidecar may hold at once")
	fs.Func("grpc-max-concurrent-streams", fmt.Sprintf("most streams on one sidecar connection (default %d)", stepserver.DefaultLimits.StreamsPerConn), func(v string) error {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n == 0 {
			return fmt.Errorf("want a positive number, got %q", v)
		}
		l.GRPC.StreamsPerConn = uint32(n)
		return nil
	})
	fs.Var((*byteSize)(&l.GRPC.Unsynced), "grpc-max-unsynced-bytes", "most event bytes taken from all sidecars and not yet durable; past it, events wait in the sidecars (e.g. 32Mi)")

	// The cluster, the database, users and the workers.
	fs.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the worker's cluster (empty: in-cluster service account)")
	fs.StringVar(&o.postgresDSN, "postgres-dsn", os.Getenv("PORTER_POSTGRES_DSN"), "PostgreSQL connection string (env PORTER_POSTGRES_DSN)")
	fs.StringArrayVar(&o.localUsers, "add-local-user", nil, "a local user NAME:PASSWORD (the password may be a bcrypt hash); repeatable")
	fs.StringArrayVar(&o.mainTeamUsers, "main-team-local-user", nil, "a local user who owns team main (an admin); repeatable")
	// Single sign-on, as Concourse's --oidc-* flags.
	fs.StringVar(&o.oidc.DisplayName, "oidc-display-name", "", "OIDC: the identity provider's name on the login page (default: OIDC)")
	fs.StringVar(&o.oidc.Issuer, "oidc-issuer", "", "OIDC: the issuer URL, discovered at <URL>/.well-known/openid-configuration; setting it turns single sign-on on")
	fs.StringVar(&o.oidc.ClientID, "oidc-client-id", "", "OIDC: the client ID (its redirect URI is <--external-url>/sky/issuer/callback)")
	fs.StringVar(&o.oidc.ClientSecret, "oidc-client-secret", os.Getenv("PORTER_OIDC_CLIENT_SECRET"), "OIDC: the client secret (env PORTER_OIDC_CLIENT_SECRET)")
	fs.StringArrayVar(&o.oidc.Scopes, "oidc-scope", nil, "OIDC: a scope to ask for beside openid; repeatable (default: profile and email; Dex sends groups only for the groups scope)")
	fs.StringVar(&o.oidc.GroupsKey, "oidc-groups-key", "groups", "OIDC: the ID token claim holding the user's groups")
	fs.StringVar(&o.oidc.UserNameKey, "oidc-user-name-key", "username", "OIDC: the ID token claim holding the user's name, which oidc:<user> roles match; only that claim, and a login without it is refused. Choose one users cannot edit (the provider's login name, or sub); email only counts when email_verified. Dex sends no username: use preferred_username or name, which its static users cannot change")
	fs.StringArrayVar(&o.oidcCACerts, "oidc-ca-cert", nil, "OIDC: a PEM file of CA certificates the provider's may chain to, besides the system's; repeatable")
	fs.StringArrayVar(&o.mainTeamOIDCUsers, "main-team-oidc-user", nil, "an OIDC user (name or ID) who owns team main (an admin); repeatable")
	fs.StringArrayVar(&o.mainTeamOIDCGroups, "main-team-oidc-group", nil, "an OIDC group whose members own team main (admins); repeatable")
	fs.StringVar(&o.signingSecret, "signing-key-secret", "", "keep the token signing key in this Secret of --namespace (in-cluster) instead of the state directory")
	fs.StringVar(&cfg.Namespace, "namespace", envOr("PORTER_NAMESPACE", "default"), "namespace the worker's step pods run in")
	fs.StringVar(&cfg.Worker, "worker", envOr("PORTER_WORKER", "local"), "the worker's name (pod labels)")
	fs.StringArrayVar(&cfg.WorkerTags, "tag", nil, "a tag of the worker: steps with tags run only on workers that have them; repeatable")
	fs.StringVar(&o.workersConfig, "workers-config", "", "YAML file declaring the workers (name, kubeconfig/context or in_cluster, namespace, platform, tags, team, tag_placement...); replaces --worker, --tag and the worker of --namespace (docs/workers.md)")
	fs.StringVar(&o.strategy, "container-placement-strategy", string(worker.FewestBuildContainers), "how a step's worker is chosen: fewest-build-containers, random or limit-active-tasks")
	fs.IntVar(&cfg.Placement.MaxActiveTasks, "max-active-tasks-per-worker", 0, "limit-active-tasks: the most tasks a worker runs at once (0: no limit)")
	fs.IntVar(&cfg.Placement.MaxWaiting, "lookahead-per-worker", 20, "the most pods declared ahead of their turn (--lookahead) one worker holds at once, of all builds: beyond it, tasks declare their pods at their turn (0: none)")
	fs.DurationVar(&cfg.WorkerHeartbeat, "worker-heartbeat-interval", atc.DefaultWorkerHeartbeat, "how often each worker's API server is probed (unanswered: the worker is stalled)")

	// Listeners, identity and logins.
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

	// Step pods.
	fs.StringVar(&cfg.PorterImage, "porter-image", "porter.local/porter:dev", "image holding the porter binary")
	fs.StringVar(&cfg.WindowsPorterImage, "windows-porter-image", "", "image holding porter.exe at C:\\bin\\porter.exe, for windows workers (docs/windows-workers.md)")
	fs.BoolVar(&cfg.NativeSidecars, "native-sidecars", true, "run the sidecar as a native sidecar (Kubernetes 1.29+)")
	b := &cfg.StepBounds
	fs.BoolVar(&b.HardCPULimit, "step-hard-cpu-limit", false, "also make a task's container_limits.cpu the step's CPU limit (default: a request only, as Concourse's relative shares)")
	fs.Var(quantityFlag{&b.VolumeSizeLimit}, "step-volume-size-limit", "sizeLimit of each emptyDir of a step pod, e.g. 10Gi (default: none); the kubelet evicts a pod writing more")
	fs.Var(quantityFlag{&b.EphemeralStorageRequest}, "step-ephemeral-storage-request", "ephemeral-storage request of the step container, e.g. 1Gi (default: none)")
	fs.Int64Var(&b.MaxExtractBytes, "step-max-extract-bytes", 0, "most bytes a step's sidecar extracts from one input or cache (0: 64 GiB)")
	fs.Int64Var(&b.MaxExtractFiles, "step-max-extract-files", 0, "most files and directories a step's sidecar extracts from one input or cache (0: 2,000,000)")
	fs.Var(quantityFlag{&b.EphemeralStorageLimit}, "step-ephemeral-storage-limit", "ephemeral-storage limit of the step container, e.g. 20Gi (default: none)")
	fs.StringVar(&o.dnsPolicy, "dns-policy", string(corev1.DNSClusterFirst), "step pods' dnsPolicy")
	fs.StringVar(&o.pullPolicy, "image-pull-policy", string(corev1.PullIfNotPresent), "step images' pull policy: Always, IfNotPresent or Never")
	fs.DurationVar(&cfg.KeepAlive, "keep-alive", 0, "how long a finished step stays interceptible")
	fs.IntVar(&cfg.Lookahead, "lookahead", 4, "how many tasks, puts and gets of a serial sequence have their pods declared ahead of their turn, gated, so that the kubelet's pod start is off the build's critical path (0: none; more than 4 start so many pods at once on a small node that they slow each other)")
	fs.IntVar(&cfg.CheckPodMaxChecks, "check-pod-max-checks", 16, "how many checks one check pod runs at once (they share its memory and CPU); more wait for one to end (0: no bound)")
	fs.DurationVar(&cfg.CheckPodLifetime, "check-pod-lifetime", 10*time.Minute, "how long a check pod lives: it runs the checks of one pipeline, worker and resource type image, each as a session, taking new ones for the first half of its life (0: a pod per check)")
	fs.DurationVar(&cfg.PodRetention, "pod-retention", 2*time.Minute, "how long every finished build's step pod is kept at least (not a check's: only the latest check of each resource is kept)")

	// Garbage collection.
	fs.DurationVar(&cfg.GC.Interval, "gc-interval", 30*time.Second, "time between garbage-collection passes (0: no GC)")
	fs.DurationVar(&cfg.GC.ArtifactRetention, "artifact-retention", gc.DefaultArtifactRetention,
		"how long an artifact nothing references any more (its build finished, no cache or pinned version) is kept")
	fs.DurationVar(&cfg.GC.OrphanGrace, "gc-orphan-grace", gc.DefaultOrphanGrace, "age at which a step pod no container record knows is deleted")
	fs.DurationVar(&cfg.GC.StagingAge, "gc-staging-age", gc.DefaultStagingAge, "age at which a staging/ object (an interrupted upload) is deleted")
	fs.DurationVar(&cfg.GC.OneOffGrace, "gc-one-off-grace-period", gc.DefaultOneOffGrace, "how long a one-off build's (fly execute) step pods are kept after it ended")
	fs.DurationVar(&cfg.GC.FailedGrace, "gc-failed-grace-period", gc.DefaultFailedGrace, "how long the step pods of a job's latest build are kept when it did not succeed (0: until a newer build finishes)")
	fs.DurationVar(&cfg.GC.HijackGrace, "gc-hijack-grace-period", gc.DefaultHijackGrace, "how long an intercepted step's pod is kept after its last intercept session (it stays while one is open)")
	fs.IntVar(&cfg.GC.MaxKeptPerWorker, "gc-max-kept-pods-per-worker", gc.DefaultMaxKeptPerWorker, "most pods of finished steps kept on a worker; beyond it the oldest go first (0: no cap)")
	lr := &cfg.GC.LogRetention
	fs.IntVar(&lr.DefaultBuilds, "default-build-logs-to-retain", 0, "builds whose logs a job keeps when its build_log_retention does not say (0: all)")
	fs.IntVar(&lr.MaxBuilds, "max-build-logs-to-retain", 0, "most builds whose logs any job keeps, whatever its build_log_retention says (0: no cap)")
	fs.IntVar(&lr.DefaultDays, "default-days-to-retain-build-logs", 0, "days a job keeps its builds' logs when its build_log_retention does not say (0: for ever)")
	fs.IntVar(&lr.MaxDays, "max-days-to-retain-build-logs", 0, "most days any job keeps its builds' logs (0: no cap)")

	// Resource types and credentials.
	fs.StringArrayVar(&o.baseTypes, "base-resource-type", nil, "image of a base resource type NAME=IMAGE (defaults: registry-image, git, time and mock from porter.local); repeatable")
	fs.StringVar(&o.baseTypeDefaults, "base-resource-type-defaults", "", "YAML file of source defaults by base resource type name (e.g. registry-image: {registry_mirror: {host: HOST}}), merged under the source of every resource and image_resource of the type")
	fs.StringVar(&cfg.CredentialNamespacePrefix, "kubernetes-credential-namespace-prefix", creds.DefaultNamespacePrefix,
		"((vars)) of team T are read from Secrets in namespace PREFIX+T (the ATC needs get on secrets there); not with --vault-url")
	o.vault.add(fs)
	fs.Func("var-source-allowed-networks", "a network (CIDR, or an address) a pipeline's var_source may reach although it is loopback, link-local, a cloud's metadata service, unspecified or multicast, which are refused by default, checked at each connection after name resolution (the server, not the pipeline's author, connects, with the source's token); private networks are not refused; comma-separated or repeatable, e.g. 127.0.0.1/32 for a Vault beside the server", func(v string) error {
		nets, err := netguard.ParseNetworks([]string{v})
		if err != nil {
			return err
		}
		cfg.VarSourceAllowedNetworks = append(cfg.VarSourceAllowedNetworks, nets...)
		return nil
	})

	// Running in the cluster (deploy/atc, several replicas).
	ic := &cfg.InClusterConfig
	fs.DurationVar(&ic.DatabaseWait, "database-wait", 0, "how long to retry an unreachable database at start (0: fail at once)")
	fs.StringVar(&ic.CASecret, "ca-secret", "", "keep the gRPC CA in this Secret (created on first use) instead of the state directory")
	fs.StringVar(&ic.StepTokenKeySecret, "step-token-key-secret", "", "keep the step token key in this Secret (created on first use) instead of the state directory")
	fs.StringVar(&ic.SecretNamespace, "secret-namespace", envOr("PORTER_SECRET_NAMESPACE", ""), "namespace of the key Secrets (default: --namespace)")
	fs.StringArrayVar(&ic.GRPCCertHosts, "grpc-cert-host", nil, "a further DNS name or IP the gRPC certificate covers; repeatable")
	fs.DurationVar(&ic.GRPCCertLifetime, "grpc-cert-lifetime", atc.DefaultGRPCCertLifetime, "validity of the gRPC server certificate; re-issued after two thirds of it")
	fs.StringVar(&ic.LeaderElectionNamespace, "leader-election-namespace", "", "run the scheduler and GC only while holding a Lease in this namespace (several replicas)")
	fs.StringVar(&ic.LeaderElectionName, "leader-election-name", "atc-porter-runtime", "prefix of the Leases' names")
	fs.DurationVar(&ic.LeaseDuration, "leader-election-lease-duration", 15*time.Second, "how long a Lease holds without renewal")

	// Step credentials.
	sc := &cfg.StepCredentials
	fs.StringVar(&sc.Mode, "step-credentials", atc.StepCredentialsSTS, "blobstore credentials of step pods: sts (temporary, limited to the step's own keys) or static (the server's key; for stores without STS)")
	fs.StringVar(&sc.STSEndpoint, "step-credentials-sts-endpoint", "", "STS URL (default: the blobstore's endpoint, where MinIO serves STS)")
	fs.StringVar(&sc.RoleARN, "step-credentials-role-arn", "", "role the STS credentials assume (AWS)")
	fs.StringVar(&sc.Region, "step-credentials-region", "", "STS region (AWS)")
	fs.DurationVar(&sc.MaxLifetime, "step-credentials-max-lifetime", atc.DefaultStepCredentialsMaxLifetime, "longest a step's credentials last (a step's timeout, upload allowance and keep-alive, within 15m and this)")

	// The audit trail.
	fs.StringVar(&cfg.AuditBucket, "audit-bucket", os.Getenv("PORTER_AUDIT_BUCKET"), "bucket of the audit trail, created with Object Lock in compliance mode or checked for it at start (default: the blobstore bucket's name + \"-audit\"; env PORTER_AUDIT_BUCKET)")
	fs.DurationVar(&cfg.AuditRetention, "audit-retention", 30*24*time.Hour, "default retention of a new audit bucket, and the least an existing one must have (whole days)")
	fs.StringVar(&cfg.PodBlobstoreEndpoint, "pod-blobstore-endpoint", "", "blobstore endpoint as step pods reach it (default: PORTER_BLOBSTORE_ENDPOINT)")
}

// run checks the flags (exit 2 if they are wrong), then runs the server
// until ctx ends (exit 1 if it fails).
func (o *serveOptions) run(ctx context.Context, cmd *cobra.Command) error {
	log, err := telemetry.NewLogger(cmd.ErrOrStderr(), o.logFormat, o.logLevel)
	if err != nil {
		// The error names the setting ("log level", "log format").
		return usageError(cmd, fmt.Errorf("--log-format/--log-level: %w", err))
	}
	// client-go logs through klog: into serve's log too.
	telemetry.RouteKlog(log, log.Enabled(ctx, slog.LevelDebug))
	o.credPrefixSet = cmd.Flags().Changed("kubernetes-credential-namespace-prefix")
	cfg, err := o.config()
	if err != nil {
		return usageError(cmd, err)
	}
	if err := serve(ctx, cfg, o, log); err != nil {
		log.Error("serve failed", "err", err)
		return cli.Exit(1)
	}
	return nil
}

// config is atc.Config from the flags, with the files they name read.
func (o *serveOptions) config() (atc.Config, error) {
	cfg := o.cfg
	cfg.Kubeconfig = o.kubeconfig
	var err error
	if cfg.Placement.Strategy, err = worker.ParseStrategy(o.strategy); err != nil {
		return cfg, fmt.Errorf("--container-placement-strategy: %w", err)
	}
	if o.workersConfig != "" {
		if cfg.Workers, err = worker.Load(o.workersConfig); err != nil {
			return cfg, fmt.Errorf("--workers-config: %w", err)
		}
	}
	if cfg.ImagePullPolicy, err = atc.ParseImagePullPolicy(o.pullPolicy); err != nil {
		return cfg, fmt.Errorf("--image-pull-policy: %w", err)
	}
	switch cfg.DNSPolicy = corev1.DNSPolicy(o.dnsPolicy); cfg.DNSPolicy {
	case corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet, corev1.DNSDefault, corev1.DNSNone:
	default:
		return cfg, fmt.Errorf("--dns-policy %q: want ClusterFirst, ClusterFirstWithHostNet, Default or None", o.dnsPolicy)
	}
	switch cfg.StepCredentials.Mode {
	case atc.StepCredentialsSTS, atc.StepCredentialsStatic:
	default:
		return cfg, fmt.Errorf("--step-credentials %q: want %s or %s", cfg.StepCredentials.Mode, atc.StepCredentialsSTS, atc.StepCredentialsStatic)
	}
	lr := cfg.GC.LogRetention
	for _, f := range []struct {
		flag string
		v    int
	}{{"--default-build-logs-to-retain", lr.DefaultBuilds}, {"--max-build-logs-to-retain", lr.MaxBuilds},
		{"--default-days-to-retain-build-logs", lr.DefaultDays}, {"--max-days-to-retain-build-logs", lr.MaxDays}} {
		if f.v < 0 {
			return cfg, fmt.Errorf("%s %d: must not be negative (0 keeps every log)", f.flag, f.v)
		}
	}
	if cfg.Lookahead < 0 {
		return cfg, fmt.Errorf("--lookahead %d: must not be negative (0: no pods declared ahead)", cfg.Lookahead)
	}
	if cfg.Placement.MaxWaiting < 0 {
		return cfg, fmt.Errorf("--lookahead-per-worker %d: must not be negative (0: no pods declared ahead)", cfg.Placement.MaxWaiting)
	}
	if cfg.CheckPodMaxChecks < 0 {
		return cfg, fmt.Errorf("--check-pod-max-checks %d: must not be negative (0: no bound)", cfg.CheckPodMaxChecks)
	}
	if cfg.BaseResourceTypes, err = parseBaseResourceTypes(o.baseTypes); err != nil {
		return cfg, err
	}
	if o.baseTypeDefaults != "" {
		if cfg.BaseResourceTypeDefaults, err = loadBaseResourceTypeDefaults(o.baseTypeDefaults, cfg.BaseResourceTypes); err != nil {
			return cfg, fmt.Errorf("--base-resource-type-defaults: %w", err)
		}
	}
	if cfg.OIDC, err = o.oidcConfig(); err != nil {
		return cfg, err
	}
	if cfg.Vault, err = o.vault.config(o.credPrefixSet); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// oidcConfig is the OIDC connector of the --oidc-* flags, nil when
// --oidc-issuer, --oidc-client-id and --oidc-client-secret are all unset.
func (o *serveOptions) oidcConfig() (*auth.OIDCConfig, error) {
	c := o.oidc
	if c.Issuer == "" && c.ClientID == "" && c.ClientSecret == "" {
		if len(o.mainTeamOIDCUsers)+len(o.mainTeamOIDCGroups) > 0 {
			return nil, errors.New("--main-team-oidc-user and --main-team-oidc-group need the OIDC connector: set --oidc-issuer, --oidc-client-id and --oidc-client-secret")
		}
		return nil, nil
	}
	for _, path := range o.oidcCACerts {
		pem, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("--oidc-ca-cert: %w", err)
		}
		c.CACertsPEM = append(c.CACertsPEM, pem)
	}
	// The external URL is only known for sure once the server defaults it.
	check := c
	check.ExternalURL = "http://porter"
	if err := check.Validate(); err != nil {
		return nil, fmt.Errorf("single sign-on: %w", err)
	}
	return &c, nil
}

// serve builds the server's dependencies (clients of Kubernetes, the
// database and the blobstore, the token signing key, tracing) and runs it.
func serve(ctx context.Context, cfg atc.Config, o *serveOptions, log *slog.Logger) error {
	if o.postgresDSN == "" {
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
	if o.kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig)
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
	database, err := atc.OpenDB(ctx, o.postgresDSN, cfg.DatabaseWait, log.With("component", "db"))
	if err != nil {
		return err
	}
	defer database.Close()
	if err := bootstrapUsers(ctx, database, o.localUsers, mainTeamOwners{local: o.mainTeamUsers, oidcUsers: o.mainTeamOIDCUsers, oidcGroups: o.mainTeamOIDCGroups}, log); err != nil {
		return err
	}
	var key crypto.Signer
	if o.signingSecret != "" {
		key, err = auth.LoadOrCreateKeySecret(ctx, kube, cfg.KeyNamespace(), o.signingSecret)
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
	tracing, flushSpans := atc.StartTracing(ctx, log)
	defer flushSpans()
	return compose(ctx, cfg.WithDefaults(), parts{kube: kube, db: database, store: store, audit: audit, signingKey: key,
		log: log, tracing: tracing})
}

// parts are what serve opened: compose builds the server from them.
type parts struct {
	kube         kubernetes.Interface
	db           *db.DB
	store, audit blobstore.Store
	signingKey   crypto.Signer
	log          *slog.Logger
	tracing      trace.TracerProvider
}

// compose is the composition root: it builds the credential manager, the
// step credentials issuer, the engine, the token issuer, the API (with its
// single sign-on connector) and the web UI over it, each complete, and
// runs the server until ctx ends.
func compose(ctx context.Context, cfg atc.Config, p parts) error {
	stepCreds, err := cfg.StepCredentials.Issuer(cfg.Blobstore, cfg.AuditBucket)
	if err != nil {
		return err
	}
	var vault *creds.Vault
	if cfg.Vault != nil {
		if vault, err = creds.NewVault(*cfg.Vault); err != nil {
			return err
		}
	}
	engine, err := atc.New(ctx, cfg, atc.Deps{Kube: p.kube, DB: p.db, Store: p.store, Audit: p.audit, Log: p.log,
		Metrics: metrics.New(), Tracing: p.tracing, StepCredentials: stepCreds, Vault: vault})
	if err != nil {
		return err
	}
	api, err := apiserver.New(apiserver.Config{
		ExternalURL: cfg.ExternalURL, ClusterName: cfg.ClusterName, ServerID: cfg.ServerID,
		BaseTypes: engine.BaseTypes(), ArtifactWorker: engine.ArtifactWorker(), BlobstoreBucket: cfg.Blobstore.Bucket,
		Limits: apiserver.Limits{MaxArtifactUpload: cfg.Limits.MaxArtifactUpload, MaxRequestBody: cfg.Limits.MaxRequestBody,
			UploadStall: cfg.Limits.HTTPReadTimeout, Upload: cfg.Limits.Upload},
		OIDC: cfg.OIDC,
	}, apiserver.Deps{Store: p.db, Engine: engine.API(), Events: engine.BuildEvents(), Logs: engine.Logs(), Blobs: p.store, Audit: p.audit,
		Issuer: auth.NewIssuer(p.signingKey, cfg.ExternalURL+"/sky/issuer", cfg.TokenTTL), Log: p.log.With("component", "api"),
		Credentials: engine.Credentials()})
	if err != nil {
		return err
	}
	// The web UI answers its pages and assets; everything else is the API.
	return engine.Run(ctx, webui.Wrap(api.Handler(), cfg.ExternalURL))
}

// mainTeamOwners are the --main-team-* flags.
type mainTeamOwners struct{ local, oidcUsers, oidcGroups []string }

// bootstrapUsers records the local users and team main's owners given as
// flags, as Concourse's web node does at start.
func bootstrapUsers(ctx context.Context, database *db.DB, localUsers []string, main mainTeamOwners, log *slog.Logger) error {
	known := map[string]bool{}
	users := map[string]string{}
	for _, spec := range localUsers {
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
	for _, name := range main.local {
		if !known[name] {
			if _, err := database.LocalUserHash(ctx, name); err != nil {
				return fmt.Errorf("--main-team-local-user %q: no such local user (add it with --add-local-user)", name)
			}
		}
		owners.Users = append(owners.Users, "local:"+name)
	}
	for _, name := range main.oidcUsers {
		owners.Users = append(owners.Users, auth.OIDCConnector+":"+name)
	}
	for _, group := range main.oidcGroups {
		owners.Groups = append(owners.Groups, auth.OIDCConnector+":"+group)
	}
	if len(owners.Users)+len(owners.Groups) == 0 {
		if _, err := database.Team(ctx, "main"); err == nil {
			return nil
		}
		log.Warn("team main has no owner: nobody can log in as an admin (set --main-team-local-user or --main-team-oidc-user)")
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
