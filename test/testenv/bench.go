package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// BenchServer is what a benchmark measures against: a server of its own
// (own namespace and database) on the local cluster, and a fly logged in to
// it as user bench, target "bench", with its own HOME.
type BenchServer struct {
	Env    *ATCEnv
	NS     WorkerNamespace
	Server *ATC
	Fly    *Fly
	// Home is fly's HOME (Porter's CLI shares its ~/.flyrc).
	Home string

	cleanups []func(context.Context) error
}

// StartBenchServer starts a BenchServer under dir; its namespace is named
// after prefix. Close undoes it all, also after a failed start.
func StartBenchServer(ctx context.Context, dir, prefix string) (*BenchServer, error) {
	env, err := NewATCEnv(ctx, dir)
	if err != nil {
		return nil, err
	}
	b := &BenchServer{Env: env}
	fail := func(err error) (*BenchServer, error) {
		return nil, errors.Join(err, b.Close(context.WithoutCancel(ctx)))
	}
	ns, removeNS, err := env.NewWorkerNamespace(ctx, prefix)
	b.NS = ns
	if removeNS != nil {
		b.cleanups = append(b.cleanups, removeNS)
	}
	if err != nil {
		return fail(err)
	}
	dsn, dropDB, err := env.NewDatabase(ctx)
	if err != nil {
		return fail(err)
	}
	b.cleanups = append(b.cleanups, dropDB)
	srv, err := env.NewATC(ATCConfig{Worker: ns, WorkerName: "bench", Database: dsn,
		LocalUsers: []string{"bench:bench"}, MainTeamUsers: []string{"bench"}, PodRetention: time.Minute})
	if err != nil {
		return fail(err)
	}
	if err := srv.Start(ctx); err != nil {
		return fail(err)
	}
	b.Server = srv
	b.cleanups = append(b.cleanups, func(context.Context) error { return srv.Stop() })
	flyBin, err := FindFly()
	if err != nil {
		return fail(err)
	}
	b.Home = filepath.Join(dir, "home")
	if err := os.MkdirAll(b.Home, 0o700); err != nil {
		return fail(err)
	}
	b.Fly = NewFly(flyBin, b.Home, "bench")
	if res, err := b.Fly.Login(ctx, srv.URL(), "bench", "bench"); err != nil || res.ExitCode != 0 {
		return fail(fmt.Errorf("fly login: %v %s", err, res))
	}
	return b, nil
}

// Close stops the server and removes its database and namespace.
func (b *BenchServer) Close(ctx context.Context) error {
	var errs []error
	for i := len(b.cleanups) - 1; i >= 0; i-- {
		errs = append(errs, b.cleanups[i](ctx))
	}
	b.cleanups = nil
	return errors.Join(errs...)
}

// RunBarePod is the baseline benchmarks compare a step with: a busybox pod
// running `true`, created and watched (from a list, so an already finished
// one counts) until it has succeeded.
func RunBarePod(ctx context.Context, kube kubernetes.Interface, ns, name string) error {
	no := false
	pods := kube.CoreV1().Pods(ns)
	if _, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: &no, EnableServiceLinks: &no, DNSPolicy: corev1.DNSDefault,
		Containers: []corev1.Container{{Name: "main", Image: "busybox", ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"true"}}},
	}}, metav1.CreateOptions{}); err != nil {
		return err
	}
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

// Median is the middle of ds (the upper one of an even count).
func Median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
