// Package atc is the ATC runtime server: builds, step pods, the sidecar
// stream, build events and the HTTP API.
package atc

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/porter-ci/porter/pkg/blobstore"
)

// ServeCommand runs `atc-porter-runtime serve ARGS...` and returns the exit code.
func ServeCommand(ctx context.Context, args []string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var cfg Config
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the worker's cluster (empty: in-cluster service account)")
	fs.StringVar(&cfg.Namespace, "namespace", envOr("PORTER_NAMESPACE", "default"), "namespace the worker's step pods run in")
	fs.StringVar(&cfg.Worker, "worker", envOr("PORTER_WORKER", "local"), "the worker's name (pod labels)")
	fs.StringVar(&cfg.GRPCListen, "grpc-listen", "127.0.0.1:7777", "address sidecars connect to")
	fs.StringVar(&cfg.GRPCAdvertise, "grpc-advertise", "", "address written into step pods for sidecars to dial (default: --grpc-listen)")
	fs.StringVar(&cfg.HTTPListen, "http-listen", "127.0.0.1:8080", "address of the HTTP API")
	fs.StringVar(&cfg.StateDir, "state-dir", envOr("PORTER_STATE_DIR", defaultStateDir()), "directory for the step token key and the gRPC CA")
	fs.BoolVar(&cfg.Insecure, "insecure-grpc", false, "serve sidecars without TLS (tests only)")
	fs.StringVar(&cfg.PorterImage, "porter-image", "porter.local/porter:dev", "image holding the porter binary")
	fs.BoolVar(&cfg.NativeSidecars, "native-sidecars", true, "run the sidecar as a native sidecar (Kubernetes 1.29+)")
	dns := fs.String("dns-policy", string(corev1.DNSClusterFirst), "step pods' dnsPolicy")
	pull := fs.String("image-pull-policy", string(corev1.PullIfNotPresent), "step images' pull policy: Always, IfNotPresent or Never")
	fs.DurationVar(&cfg.KeepAlive, "keep-alive", 0, "how long a finished step stays interceptible")
	fs.DurationVar(&cfg.PodRetention, "pod-retention", 2*time.Minute, "how long a finished step's pod is kept")
	fs.StringVar(&cfg.PodBlobstoreEndpoint, "pod-blobstore-endpoint", "", "blobstore endpoint as step pods reach it (default: PORTER_BLOBSTORE_ENDPOINT)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: atc-porter-runtime serve [flags]\n\nThe blobstore comes from PORTER_BLOBSTORE_{ENDPOINT,BUCKET,ACCESS_KEY,SECRET_KEY,REGION,SECURE,DRIVER}.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	if cfg.ImagePullPolicy, err = podImagePullPolicy(*pull); err != nil {
		fmt.Fprintf(os.Stderr, "serve: %v\n", err)
		return 2
	}
	cfg.DNSPolicy = corev1.DNSPolicy(*dns)
	if err := serve(ctx, cfg, *kubeconfig, log); err != nil {
		log.Error("serve failed", "err", err)
		return 1
	}
	return 0
}

func serve(ctx context.Context, cfg Config, kubeconfig string, log *slog.Logger) error {
	var err error
	if cfg.Blobstore, err = blobstore.ConfigFromEnv(); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	var rc *rest.Config
	if kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
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
	srv, err := New(ctx, cfg, kube, log)
	if err != nil {
		return err
	}
	return srv.Run(ctx)
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
