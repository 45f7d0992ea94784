package testenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"
)

// DefaultKubeconfig is where hack/cluster-up.sh writes the admin kubeconfig of
// the local cluster.
const DefaultKubeconfig = "/var/lib/porter-cluster/admin.kubeconfig"

// KubeconfigPath is PORTER_KUBECONFIG, or DefaultKubeconfig.
func KubeconfigPath() string {
	if p := os.Getenv("PORTER_KUBECONFIG"); p != "" {
		return p
	}
	return DefaultKubeconfig
}

// ErrNoCluster says no cluster is configured or reachable; suites skip on it
// (or fail under CI).
var ErrNoCluster = errors.New("no Kubernetes cluster")

// AdminConfig loads the kubeconfig at path and checks that the API server
// answers. Errors that mean "no cluster here" wrap ErrNoCluster.
func AdminConfig(ctx context.Context, path string) (*rest.Config, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("%w: kubeconfig %s: %w", ErrNoCluster, path, err)
	}
	config, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", path, err)
	}
	config.QPS, config.Burst = 50, 100
	// The probe has a transport of its own, closed once it is done:
	// client-go's shared one would keep a connection (and its goroutines)
	// open for the rest of the process.
	probe := rest.CopyConfig(config)
	probe.Dial = (&net.Dialer{}).DialContext
	hc, err := rest.HTTPClientFor(probe)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", path, err)
	}
	defer utilnet.CloseIdleConnectionsFor(hc.Transport)
	client, err := kubernetes.NewForConfigAndClient(probe, hc)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", path, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := client.CoreV1().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		return nil, fmt.Errorf("%w: API server of %s (%s) is not ready: %w", ErrNoCluster, path, config.Host, err)
	}
	return config, nil
}

// ServiceAccountKubeconfig returns a config that acts as the ServiceAccount
// sa of namespace, with a bound token from the TokenRequest API valid for an
// hour, so code under test runs with exactly the rights RBAC gives that
// account. It keeps admin's server and CA but none of its credentials.
func ServiceAccountKubeconfig(ctx context.Context, admin *rest.Config, namespace, sa string) (*rest.Config, error) {
	client, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return nil, fmt.Errorf("token for %s/%s: admin client: %w", namespace, sa, err)
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: new(int64(3600)),
	}}
	tok, err := client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("request a token for service account %s/%s: %w", namespace, sa, err)
	}
	config := rest.AnonymousClientConfig(admin)
	config.BearerToken = tok.Status.Token
	config.QPS, config.Burst = admin.QPS, admin.Burst
	return config, nil
}

// CreateNamespace creates a namespace named prefix plus a random suffix,
// labelled as a test's, and waits for its default ServiceAccount, without
// which pods are refused. The caller deletes it.
func CreateNamespace(ctx context.Context, client kubernetes.Interface, prefix string) (string, error) {
	ns, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix, Labels: map[string]string{"porter.ci/test": "e2e"}},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create namespace %s*: %w", prefix, err)
	}
	sas := client.CoreV1().ServiceAccounts(ns.Name)
	selector := fields.OneTermEqualSelector("metadata.name", "default").String()
	lw := &cache.ListWatch{
		ListFunc: func(opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			return sas.List(ctx, opts)
		},
		WatchFunc: func(opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			return sas.Watch(ctx, opts)
		},
	}
	_, err = watchtools.UntilWithSync(ctx, lw, &corev1.ServiceAccount{},
		func(store cache.Store) (bool, error) { return len(store.List()) > 0, nil },
		func(ev watch.Event) (bool, error) { return ev.Type == watch.Added, nil })
	if err != nil {
		return ns.Name, fmt.Errorf("wait for the default service account of %s: %w", ns.Name, err)
	}
	return ns.Name, nil
}

// DecodeManifests decodes a multi-document YAML file of built-in kinds
// (e.g. deploy/atc/rbac.yaml) into typed objects.
func DecodeManifests(path string) ([]runtime.Object, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read manifests: %w", err)
	}
	reader := yaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	decoder := scheme.Codecs.UniversalDeserializer()
	var objs []runtime.Object
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("split %s: %w", path, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, _, err := decoder.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("decode document %d of %s: %w", len(objs)+1, path, err)
		}
		objs = append(objs, obj)
	}
}

// stripComments drops whole-line comments, so a document of comments only
// counts as empty.
func stripComments(doc []byte) []byte {
	var out [][]byte
	for line := range bytes.Lines(doc) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line)
		}
	}
	return bytes.Join(out, nil)
}

// KubeconfigThrough writes to dst a copy of the kubeconfig src whose API
// server is reached at addr (e.g. a Proxy's), still verifying the
// server's certificate for its real host name.
func KubeconfigThrough(src, addr, dst string) error {
	cfg, err := clientcmd.LoadFromFile(src)
	if err != nil {
		return fmt.Errorf("read kubeconfig %s: %w", src, err)
	}
	for name, c := range cfg.Clusters {
		u, err := url.Parse(c.Server)
		if err != nil {
			return fmt.Errorf("kubeconfig %s: cluster %s: %w", src, name, err)
		}
		c.TLSServerName = u.Hostname()
		u.Host = addr
		c.Server = u.String()
	}
	if err := clientcmd.WriteToFile(*cfg, dst); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", dst, err)
	}
	return nil
}

// APIServerAddr is the host:port of the API server a kubeconfig names.
func APIServerAddr(path string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return "", fmt.Errorf("read kubeconfig %s: %w", path, err)
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok || cfg.Clusters[ctx.Cluster] == nil {
		return "", fmt.Errorf("kubeconfig %s: no cluster for context %q", path, cfg.CurrentContext)
	}
	u, err := url.Parse(cfg.Clusters[ctx.Cluster].Server)
	if err != nil {
		return "", fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return u.Host, nil
}

// SetPodSecurity labels namespace ns with the Pod Security Standard level
// the API server enforces there ("privileged", "baseline" or
// "restricted", latest version), and warns and audits against restricted,
// as deploy/atc/namespace.yaml does for the porter namespace. Namespaces
// CreateNamespace makes are unlabelled (privileged) so that specs may run
// privileged steps.
func SetPodSecurity(ctx context.Context, client kubernetes.Interface, ns, enforce string) error {
	patch := fmt.Sprintf(`{"metadata":{"labels":{`+
		`"pod-security.kubernetes.io/enforce":%q,"pod-security.kubernetes.io/enforce-version":"latest",`+
		`"pod-security.kubernetes.io/warn":"restricted","pod-security.kubernetes.io/warn-version":"latest",`+
		`"pod-security.kubernetes.io/audit":"restricted","pod-security.kubernetes.io/audit-version":"latest"}}}`, enforce)
	if _, err := client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("label namespace %s pod-security enforce=%s: %w", ns, enforce, err)
	}
	return nil
}
