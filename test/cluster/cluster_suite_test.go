// Package cluster_test holds the smoke specs of the local development/CI cluster
// (hack/cluster-up.sh): the things the rest of Porter relies on, checked against
// the real thing. Run them with `go test ./test/cluster/` once the cluster is up.
//
// The cluster is found through PORTER_KUBECONFIG (default
// /var/lib/porter-cluster/admin.kubeconfig) and MinIO through the
// PORTER_CLUSTER_MINIO_* variables, or the minio.env file cluster-up writes. With no
// cluster the specs are skipped, unless CI is set: then they fail.
package cluster_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/porter-ci/porter/test/testenv"
)

const (
	defaultKubeconfig   = "/var/lib/porter-cluster/admin.kubeconfig"
	defaultMinIOEnvFile = "/var/lib/porter-cluster/minio.env"
	defaultNodeIP       = "10.245.0.1"
	busyboxImage        = "busybox"
)

// clusterEnv is what the specs know about the cluster under test.
type clusterEnv struct {
	client *kubernetes.Clientset
	nodeIP string
	minio  minioEnv
}

type minioEnv struct {
	endpoint    string // from the host
	podEndpoint string // from pods
	accessKey   string
	secretKey   string
	bucket      string
}

var env clusterEnv

func TestCluster(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Local cluster smoke suite")
}

var _ = ReportAfterSuite("spec times", testenv.RecordSpecTimes)

var _ = BeforeSuite(func(ctx SpecContext) {
	kubeconfig := getenv("PORTER_KUBECONFIG", defaultKubeconfig)
	if _, err := os.Stat(kubeconfig); errors.Is(err, fs.ErrNotExist) {
		msg := fmt.Sprintf("no cluster configured: %s does not exist (run `make cluster-up` or set PORTER_KUBECONFIG)", kubeconfig)
		if os.Getenv("CI") != "" {
			Fail(msg + "; CI is set, so this is a failure")
		}
		Skip(msg)
	}
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred(), "loading kubeconfig %s", kubeconfig)
	config.QPS, config.Burst = 50, 100
	env.client, err = kubernetes.NewForConfig(config)
	Expect(err).NotTo(HaveOccurred(), "creating a Kubernetes client")
	_, err = env.client.Discovery().ServerVersion()
	Expect(err).NotTo(HaveOccurred(), "reaching the API server of %s", kubeconfig)

	env.nodeIP = getenv("PORTER_CLUSTER_NODE_IP", defaultNodeIP)
	env.minio, err = loadMinIOEnv(getenv("PORTER_CLUSTER_MINIO_ENV_FILE", defaultMinIOEnvFile))
	Expect(err).NotTo(HaveOccurred(), "reading the MinIO settings")
}, NodeTimeout(30*time.Second))

func getenv(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}

// loadMinIOEnv takes PORTER_CLUSTER_MINIO_* from the environment, or else from
// the env file cluster-up writes.
func loadMinIOEnv(path string) (minioEnv, error) {
	values := map[string]string{}
	if f, err := os.Open(path); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "="); ok {
				values[k] = v
			}
		}
		if err := sc.Err(); err != nil {
			return minioEnv{}, fmt.Errorf("reading %s: %w", path, err)
		}
	}
	get := func(key string) string {
		if v := os.Getenv(key); v != "" {
			return v
		}
		return values[key]
	}
	m := minioEnv{
		endpoint:    get("PORTER_CLUSTER_MINIO_ENDPOINT"),
		podEndpoint: get("PORTER_CLUSTER_MINIO_POD_ENDPOINT"),
		accessKey:   get("PORTER_CLUSTER_MINIO_ACCESS_KEY"),
		secretKey:   get("PORTER_CLUSTER_MINIO_SECRET_KEY"),
		bucket:      get("PORTER_CLUSTER_MINIO_BUCKET"),
	}
	if m.endpoint == "" || m.accessKey == "" || m.secretKey == "" || m.bucket == "" {
		return m, fmt.Errorf("PORTER_CLUSTER_MINIO_* are not set and %s does not provide them", path)
	}
	if m.podEndpoint == "" {
		m.podEndpoint = m.endpoint
	}
	return m, nil
}

// newNamespace creates a namespace for one spec, deletes it when the spec ends,
// and waits for its default ServiceAccount, without which pods are refused.
func newNamespace(ctx context.Context) string {
	ns, err := env.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "smoke-", Labels: map[string]string{"porter.ci/test": "cluster-smoke"}},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred(), "creating a namespace")
	DeferCleanup(func(ctx SpecContext) {
		err := env.client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			Fail(fmt.Sprintf("deleting namespace %s: %v", ns.Name, err))
		}
	}, NodeTimeout(30*time.Second))

	lw := fieldListWatch(func(opts metav1.ListOptions) (runtime.Object, error) {
		return env.client.CoreV1().ServiceAccounts(ns.Name).List(ctx, opts)
	}, func(opts metav1.ListOptions) (watch.Interface, error) {
		return env.client.CoreV1().ServiceAccounts(ns.Name).Watch(ctx, opts)
	}, "default")
	_, err = watchtools.UntilWithSync(ctx, lw, &corev1.ServiceAccount{},
		func(store cache.Store) (bool, error) { return len(store.List()) > 0, nil },
		func(ev watch.Event) (bool, error) { return ev.Type == watch.Added, nil })
	Expect(err).NotTo(HaveOccurred(), "waiting for the default ServiceAccount of %s", ns.Name)
	return ns.Name
}

// fieldListWatch lists and watches the one object called name.
func fieldListWatch(
	list func(metav1.ListOptions) (runtime.Object, error),
	watchFn func(metav1.ListOptions) (watch.Interface, error),
	name string,
) *cache.ListWatch {
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	return &cache.ListWatch{
		ListFunc: func(opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			return list(opts)
		},
		WatchFunc: func(opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			return watchFn(opts)
		},
	}
}

func podListWatch(ctx context.Context, namespace, name string) *cache.ListWatch {
	pods := env.client.CoreV1().Pods(namespace)
	return fieldListWatch(func(opts metav1.ListOptions) (runtime.Object, error) {
		return pods.List(ctx, opts)
	}, func(opts metav1.ListOptions) (watch.Interface, error) {
		return pods.Watch(ctx, opts)
	}, name)
}

// waitForPod watches the pod until done reports true, and returns it.
func waitForPod(ctx context.Context, namespace, name string, done func(*corev1.Pod) (bool, error)) *corev1.Pod {
	var last *corev1.Pod
	check := func(obj any) (bool, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return false, nil
		}
		last = pod
		return done(pod)
	}
	_, err := watchtools.UntilWithSync(ctx, podListWatch(ctx, namespace, name), &corev1.Pod{},
		func(store cache.Store) (bool, error) {
			obj, exists, err := store.GetByKey(namespace + "/" + name)
			if err != nil || !exists {
				return false, err
			}
			return check(obj)
		},
		func(ev watch.Event) (bool, error) {
			if ev.Type == watch.Deleted {
				return false, fmt.Errorf("pod %s/%s was deleted", namespace, name)
			}
			return check(ev.Object)
		})
	Expect(err).NotTo(HaveOccurred(), "waiting for pod %s/%s; last seen: %s", namespace, name, describePod(last))
	return last
}

// waitForPodGone watches until the pod no longer exists.
func waitForPodGone(ctx context.Context, namespace, name string) {
	_, err := watchtools.UntilWithSync(ctx, podListWatch(ctx, namespace, name), &corev1.Pod{},
		func(store cache.Store) (bool, error) {
			_, exists, err := store.GetByKey(namespace + "/" + name)
			return !exists, err
		},
		func(ev watch.Event) (bool, error) { return ev.Type == watch.Deleted, nil })
	Expect(err).NotTo(HaveOccurred(), "waiting for pod %s/%s to be deleted", namespace, name)
}

func podFinished(pod *corev1.Pod) (bool, error) {
	switch pod.Status.Phase {
	case corev1.PodSucceeded:
		return true, nil
	case corev1.PodFailed:
		return false, fmt.Errorf("pod failed: %s", describePod(pod))
	}
	return false, nil
}

func podRunning(pod *corev1.Pod) (bool, error) {
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return false, fmt.Errorf("pod ended early: %s", describePod(pod))
	}
	return pod.Status.Phase == corev1.PodRunning, nil
}

// describePod is a one-line account of a pod's state, for failure messages.
func describePod(pod *corev1.Pod) string {
	if pod == nil {
		return "<never seen>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s", pod.Status.Phase)
	statuses := append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
	for _, s := range statuses {
		switch {
		case s.State.Waiting != nil:
			fmt.Fprintf(&b, " %s=waiting(%s: %s)", s.Name, s.State.Waiting.Reason, s.State.Waiting.Message)
		case s.State.Running != nil:
			fmt.Fprintf(&b, " %s=running", s.Name)
		case s.State.Terminated != nil:
			fmt.Fprintf(&b, " %s=terminated(%d %s)", s.Name, s.State.Terminated.ExitCode, s.State.Terminated.Reason)
		}
	}
	return b.String()
}

func containerLogs(ctx context.Context, namespace, pod, container string) string {
	raw, err := env.client.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
	Expect(err).NotTo(HaveOccurred(), "reading the logs of %s/%s container %s", namespace, pod, container)
	return string(raw)
}

// busyboxPod is a one-container pod that runs script with sh and ends.
func busyboxPod(name, script string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			DNSPolicy:                     corev1.DNSDefault,
			AutomountServiceAccountToken:  new(false),
			TerminationGracePeriodSeconds: new(int64(5)),
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           busyboxImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"sh", "-c", script},
			}},
		},
	}
}

func createPod(ctx context.Context, namespace string, pod *corev1.Pod) {
	_, err := env.client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred(), "creating pod %s/%s", namespace, pod.Name)
}

func terminated(statuses []corev1.ContainerStatus, name string) *corev1.ContainerStateTerminated {
	for _, s := range statuses {
		if s.Name == name {
			return s.State.Terminated
		}
	}
	return nil
}
