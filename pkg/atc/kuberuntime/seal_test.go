package kuberuntime

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/porter-ci/porter/pkg/auditseal"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/worker"
)

// sealer records the seals asked for; the first failures fail.
type sealer struct {
	mu       sync.Mutex
	failures int
	sealed   []string
}

func (s *sealer) Seal(_ context.Context, stepID string) (auditseal.Sealed, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failures > 0 {
		s.failures--
		return auditseal.Sealed{}, errors.New("blobstore away")
	}
	s.sealed = append(s.sealed, stepID)
	return auditseal.Sealed{}, nil
}

func (s *sealer) calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sealed)
}

// A step's audit record is sealed once the step has ended, before its end
// is handed on (to be recorded), through a short blobstore outage; a step
// left to the next server is not sealed here, and one whose pod went while
// no server followed it is sealed when that is found.
func TestStepsEndSealsItsAudit(t *testing.T) {
	r, _, _ := newTestRuntime(t, fake.NewSimpleClientset(), worker.Config{Name: "a", Namespace: "steps", Platform: worker.PlatformLinux})
	seals := &sealer{failures: 2}
	r.sealer = seals
	w, err := r.Worker("a")
	if err != nil {
		t.Fatal(err)
	}

	finished := make(chan *eventspb.StepFinished, 1)
	finished <- &eventspb.StepFinished{Result: eventspb.Result_RESULT_SUCCEEDED}
	fin := r.Supervise(t.Context(), Step{ID: "b1-task-x", Worker: w, Finished: finished})
	if fin.GetResult() != eventspb.Result_RESULT_SUCCEEDED {
		t.Fatalf("Supervise = %v", fin)
	}
	if got := seals.calls(); !slices.Equal(got, []string{"b1-task-x"}) {
		t.Errorf("sealed %v by the step's end, want its record", got)
	}

	shutdown := errors.New("shutting down")
	r.cfg.Shutdown = shutdown
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(shutdown)
	if fin := r.Supervise(ctx, Step{ID: "b1-task-y", Worker: w, Finished: make(chan *eventspb.StepFinished)}); fin != nil {
		t.Fatalf("Supervise at shutdown = %v, want nil", fin)
	}
	if got := seals.calls(); len(got) != 1 {
		t.Errorf("sealed %v for a step left to the next server", got)
	}

	gone, err := r.PodGone(t.Context(), w, "b1-task-z")
	if err != nil || !gone {
		t.Fatalf("PodGone = %v, %v", gone, err)
	}
	if got := seals.calls(); !slices.Equal(got, []string{"b1-task-x", "b1-task-z"}) {
		t.Errorf("sealed %v, want the gone pod's step sealed too", got)
	}
}
