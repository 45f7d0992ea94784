package atc

// The server's observability: Prometheus metrics, OpenTelemetry spans,
// Kubernetes Events on failed step pods and the ops HTTP listener
// (/metrics, /livez, /readyz). The rest of the package calls in here with
// one-line hooks.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	corev1 "k8s.io/api/core/v1"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atc/exec"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/atc/kuberuntime"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/metrics"
	"github.com/porter-ci/porter/pkg/podevents"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/podwatch"
	"github.com/porter-ci/porter/pkg/telemetry"
)

// observability is the server's share of it. The zero value records
// nothing (nil metrics, no-op tracer) and reports not ready.
type observability struct {
	metrics *metrics.Metrics
	tracer  trace.Tracer
	// ready is set once the server has registered its worker and resumed
	// its builds (/readyz).
	ready atomic.Bool
}

// StartTracing exports the server's spans when OTEL_EXPORTER_OTLP_ENDPOINT
// is set; the returned func flushes them.
func StartTracing(ctx context.Context, log *slog.Logger) (trace.TracerProvider, func()) {
	t, err := telemetry.TracingFromEnv(ctx, "atc-porter-runtime")
	if err != nil {
		log.Warn("no traces", "err", err)
		t = telemetry.Noop()
	}
	return t.Provider, func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := t.Shutdown(ctx); err != nil {
			log.Warn("flush spans", "err", err)
		}
	}
}

// observe takes the server's metrics and tracer from its dependencies.
func (s *Server) observe(deps Deps) {
	s.obs.metrics = deps.Metrics
	tp := deps.Tracing
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	s.obs.tracer = tp.Tracer("github.com/porter-ci/porter/pkg/atc")
	s.obs.metrics.StreamsConnected(s.streams.ConnectedCount)
}

// startOps serves the ops endpoints until ctx ends or the returned stop is
// called; stop waits for the listener to close. Without an address it
// serves nothing.
func (s *Server) startOps(ctx context.Context) (stop func(), err error) {
	if s.cfg.OpsListen == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", s.cfg.OpsListen)
	if err != nil {
		return nil, fmt.Errorf("listen for the ops endpoints on %s: %w", s.cfg.OpsListen, err)
	}
	hs := &http.Server{Handler: s.opsRoutes(), ReadHeaderTimeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		served := make(chan error, 1)
		go func() { served <- hs.Serve(ln) }()
		select {
		case err := <-served:
			// A dead listener stops the server (Run), which then exits non-zero.
			s.log.Error("ops endpoints stopped", "addr", ln.Addr().String(), "err", err)
			if s.listenerDied != nil {
				s.listenerDied <- fmt.Errorf("serve the ops endpoints on %s: %w", ln.Addr(), err)
			}
			return
		case <-ctx.Done():
		}
		shutdown, cancelShutdown := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancelShutdown()
		_ = hs.Shutdown(shutdown)
		<-served
	}()
	s.log.Info("ops endpoints", "addr", ln.Addr().String())
	return func() { cancel(); <-done }, nil
}

func (s *Server) opsRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.obs.metrics.Handler())
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !s.obs.ready.Load() {
			http.Error(w, "not ready: registering the worker and resuming builds", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		if err := s.db.Ping(ctx); err != nil {
			http.Error(w, "not ready: database: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// setReady marks the server ready for /readyz.
func (s *Server) setReady() { s.obs.ready.Store(true) }

// observeBuildStart counts a build that starts running and opens its span
// (the root of the build's trace); the span ends with the build's run.
func (s *Server) observeBuildStart(ctx context.Context, b *buildstate.Build) (context.Context, trace.Span) {
	s.obs.metrics.BuildStarted()
	if s.obs.tracer == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	return s.obs.tracer.Start(ctx, "build "+b.Name, trace.WithNewRoot(), trace.WithAttributes(
		attribute.Int64("porter.build.id", b.ID), attribute.String("porter.build.name", b.Name),
		attribute.String("porter.team", b.Team), attribute.String("porter.pipeline", b.Pipeline), attribute.String("porter.job", b.Job)))
}

// buildFinished counts a build's end and records its status on its span.
func (s *Server) buildFinished(ctx context.Context, status concourse.BuildStatus) {
	s.obs.metrics.BuildFinished(string(status))
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(attribute.String("porter.build.status", string(status)))
	if status != concourse.StatusSucceeded {
		span.SetStatus(codes.Error, string(status))
	}
}

// podTimingsWait bounds how long a finished step's pod status is awaited
// for its start times: the kubelet reports a container's start in a status
// update that can arrive after the sidecar has reported the step's end.
const podTimingsWait = 10 * time.Second

// observePod records, once a step's supervision is over, how long its pod
// took to be scheduled and to start the step's container (image pull), as
// metrics, as spans under the step's and in the step's audit record
// (timeline.json), as soon as the pod's status shows them (in the
// background, for at most podTimingsWait); and drops the step's phase clock
// (a sidecar that never reported its end leaves one).
func (s *Server) observePod(ctx context.Context, w *kuberuntime.Worker, st *exec.StepState) {
	stepID := st.ID()
	s.obs.metrics.ForgetStep(stepID)
	s.mu.Lock()
	queued := s.queued[stepID]
	s.mu.Unlock()
	s.runs.Add(1)
	go func() {
		defer s.runs.Done()
		giveUp := time.After(podTimingsWait)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			pod, ok := w.Pod(stepID)
			if !ok {
				// Deleted (a failed step's pod): only the server's own moment is known.
				s.writeTimeline(ctx, st, queued, nil, podwatch.Timings{})
				return
			}
			t := podwatch.PodTimings(pod)
			if !t.StepStarted.IsZero() {
				s.recordPodTimings(ctx, pod, t)
				s.writeTimeline(ctx, st, queued, pod, t)
				return
			}
			select {
			case <-giveUp:
				s.recordPodTimings(ctx, pod, t)
				s.writeTimeline(ctx, st, queued, pod, t)
				return
			case <-s.shutdownCtx().Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// writeTimeline records the step pod's start in the step's audit record,
// where the build page reads it after the pod is gone. A check pod's
// steps belong to no build's audit trail.
func (s *Server) writeTimeline(ctx context.Context, st *exec.StepState, queued time.Time, pod *corev1.Pod, t podwatch.Timings) {
	if podspec.IsCheckPod(st.ID()) || st.Build() == nil {
		return
	}
	tl := api.PodTimeline{StepID: st.ID(), Queued: queued, PodCreated: t.Created, Scheduled: t.Scheduled,
		Initialized: t.Initialized, StepContainerStarted: t.StepStarted}
	if pod != nil {
		tl.Node = pod.Spec.NodeName
	}
	if !t.Created.IsZero() && queued.After(t.Created.Add(time.Second)) {
		// Registered again by a server that resumed the step (the pod's
		// creation time is truncated to the second).
		tl.Queued = time.Time{}
	}
	body, err := json.MarshalIndent(tl, "", "  ")
	if err == nil {
		key := blobstore.StepPrefix(st.Build().AuditID(), st.ID()) + blobstore.TimelineObject
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, err = s.auditStore().Put(ctx, key, bytes.NewReader(body), int64(len(body)),
			blobstore.PutOptions{ContentType: "application/json", IfAbsent: true})
	}
	if err != nil && !errors.Is(err, blobstore.ErrExists) {
		s.log.Warn("audit the step pod's timeline", "step", st.ID(), "err", err)
	}
}

// recordPodTimings records the phases t knows of.
func (s *Server) recordPodTimings(ctx context.Context, pod *corev1.Pod, t podwatch.Timings) {
	phases := []struct {
		name       string
		from, to   time.Time
		d          time.Duration
		metricName string
	}{
		{"pod scheduling", t.Created, t.Scheduled, t.Scheduling(), metrics.PhaseScheduling},
		{"pod image pull", laterOf(t.Initialized, t.Scheduled), t.StepStarted, t.ImagePull(), metrics.PhaseImagePull},
	}
	for _, ph := range phases {
		if ph.from.IsZero() || ph.to.IsZero() {
			continue
		}
		s.obs.metrics.StepPhase(ph.metricName, ph.d)
		if s.obs.tracer != nil {
			_, span := s.obs.tracer.Start(ctx, ph.name, trace.WithTimestamp(ph.from),
				trace.WithAttributes(attribute.String("k8s.pod.name", pod.Name), attribute.String("k8s.namespace.name", pod.Namespace)))
			span.End(trace.WithTimestamp(ph.to))
		}
	}
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// podFailed records a step that failed because of its pod: the failure by
// kind in metrics and on the step's span, and a Warning Event on the pod
// (made with the step's worker's client, in its namespace) so that kubectl
// shows why Porter gave up on it.
func (s *Server) podFailed(ctx context.Context, st *exec.StepState, err error) {
	w := kubeWorker(st.Worker())
	s.obs.metrics.ForgetStep(st.ID())
	f, ok := podwatch.AsFailure(err)
	if !ok {
		return
	}
	s.obs.metrics.PodFailure(string(f.Kind))
	trace.SpanFromContext(ctx).AddEvent("pod failed", trace.WithAttributes(
		attribute.String("porter.pod_failure.kind", string(f.Kind)), attribute.String("porter.pod_failure.reason", f.Reason)))
	ref := podevents.Pod{Namespace: w.Namespace(), Name: podspec.Name(st.ID())}
	step := string(st.PlanID())
	if pod, ok := w.Pod(st.ID()); ok {
		ref.UID = pod.UID
		if name := pod.Annotations[podspec.AnnotationStepName]; name != "" {
			step = name
		}
	}
	b := st.Build()
	msg := fmt.Sprintf("build %d (%s/%s) step %q failed: %s (%s)", b.ID, b.Team, buildLabel(b), step, f.Detail, f.Kind)
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	rec := podevents.Recorder{Client: w.Kube(), Host: s.cfg.ServerID}
	if err := rec.Warning(ectx, ref, podevents.ReasonStepFailed, msg); err != nil {
		s.log.Warn("record the step's failure on its pod", "step", st.ID(), "err", err)
	}
}

// buildLabel is how people name a build: pipeline/job #name, or #name for a
// one-off.
func buildLabel(b *buildstate.Build) string {
	if b.Pipeline != "" {
		return b.Pipeline + "/" + b.Job + " #" + b.Name
	}
	return "#" + b.Name
}
