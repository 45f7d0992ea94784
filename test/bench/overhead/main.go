// Command overhead measures what Porter adds to a step on the local cluster:
// the median, over N runs, of a `true` task run as a build (create build →
// build finished, through the ATC, the step pod, the sidecar and the event
// stream) next to a bare busybox pod running `true` (create → Succeeded).
// It prints figures and never fails on timing.
//
//	go run ./test/bench/overhead [-n 20]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atc"
	"github.com/porter-ci/porter/pkg/atcclient"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/test/testenv"
)

func main() {
	n := flag.Int("n", 20, "runs of each")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *n); err != nil {
		fmt.Fprintln(os.Stderr, "bench-overhead:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, n int) error {
	env, err := testenv.ClusterEnv()
	if err != nil {
		return err
	}
	cfg, err := testenv.AdminConfig(ctx, testenv.KubeconfigPath())
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ns, err := testenv.CreateNamespace(ctx, kube, "porter-bench-")
	if err != nil {
		return err
	}
	defer kube.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), ns, metav1.DeleteOptions{})
	state, err := os.MkdirTemp("", "porter-bench-atc-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)

	grpcAddr, err := testenv.FreeAddr(env["PORTER_CLUSTER_NODE_IP"])
	if err != nil {
		return err
	}
	httpAddr, err := testenv.FreeAddr("127.0.0.1")
	if err != nil {
		return err
	}
	srv, err := atc.New(ctx, atc.Config{
		Namespace: ns, Worker: "bench", GRPCListen: grpcAddr, HTTPListen: httpAddr, StateDir: state,
		PorterImage: "porter.local/porter:dev", NativeSidecars: true, DNSPolicy: corev1.DNSDefault,
		ImagePullPolicy: corev1.PullIfNotPresent, PodRetention: time.Minute,
		Blobstore: blobstore.Config{Driver: "minio", Endpoint: env["PORTER_CLUSTER_MINIO_ENDPOINT"], Bucket: ns,
			Region: env["PORTER_CLUSTER_MINIO_REGION"], AccessKey: env["PORTER_CLUSTER_MINIO_ACCESS_KEY"], SecretKey: env["PORTER_CLUSTER_MINIO_SECRET_KEY"]},
	}, kube, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	srvCtx, stopSrv := context.WithCancel(ctx)
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Run(srvCtx) }()
	defer func() { stopSrv(); <-srvDone }()
	client, err := atcclient.New("http://" + httpAddr)
	if err != nil {
		return err
	}
	if err := waitHealthy(ctx, client); err != nil {
		return err
	}

	task := "platform: linux\nimage_resource: {type: registry-image, source: {repository: busybox}}\nrun: {path: \"true\"}\n"
	var porter, porterPod, bare []time.Duration
	for i := range n {
		d, podDone, err := timeBuild(ctx, client, kube, ns, task)
		if err != nil {
			return fmt.Errorf("build %d: %w", i+1, err)
		}
		porter, porterPod = append(porter, d), append(porterPod, podDone)
		d, err = timeBarePod(ctx, kube, ns, i)
		if err != nil {
			return fmt.Errorf("bare pod %d: %w", i+1, err)
		}
		bare = append(bare, d)
	}
	mp, mpp, mb := median(porter), median(porterPod), median(bare)
	line := func(what string, ds []time.Duration) {
		fmt.Printf("  %-52s median %6s  (min %s, max %s)\n", what, median(ds).Round(time.Millisecond),
			slices.Min(ds).Round(time.Millisecond), slices.Max(ds).Round(time.Millisecond))
	}
	fmt.Printf("step overhead, %d runs each (alternating), local single-node cluster\n", n)
	line("porter task `true`: create build → build finished", porter)
	line("porter task `true`: create build → step pod Succeeded", porterPod)
	line("bare pod `true`:    create pod → Succeeded", bare)
	fmt.Printf("  overhead, pod to pod (difference of medians): %s; as a person sees it (build finished vs bare pod): %s\n",
		(mpp - mb).Round(time.Millisecond), (mp - mb).Round(time.Millisecond))
	return nil
}

func waitHealthy(ctx context.Context, c *atcclient.Client) error {
	for range 100 {
		if _, err := c.Builds(ctx); err == nil {
			return nil
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return errors.New("ATC did not start")
}

// timeBuild runs one build and times it to the end of its event stream and
// to its step pod's Succeeded.
func timeBuild(ctx context.Context, c *atcclient.Client, kube kubernetes.Interface, ns, task string) (time.Duration, time.Duration, error) {
	start := time.Now()
	b, err := c.CreateBuild(ctx, api.CreateBuildRequest{Task: api.TaskStep{Config: task}})
	if err != nil {
		return 0, 0, err
	}
	podDone := make(chan error, 1)
	var podTook time.Duration
	go func() {
		err := waitSucceeded(ctx, kube, ns, b.Steps[0].Pod)
		podTook = time.Since(start)
		podDone <- err
	}()
	stream, err := c.Events(ctx, b.ID, "")
	if err != nil {
		return 0, 0, err
	}
	defer stream.Close()
	for {
		if _, _, err := stream.Next(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return 0, 0, err
		}
	}
	took := time.Since(start)
	if b, err = c.Build(ctx, b.ID); err != nil {
		return 0, 0, err
	}
	if b.Status != api.StatusSucceeded {
		return 0, 0, fmt.Errorf("build %d %s: %+v", b.ID, b.Status, b.Steps)
	}
	if err := <-podDone; err != nil {
		return 0, 0, err
	}
	return took, podTook, nil
}

// timeBarePod creates a busybox pod running `true` and waits, with a watch,
// for it to succeed.
func timeBarePod(ctx context.Context, kube kubernetes.Interface, ns string, i int) (time.Duration, error) {
	name := fmt.Sprintf("bare-true-%d", i)
	start := time.Now()
	no := false
	_, err := kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: &no, EnableServiceLinks: &no, DNSPolicy: corev1.DNSDefault,
		Containers: []corev1.Container{{Name: "main", Image: "busybox", ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"true"}}},
	}}, metav1.CreateOptions{})
	if err != nil {
		return 0, err
	}
	err = waitSucceeded(ctx, kube, ns, name)
	return time.Since(start), err
}

// waitSucceeded watches a pod (from a list, so an already finished one
// counts) until it has succeeded.
func waitSucceeded(ctx context.Context, kube kubernetes.Interface, ns, name string) error {
	pods := kube.CoreV1().Pods(ns)
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return pods.List(ctx, o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return pods.Watch(ctx, o)
		},
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	_, err := watchtools.UntilWithSync(wctx, lw, &corev1.Pod{}, nil, func(ev watch.Event) (bool, error) {
		pod, ok := ev.Object.(*corev1.Pod)
		if !ok {
			return false, nil
		}
		if pod.Status.Phase == corev1.PodFailed {
			return false, fmt.Errorf("pod %s failed", name)
		}
		return pod.Status.Phase == corev1.PodSucceeded, nil
	})
	return err
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
