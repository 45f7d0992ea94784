package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/sidecar"
	"github.com/porter-ci/porter/pkg/sidecar/controlpb"
	"github.com/porter-ci/porter/pkg/sidecar/entrypoint"
)

// simulator plays the kubelet's part that kwok does not: for every step pod
// kwok reports running, it runs the real sidecar (pkg/sidecar, over
// gRPC+TLS to the server, the real blobstore) configured from the pod's
// declared environment and Secret, and the real entrypoint logic with a
// process that prints lines, holds and exits 0.
type simulator struct {
	kube  kubernetes.Interface
	ns    string
	dir   string
	hold  time.Duration
	lines int
	log   *slog.Logger

	mu      sync.Mutex
	pods    map[types.UID]*simPod
	seen    map[types.UID]time.Time // first seen by the informer: about the pod's creation
	started []startRecord
	wg      sync.WaitGroup
	running atomic.Int64
	peak    atomic.Int64
	failed  atomic.Int64
	nextID  atomic.Int64
}

type simPod struct {
	cancel context.CancelFunc
}

// startRecord: a step's process was started, latency after its pod appeared.
type startRecord struct {
	at      time.Time
	latency time.Duration
}

func newSimulator(kube kubernetes.Interface, ns, dir string, hold time.Duration, lines int, verbose bool) *simulator {
	var logTo io.Writer = io.Discard
	if verbose {
		logTo = os.Stderr
	}
	return &simulator{kube: kube, ns: ns, dir: dir, hold: hold, lines: lines,
		log:  slog.New(slog.NewTextHandler(logTo, &slog.HandlerOptions{Level: slog.LevelDebug})),
		pods: map[types.UID]*simPod{}, seen: map[types.UID]time.Time{}}
}

// run watches the namespace's pods until ctx ends, then waits for every
// simulated pod to stop.
func (s *simulator) run(ctx context.Context) error {
	f := informers.NewSharedInformerFactoryWithOptions(s.kube, 0, informers.WithNamespace(s.ns))
	inf := f.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.observe(ctx, obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { s.observe(ctx, obj.(*corev1.Pod)) },
		DeleteFunc: func(obj any) {
			if p, ok := obj.(*corev1.Pod); ok {
				s.forget(p.UID)
			} else if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				if p, ok := t.Obj.(*corev1.Pod); ok {
					s.forget(p.UID)
				}
			}
		},
	})
	if err != nil {
		return err
	}
	f.Start(ctx.Done())
	<-ctx.Done()
	f.Shutdown()
	s.wg.Wait()
	return nil
}

func (s *simulator) observe(ctx context.Context, p *corev1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen[p.UID]; !ok {
		s.seen[p.UID] = time.Now()
	}
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || s.pods[p.UID] != nil {
		return
	}
	podCtx, cancel := context.WithCancel(ctx)
	s.pods[p.UID] = &simPod{cancel: cancel}
	seen := s.seen[p.UID]
	s.wg.Go(func() {
		defer cancel()
		if err := s.simulate(podCtx, p.DeepCopy(), seen); err != nil && podCtx.Err() == nil {
			s.failed.Add(1)
			fmt.Fprintf(os.Stderr, "bench-scale: pod %s: %v\n", p.Name, err)
		}
	})
}

func (s *simulator) forget(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sp := s.pods[uid]; sp != nil {
		sp.cancel()
	}
	delete(s.pods, uid)
}

// env is the declared environment of one of the pod's containers, with
// the Secret references resolved as the kubelet would.
func (s *simulator) env(ctx context.Context, p *corev1.Pod, c *corev1.Container) (map[string]string, error) {
	out := map[string]string{}
	secrets := map[string]*corev1.Secret{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			out[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			sec, ok := secrets[ref.Name]
			if !ok {
				var err error
				if sec, err = s.kube.CoreV1().Secrets(p.Namespace).Get(ctx, ref.Name, metav1.GetOptions{}); err != nil {
					return nil, fmt.Errorf("secret %s: %w", ref.Name, err)
				}
				secrets[ref.Name] = sec
			}
			out[e.Name] = string(sec.Data[ref.Key])
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			out[e.Name] = p.Name
		}
	}
	return out, nil
}

func findContainer(p *corev1.Pod, name string) *corev1.Container {
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i]
			}
		}
	}
	return nil
}

func (s *simulator) simulate(ctx context.Context, p *corev1.Pod, seen time.Time) error {
	sc := findContainer(p, podspec.SidecarContainerName)
	step := findContainer(p, podspec.StepContainerName)
	if sc == nil || step == nil {
		return fmt.Errorf("no %s or %s container", podspec.SidecarContainerName, podspec.StepContainerName)
	}
	env, err := s.env(ctx, p, sc)
	if err != nil {
		return err
	}
	dir := filepath.Join(s.dir, fmt.Sprint(s.nextID.Add(1)))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	env["PORTER_SOCKET"] = filepath.Join(dir, "c.sock")
	env["PORTER_JOURNAL_DIR"] = filepath.Join(dir, "journal")
	env["PORTER_POD_NAME"] = p.Name
	// A secret stdin is a file of the Secret's volume in a real pod.
	delete(env, "PORTER_STDIN_FILE")
	cfg, err := sidecar.LoadConfig(ctx, func(k string) string { return env[k] }, s.log)
	if err != nil {
		return err
	}
	// The step container runs `porter entrypoint [flags] -- ARGV...`.
	argv := append(slices.Clone(step.Command), step.Args...)
	if i := slices.Index(argv, "--"); i >= 0 {
		argv = argv[i+1:]
	}
	if len(argv) == 0 {
		return fmt.Errorf("step container declares no command: %v %v", step.Command, step.Args)
	}
	ep := entrypoint.NewEntrypointer(entrypoint.EntrypointConfig{SocketPath: cfg.SocketPath, Argv: argv, Log: s.log},
		entrypoint.SocketWaiter(cfg.SocketPath), runner{s: s, seen: seen})
	var wg sync.WaitGroup
	wg.Go(func() { ep.Run(ctx) })
	_, err = sidecar.Run(ctx, cfg)
	wg.Wait()
	return err
}

// runner starts a simulated process: it prints s.lines lines, holds for
// s.hold and exits 0, or 143 when stopped.
type runner struct {
	s    *simulator
	seen time.Time
}

func (r runner) Start(_ []string, _ *controlpb.Start, out entrypoint.OutputFunc) (entrypoint.Process, error) {
	s := r.s
	now := time.Now()
	s.mu.Lock()
	s.started = append(s.started, startRecord{at: now, latency: now.Sub(r.seen)})
	s.mu.Unlock()
	n := s.running.Add(1)
	for {
		peak := s.peak.Load()
		if n <= peak || s.peak.CompareAndSwap(peak, n) {
			break
		}
	}
	p := &process{done: make(chan struct{}), stop: make(chan entrypoint.StopReason, 1)}
	go func() {
		defer s.running.Add(-1)
		for i := range s.lines {
			out(eventspb.Stream_STREAM_STDOUT, fmt.Appendf(nil, "simulated line %d\n", i+1))
		}
		select {
		case <-time.After(s.hold):
			p.end(&controlpb.Exited{ExitStatus: 0})
		case why := <-p.stop:
			p.end(&controlpb.Exited{ExitStatus: 143, Signal: "terminated", Aborted: why == entrypoint.StopAborted, TimedOut: why == entrypoint.StopTimedOut})
		}
	}()
	return p, nil
}

type process struct {
	done   chan struct{}
	stop   chan entrypoint.StopReason
	exited *controlpb.Exited
	once   sync.Once
}

func (p *process) Done() <-chan struct{}     { return p.done }
func (p *process) Exited() *controlpb.Exited { <-p.done; return p.exited }
func (p *process) end(e *controlpb.Exited) {
	p.once.Do(func() { p.exited = e; close(p.done) })
}

func (p *process) Stop(_ time.Duration, why entrypoint.StopReason) {
	select {
	case p.stop <- why:
	default:
	}
}
