package exec

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/pkg/atc/kuberuntime"
	"github.com/porter-ci/porter/pkg/atc/stepevents"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/podwatch"
)

// oomKilledPod is a step pod as the kubelet leaves it after killing the
// whole step container for its 16Mi memory limit.
func oomKilledPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "porter-s1"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: podspec.StepContainerName,
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				corev1.ResourceMemory: *resource.NewQuantity(16777216, resource.BinarySI)}},
		}}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
			Name:  podspec.StepContainerName,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}},
		}}},
	}
}

func finished(fin *eventspb.StepFinished) *eventspb.Event {
	return &eventspb.Event{Payload: &eventspb.Event_StepFinished{StepFinished: fin}}
}

func exited(status int32, oom bool) *eventspb.Event {
	return &eventspb.Event{Payload: &eventspb.Event_ProcessExited{ProcessExited: &eventspb.ProcessExited{ExitStatus: status, OomKilled: oom}}}
}

// TestTaskEndEvents follows a task's end as the build log shows it: the
// sidecar's events through Translate, the result Engine.Supervise settles on
// through End, then anything the sidecar sends late.
func TestTaskEndEvents(t *testing.T) {
	oomFailure := podwatch.Classify(oomKilledPod())
	if oomFailure == nil || oomFailure.Kind != podwatch.KindOOMKilled {
		t.Fatalf("Classify(OOMKilled pod) = %v, want an OOMKilled failure", oomFailure)
	}
	lost := &eventspb.StepFinished{Result: eventspb.Result_RESULT_ERRORED, ExitStatus: -1, AuditKey: "audit",
		Error: "the step's entrypoint went away before the process exited", EntrypointLost: true}
	processOOM := &eventspb.StepFinished{Result: eventspb.Result_RESULT_FAILED, ExitStatus: 137, OomKilled: true,
		Error: "out of memory: the step's process was killed for exceeding its memory limit of 64Mi (67108864 bytes)"}

	type shown struct {
		finishes []int
		errors   []string
	}
	for _, tc := range []struct {
		name    string
		sidecar []*eventspb.Event
		result  *eventspb.StepFinished // what Engine.Supervise returns
		late    []*eventspb.Event
		want    shown
	}{{
		name:    "the kubelet killed the whole container: the ATC shows finish-task 137 and the limit, not the lost entrypoint",
		sidecar: []*eventspb.Event{finished(lost)},
		result:  kuberuntime.OOMKilled(lost, oomFailure),
		want: shown{finishes: []int{137},
			errors: []string{"out of memory: step container was killed for exceeding its memory limit of 16Mi (OOMKilled)"}},
	}, {
		name:   "the kubelet's OOM came before any sidecar report",
		result: kuberuntime.OOMKilled(nil, oomFailure),
		late:   []*eventspb.Event{exited(137, false), finished(lost)},
		want: shown{finishes: []int{137},
			errors: []string{"out of memory: step container was killed for exceeding its memory limit of 16Mi (OOMKilled)"}},
	}, {
		name:    "the kernel killed only the process: the sidecar's finish-task and error, once each",
		sidecar: []*eventspb.Event{exited(137, true), finished(processOOM)},
		result:  processOOM,
		want:    shown{finishes: []int{137}, errors: []string{processOOM.Error}},
	}, {
		name:    "the entrypoint went away and Kubernetes gave no reason: that is what the build says",
		sidecar: []*eventspb.Event{finished(lost)},
		result:  lost,
		want:    shown{errors: []string{lost.Error}},
	}, {
		name:    "a plain failure: the process's exit only",
		sidecar: []*eventspb.Event{exited(1, false), finished(&eventspb.StepFinished{Result: eventspb.Result_RESULT_FAILED, ExitStatus: 1})},
		result:  &eventspb.StepFinished{Result: eventspb.Result_RESULT_FAILED, ExitStatus: 1},
		want:    shown{finishes: []int{1}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			st := &stepevents.Translator{PlanID: "p1"}
			var got shown
			record := func(ev events.Event) {
				switch e := ev.(type) {
				case events.FinishTask:
					got.finishes = append(got.finishes, e.ExitStatus)
				case events.Error:
					got.errors = append(got.errors, e.Message)
				}
			}
			for _, ev := range tc.sidecar {
				if e := st.Translate(ev); e != nil {
					record(e)
				}
			}
			for _, e := range st.End(tc.result, 1) {
				record(e)
			}
			for _, ev := range tc.late {
				if e := st.Translate(ev); e != nil {
					record(e)
				}
			}
			if !slices.Equal(got.finishes, tc.want.finishes) {
				t.Errorf("finish-task exit statuses = %v, want %v", got.finishes, tc.want.finishes)
			}
			if strings.Join(got.errors, "\n") != strings.Join(tc.want.errors, "\n") {
				t.Errorf("errors shown = %q, want %q", got.errors, tc.want.errors)
			}
		})
	}
}

func TestOOMKilledIsAFailureWith137NamingTheLimit(t *testing.T) {
	lost := &eventspb.StepFinished{Result: eventspb.Result_RESULT_ERRORED, ExitStatus: -1, AuditKey: "audit", EntrypointLost: true,
		Error: "the step's entrypoint went away before the process exited"}
	fin := kuberuntime.OOMKilled(lost, podwatch.Classify(oomKilledPod()))
	if fin.GetResult() != eventspb.Result_RESULT_FAILED || fin.GetExitStatus() != 137 || !fin.GetOomKilled() {
		t.Errorf("oomKilled = %v, want failed, exit status 137, OOM-killed", fin)
	}
	if buildStatus(fin.GetResult()) != "failed" {
		t.Errorf("build status = %s, want failed", buildStatus(fin.GetResult()))
	}
	if !strings.Contains(fin.GetError(), "16Mi") || strings.Contains(fin.GetError(), "entrypoint") {
		t.Errorf("error = %q, want one naming the 16Mi limit and not the entrypoint", fin.GetError())
	}
	if fin.GetAuditKey() != "audit" {
		t.Errorf("audit key = %q, want the sidecar's", fin.GetAuditKey())
	}
}
