package atc

import (
	"context"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/atc/exec"
	"github.com/porter-ci/porter/pkg/atc/kuberuntime"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/worker"
)

// execRuntime is kuberuntime as the steps' runtime (exec.Runtime): the
// steps see its workers as exec.Worker; the server, which gave them out,
// takes them back with kubeWorker.
type execRuntime struct{ *kuberuntime.Runtime }

var _ exec.Runtime = execRuntime{}

func (r execRuntime) Worker(name string) (exec.Worker, error) {
	w, err := r.Runtime.Worker(name)
	if err != nil {
		return nil, err
	}
	return w, nil
}

func (r execRuntime) Place(ctx context.Context, req worker.Requirements, waiting func(msg string)) (exec.Worker, error) {
	w, err := r.Runtime.Place(ctx, req, waiting)
	if err != nil {
		return nil, err
	}
	return w, nil
}

func (r execRuntime) CreatePod(ctx context.Context, w exec.Worker, a *action.Action, given podspec.Secrets) error {
	return r.Runtime.CreatePod(ctx, kubeWorker(w), a, given)
}

func (r execRuntime) PodGone(ctx context.Context, w exec.Worker, stepID string) (bool, error) {
	return r.Runtime.PodGone(ctx, kubeWorker(w), stepID)
}

func (r execRuntime) StepCredentials(ctx context.Context, w exec.Worker, a *action.Action) (*eventspb.BlobstoreCredentials, error) {
	c, err := r.Runtime.StepCredentials(ctx, kubeWorker(w), a)
	if err != nil {
		return nil, err
	}
	return &eventspb.BlobstoreCredentials{AccessKey: c.AccessKey, SecretKey: c.SecretKey, SessionToken: c.SessionToken}, nil
}

func (r execRuntime) DeclaredAction(ctx context.Context, w exec.Worker, stepID string) (*action.Action, error) {
	return r.Runtime.DeclaredAction(ctx, kubeWorker(w), stepID)
}

func (r execRuntime) DeletePod(ctx context.Context, w exec.Worker, stepID string) {
	r.Runtime.DeletePod(ctx, kubeWorker(w), stepID)
}

// kubeWorker is the kuberuntime worker behind a step's worker (nil when
// the step's worker is unknown). Every exec.Worker the server sees came
// from execRuntime.
func kubeWorker(w exec.Worker) *kuberuntime.Worker {
	kw, _ := w.(*kuberuntime.Worker)
	return kw
}
