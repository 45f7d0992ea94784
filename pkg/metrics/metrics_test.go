package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/metrics"
)

func status(s eventspb.StepStatus, at time.Time) *eventspb.Event {
	return &eventspb.Event{Time: timestamppb.New(at), Payload: &eventspb.Event_Status{Status: &eventspb.StatusChanged{Status: s}}}
}

// The sidecar's status changes give the inputs, run and outputs phases by
// their own timestamps, and the bytes moved in each give the throughput.
func TestSidecarEventsDerivePhasesAndThroughput(t *testing.T) {
	m := metrics.New()
	t0 := time.Unix(1000, 0)
	evs := []*eventspb.Event{
		status(eventspb.StepStatus_STEP_STATUS_INITIALIZING, t0),
		status(eventspb.StepStatus_STEP_STATUS_FETCHING_INPUTS, t0),
		{Payload: &eventspb.Event_InputFetched{InputFetched: &eventspb.InputFetched{Size: 4_000_000}}},
		status(eventspb.StepStatus_STEP_STATUS_RUNNING, t0.Add(2*time.Second)),
	}
	// Split across two batches, as a sidecar sends them.
	m.SidecarEvents("s1", evs[:2])
	m.SidecarEvents("s1", evs[2:])
	m.SidecarEvents("s1", []*eventspb.Event{
		status(eventspb.StepStatus_STEP_STATUS_UPLOADING_OUTPUTS, t0.Add(7*time.Second)),
		{Payload: &eventspb.Event_OutputUploaded{OutputUploaded: &eventspb.ArtifactUploaded{Size: 1_000_000}}},
		status(eventspb.StepStatus_STEP_STATUS_FINISHED, t0.Add(8*time.Second)),
		{Time: timestamppb.New(t0.Add(8 * time.Second)), Payload: &eventspb.Event_StepFinished{StepFinished: &eventspb.StepFinished{}}},
	})

	want := `
# HELP porter_artifact_bytes_total Artifact bytes moved by step pods, by direction (download: inputs, upload: outputs).
# TYPE porter_artifact_bytes_total counter
porter_artifact_bytes_total{direction="download"} 4e+06
porter_artifact_bytes_total{direction="upload"} 1e+06
# HELP porter_artifact_transfer_seconds_total Time step pods spent moving artifacts, by direction; bytes_total / seconds_total is the throughput.
# TYPE porter_artifact_transfer_seconds_total counter
porter_artifact_transfer_seconds_total{direction="download"} 2
porter_artifact_transfer_seconds_total{direction="upload"} 1
# HELP porter_sidecar_events_total Events received from sidecars (rate() gives events/s).
# TYPE porter_sidecar_events_total counter
porter_sidecar_events_total 8
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want),
		"porter_artifact_bytes_total", "porter_artifact_transfer_seconds_total", "porter_sidecar_events_total"); err != nil {
		t.Error(err)
	}
	sums := map[string]float64{}
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "porter_step_phase_seconds" {
			continue
		}
		for _, s := range mf.GetMetric() {
			sums[s.GetLabel()[0].GetValue()] = s.GetHistogram().GetSampleSum()
			if c := s.GetHistogram().GetSampleCount(); c != 1 {
				t.Errorf("phase %s observed %d times, want once", s.GetLabel()[0].GetValue(), c)
			}
		}
	}
	if want := map[string]float64{"inputs": 2, "run": 5, "outputs": 1}; !equal(sums, want) {
		t.Errorf("phase durations = %v, want %v", sums, want)
	}
}

func equal(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// A worker's gauge shows its current state only.
func TestWorkerStateKeepsOneState(t *testing.T) {
	m := metrics.New()
	m.WorkerState("w1", "running")
	m.WorkerState("w1", "stalled")
	m.WorkerState("w2", "running")
	want := `
# HELP porter_worker_state 1 for each worker's current state (running, stalled, landing, landed, retiring).
# TYPE porter_worker_state gauge
porter_worker_state{state="running",worker="w2"} 1
porter_worker_state{state="stalled",worker="w1"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "porter_worker_state"); err != nil {
		t.Error(err)
	}
	m.WorkerState("w1", "")
	if n := testutil.CollectAndCount(m.Registry(), "porter_worker_state"); n != 1 {
		t.Errorf("after pruning w1: %d series, want 1", n)
	}
}

// A nil *Metrics is a no-op: code without metrics calls the same methods.
func TestNilMetricsIsNoop(t *testing.T) {
	var m *metrics.Metrics
	m.BuildStarted()
	m.BuildFinished("succeeded")
	m.StepPhase(metrics.PhaseRun, time.Second)
	m.PodFailure("Image")
	m.ArtifactBytes(metrics.Upload, 10, time.Second)
	m.Events(3)
	m.GCReclaimed("pods", 1, 10)
	m.WorkerState("w", "running")
	m.StreamsConnected(func() int { return 1 })
	m.SidecarEvents("s", []*eventspb.Event{{}})
	m.ForgetStep("s")
	if m.Registry() != nil {
		t.Error("a nil Metrics has a registry")
	}
}
