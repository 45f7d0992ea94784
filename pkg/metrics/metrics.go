// Package metrics is the ATC's Prometheus metrics: one registry per server
// (never the global one, so two servers in one process or test do not
// collide), and typed methods for what the server observes.
//
// A nil *Metrics is valid and records nothing: code paths and tests without
// metrics call the same methods without a guard.
package metrics

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events/eventspb"
)

// Step phases (the phase label of porter_step_phase_seconds).
const (
	PhaseScheduling = "scheduling"
	PhaseImagePull  = "image_pull"
	PhaseInputs     = "inputs"
	PhaseRun        = "run"
	PhaseOutputs    = "outputs"
)

// Artifact transfer directions.
const (
	Download = "download"
	Upload   = "upload"
)

// Metrics holds the server's collectors.
type Metrics struct {
	reg *prometheus.Registry

	buildsStarted    prometheus.Counter
	buildsFinished   *prometheus.CounterVec
	stepPhase        *prometheus.HistogramVec
	podFailures      *prometheus.CounterVec
	artifactBytes    *prometheus.CounterVec
	artifactSeconds  *prometheus.CounterVec
	artifactRate     *prometheus.HistogramVec
	events           prometheus.Counter
	gcReclaimed      *prometheus.CounterVec
	gcReclaimedBytes *prometheus.CounterVec
	workerState      *prometheus.GaugeVec
	keptPods         *prometheus.GaugeVec
	keptPodsWorker   *prometheus.GaugeVec
	capacityWaits    prometheus.Counter
	podsAhead        *prometheus.CounterVec

	mu sync.Mutex
	// steps are the sidecar phase clocks of steps whose end has not been
	// seen yet (see SidecarEvents).
	steps map[string]*stepClock
	// workerStates remembers each worker's current state so that the gauge
	// shows one state at 1 and the others at 0.
	workerStates map[string]concourse.WorkerState
}

// New returns metrics registered in a registry of their own, with the Go
// runtime and process collectors.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	m := &Metrics{reg: reg, steps: map[string]*stepClock{}, workerStates: map[string]concourse.WorkerState{}}
	m.buildsStarted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "porter_builds_started_total", Help: "Builds started by this server (a build resumed after a restart counts again).",
	})
	m.buildsFinished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "porter_builds_finished_total", Help: "Builds finished, by status.",
	}, []string{"status"})
	m.stepPhase = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "porter_step_phase_seconds",
		Help:    "Time step pods spend in each phase: scheduling, image_pull (pod initialized to step container started), inputs, run, outputs.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600},
	}, []string{"phase"})
	m.podFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "porter_pod_failures_total", Help: "Steps that failed because of their pod, by podwatch kind (Image, OOMKilled, Unschedulable, Deleted, ...).",
	}, []string{"kind"})
	m.artifactBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "porter_artifact_bytes_total", Help: "Artifact bytes moved by step pods, by direction (download: inputs, upload: outputs).",
	}, []string{"direction"})
	m.artifactSeconds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "porter_artifact_transfer_seconds_total", Help: "Time step pods spent moving artifacts, by direction; bytes_total / seconds_total is the throughput.",
	}, []string{"direction"})
	m.artifactRate = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "porter_artifact_transfer_mbps",
		Help:    "Throughput of a step's artifact transfers in MB/s (10^6 bytes), by direction.",
		Buckets: []float64{0.1, 0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000},
	}, []string{"direction"})
	m.events = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "porter_sidecar_events_total", Help: "Events received from sidecars (rate() gives events/s).",
	})
	m.gcReclaimed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "porter_gc_reclaimed_total", Help: "Objects garbage-collected, by kind.",
	}, []string{"kind"})
	m.gcReclaimedBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "porter_gc_reclaimed_bytes_total", Help: "Bytes garbage-collected, by kind.",
	}, []string{"kind"})
	m.workerState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "porter_worker_state", Help: "1 for each worker's current state (running, stalled, landing, landed, retiring).",
	}, []string{"worker", "state"})
	m.keptPods = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "porter_kept_pods", Help: "Pods of finished steps that garbage collection keeps, by reason (latest-check, latest-failed-build, one-off, intercepted, retention), at its last pass.",
	}, []string{"reason"})
	m.keptPodsWorker = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "porter_kept_pods_by_worker", Help: "Pods of finished steps kept on each worker at garbage collection's last pass (at most --gc-max-kept-pods-per-worker).",
	}, []string{"worker"})
	m.capacityWaits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "porter_step_capacity_waits_total", Help: "Step pods that waited because the cluster could not place them yet (Unschedulable).",
	})
	m.podsAhead = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "porter_pods_ahead_total", Help: "Task and put pods declared ahead of their turn (--lookahead), by what became of them: started (given the go-ahead), withdrawn (the task was not to run, or its inputs changed), failed (the declaration failed; the task declared its pod at its turn), over_share (not declared: its worker held --lookahead-per-worker such pods), freed (deleted to make room for a running step, or lost, before its turn; the task declared its pod at its turn).",
	}, []string{"outcome"})
	for _, c := range []prometheus.Collector{m.buildsStarted, m.buildsFinished, m.stepPhase, m.podFailures,
		m.artifactBytes, m.artifactSeconds, m.artifactRate, m.events, m.gcReclaimed, m.gcReclaimedBytes, m.workerState,
		m.keptPods, m.keptPodsWorker, m.capacityWaits, m.podsAhead,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		f(c)
	}
	return m
}

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	if m == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registry is for tests and for collectors registered elsewhere.
func (m *Metrics) Registry() *prometheus.Registry {
	if m == nil {
		return nil
	}
	return m.reg
}

// StreamsConnected publishes n() as porter_sidecar_streams_connected,
// read at each scrape (the step server knows its connections; nothing is
// copied).
func (m *Metrics) StreamsConnected(n func() int) {
	if m == nil {
		return
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "porter_sidecar_streams_connected", Help: "Sidecars connected to this server now.",
	}, func() float64 { return float64(n()) }))
}

// BuildStarted counts a build this server starts running.
func (m *Metrics) BuildStarted() {
	if m == nil {
		return
	}
	m.buildsStarted.Inc()
}

// BuildFinished counts a build's end by its status.
func (m *Metrics) BuildFinished(status string) {
	if m == nil {
		return
	}
	m.buildsFinished.WithLabelValues(status).Inc()
}

// StepPhase records how long a step spent in a phase.
func (m *Metrics) StepPhase(phase string, d time.Duration) {
	if m == nil || d < 0 {
		return
	}
	m.stepPhase.WithLabelValues(phase).Observe(d.Seconds())
}

// PodFailure counts a step that failed because of its pod.
func (m *Metrics) PodFailure(kind string) {
	if m == nil {
		return
	}
	m.podFailures.WithLabelValues(kind).Inc()
}

// ArtifactBytes records bytes moved in one direction in d.
func (m *Metrics) ArtifactBytes(direction string, bytes int64, d time.Duration) {
	if m == nil {
		return
	}
	m.artifact(direction, bytes, d)
}

// Events counts n events received from sidecars.
func (m *Metrics) Events(n int) {
	if m == nil {
		return
	}
	m.events.Add(float64(n))
}

// GCReclaimed counts what a garbage collection pass removed, by kind
// (pods, artifacts, staging, ...).
func (m *Metrics) GCReclaimed(kind string, count int, bytes int64) {
	if m == nil {
		return
	}
	m.gcReclaimed.WithLabelValues(kind).Add(float64(count))
	if bytes > 0 {
		m.gcReclaimedBytes.WithLabelValues(kind).Add(float64(bytes))
	}
}

// KeptPods sets the kept pods gauges from a garbage collection pass: by
// reason (every reason present, 0 included) and by worker.
func (m *Metrics) KeptPods(byReason, byWorker map[string]int) {
	if m == nil {
		return
	}
	for r, n := range byReason {
		m.keptPods.WithLabelValues(r).Set(float64(n))
	}
	m.keptPodsWorker.Reset()
	for w, n := range byWorker {
		m.keptPodsWorker.WithLabelValues(w).Set(float64(n))
	}
}

// PodAhead counts a task pod declared ahead of its turn by its outcome
// (started, withdrawn, failed).
func (m *Metrics) PodAhead(outcome string) {
	if m == nil {
		return
	}
	m.podsAhead.WithLabelValues(outcome).Inc()
}

// CapacityWait counts a step pod that waits for room on its worker.
func (m *Metrics) CapacityWait() {
	if m == nil {
		return
	}
	m.capacityWaits.Inc()
}

// WorkerState sets a worker's current state; its previous state drops to 0.
// An empty state forgets the worker (pruned).
func (m *Metrics) WorkerState(worker string, state concourse.WorkerState) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if prev, ok := m.workerStates[worker]; ok && prev != state {
		m.workerState.DeleteLabelValues(worker, string(prev))
	}
	if state == "" {
		delete(m.workerStates, worker)
		return
	}
	m.workerStates[worker] = state
	m.workerState.WithLabelValues(worker, string(state)).Set(1)
}

// stepClock follows one step's sidecar status changes.
type stepClock struct {
	status   eventspb.StepStatus
	since    time.Time
	inBytes  int64
	outBytes int64
}

// SidecarEvents counts a step's events and derives its sidecar phases
// (inputs, run, outputs) and transfer throughput from the status changes'
// timestamps, which the sidecar sets: the server's receive time would
// include reconnects and batching.
func (m *Metrics) SidecarEvents(stepID string, evs []*eventspb.Event) {
	if m == nil || len(evs) == 0 {
		return
	}
	m.events.Add(float64(len(evs)))
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.steps[stepID]
	if c == nil {
		c = &stepClock{}
		m.steps[stepID] = c
	}
	for _, ev := range evs {
		switch {
		case ev.GetInputFetched() != nil:
			c.inBytes += ev.GetInputFetched().GetSize()
		case ev.GetOutputUploaded() != nil:
			c.outBytes += ev.GetOutputUploaded().GetSize()
		case ev.GetStatus() != nil:
			m.phaseEnds(c, ev.GetStatus().GetStatus(), ev.GetTime().AsTime())
		case ev.GetStepFinished() != nil:
			m.phaseEnds(c, eventspb.StepStatus_STEP_STATUS_FINISHED, ev.GetTime().AsTime())
			delete(m.steps, stepID)
		}
	}
}

// phaseEnds closes the phase c was in when the step moved to next at t.
// Called with m.mu held.
func (m *Metrics) phaseEnds(c *stepClock, next eventspb.StepStatus, t time.Time) {
	if c.status == next {
		return
	}
	d := t.Sub(c.since)
	if !c.since.IsZero() {
		switch c.status {
		case eventspb.StepStatus_STEP_STATUS_FETCHING_INPUTS:
			m.stepPhase.WithLabelValues(PhaseInputs).Observe(d.Seconds())
			m.artifact(Download, c.inBytes, d)
		case eventspb.StepStatus_STEP_STATUS_RUNNING:
			m.stepPhase.WithLabelValues(PhaseRun).Observe(d.Seconds())
		case eventspb.StepStatus_STEP_STATUS_UPLOADING_OUTPUTS:
			m.stepPhase.WithLabelValues(PhaseOutputs).Observe(d.Seconds())
			m.artifact(Upload, c.outBytes, d)
		}
	}
	c.status, c.since = next, t
}

// artifact needs no lock: collectors are safe for concurrent use.
func (m *Metrics) artifact(direction string, bytes int64, d time.Duration) {
	if bytes <= 0 {
		return
	}
	m.artifactBytes.WithLabelValues(direction).Add(float64(bytes))
	if d > 0 {
		m.artifactSeconds.WithLabelValues(direction).Add(d.Seconds())
		m.artifactRate.WithLabelValues(direction).Observe(float64(bytes) / 1e6 / d.Seconds())
	}
}

// ForgetStep drops what is kept of a step whose sidecar never reported its
// end (its pod failed or was deleted).
func (m *Metrics) ForgetStep(stepID string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	delete(m.steps, stepID)
	m.mu.Unlock()
}
