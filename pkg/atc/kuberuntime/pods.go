package kuberuntime

import (
	"bytes"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/stepcreds"
)

// CreatePod creates the step's Secrets (its own and, for a login to the
// image's registry, its pull Secret), then the pod in one call, then ties
// the Secrets' lifetime to the pod. given holds the step's own secret
// values; the runtime adds the step's token, the ATC's CA and the step's
// blobstore credentials.
func (r *Runtime) CreatePod(ctx context.Context, w *Worker, a *action.Action, given podspec.Secrets) error {
	token, err := r.tokens.Mint(a.StepID, a.Timeout.Duration+a.KeepAlive.Duration+24*time.Hour)
	if err != nil {
		return err
	}
	if a.Platform == "" {
		a.Platform = w.cfg.Platform // a resource step runs on its worker's platform
	}
	given.StepToken, given.ATCCA, a.ATCLinkInsecure = token, r.ca(), r.cfg.Insecure
	if err := r.mintStepCredentials(ctx, a, w.spec, &given); err != nil {
		return err
	}
	pod, secret, err := podspec.Build(a, w.spec, given)
	if err != nil {
		return fmt.Errorf("declare the step's pod: %w", err)
	}
	toCreate := []*corev1.Secret{secret}
	if given.ImagePull != nil {
		pull, err := podspec.PullSecret(a, w.spec, *given.ImagePull)
		if err != nil {
			return fmt.Errorf("declare the step's pull secret: %w", err)
		}
		toCreate = append(toCreate, pull)
	}
	secrets := w.kube.CoreV1().Secrets(w.cfg.Namespace)
	var created []string
	undo := func() {
		for _, name := range created {
			_ = secrets.Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
		}
	}
	for _, sec := range toCreate {
		if _, err := secrets.Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			undo()
			return fmt.Errorf("create the step's secret %s: %w", sec.Name, err)
		}
		created = append(created, sec.Name)
	}
	createdPod, err := w.kube.CoreV1().Pods(w.cfg.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		undo()
		return fmt.Errorf("create the step's pod: %w", err)
	}
	patch, err := podspec.OwnerPatch(createdPod)
	for _, name := range created {
		perr := err
		if perr == nil {
			_, perr = secrets.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		}
		if perr != nil {
			// The pod runs either way; without the owner the Secret is deleted with the pod by us.
			r.log.Warn("could not tie the step's secret to its pod", "step", a.StepID, "secret", name, "err", perr)
		}
	}
	r.log.Info("step pod created", "worker", w.cfg.Name, "step", a.StepID, "pod", createdPod.Name, "image", a.Image)
	r.writePodAudit(ctx, a, createdPod)
	return nil
}

// writePodAudit records the pod as declared (not its changing status) in the
// step's audit trail: where and how the step ran.
func (r *Runtime) writePodAudit(ctx context.Context, a *action.Action, pod *corev1.Pod) {
	declared := pod.DeepCopy()
	declared.Status = corev1.PodStatus{}
	declared.ManagedFields = nil
	body, err := yaml.Marshal(declared)
	if err == nil {
		key := blobstore.StepPrefix(a.Build.AuditDir(), a.StepID) + blobstore.PodObject
		_, err = r.audit.Put(ctx, key, bytes.NewReader(body), int64(len(body)), blobstore.PutOptions{ContentType: "application/yaml"})
	}
	if err != nil {
		r.log.Warn("audit pod spec", "step", a.StepID, "err", err)
	}
}

// PodGone reports whether a step's pod no longer exists (its Secret, if
// left behind, is removed with it, and what it staged for its audit
// record is sealed: the step has ended).
func (r *Runtime) PodGone(ctx context.Context, w *Worker, stepID string) (bool, error) {
	if pod, ok := w.Pod(stepID); ok && pod.DeletionTimestamp == nil {
		// The watch's copy answers without a request (a step given its
		// go-ahead asks this on the build's path): a pod deleted since is
		// lost like any pod lost while it runs.
		return false, nil
	}
	name := podspec.Name(stepID)
	_, err := w.kube.CoreV1().Pods(w.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		return false, nil
	case apierrors.IsNotFound(err):
		for _, secret := range []string{name, podspec.PullSecretName(stepID)} {
			if err := w.kube.CoreV1().Secrets(w.cfg.Namespace).Delete(ctx, secret, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				r.log.Warn("delete a gone step's secret", "step", stepID, "secret", secret, "err", err)
			}
		}
		r.sealAudit(ctx, stepID)
		return true, nil
	default:
		return false, fmt.Errorf("look up pod %s of a resumed build: %w", name, err)
	}
}

// DeclaredAction is the action the step's pod was declared with.
func (r *Runtime) DeclaredAction(ctx context.Context, w *Worker, stepID string) (*action.Action, error) {
	pod, err := w.kube.CoreV1().Pods(w.cfg.Namespace).Get(ctx, podspec.Name(stepID), metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("look up the pod of step %s: %w", stepID, err)
	}
	return podspec.DeclaredAction(pod)
}

// DeletePod deletes a step's pod at once (its Secrets go with it); a
// failure is logged, as the garbage collector deletes it later anyway.
func (r *Runtime) DeletePod(ctx context.Context, w *Worker, stepID string) {
	grace := int64(0)
	err := w.kube.CoreV1().Pods(w.cfg.Namespace).Delete(context.WithoutCancel(ctx), podspec.Name(stepID), metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if err != nil && !apierrors.IsNotFound(err) {
		r.log.Warn("delete step pod", "worker", w.cfg.Name, "step", stepID, "err", err)
	}
}

// stepScope is what the step of a may touch in the bucket.
func stepScope(a *action.Action, w podspec.Worker) stepcreds.Scope {
	sc := stepcreds.Scope{Team: a.Build.Team, BuildID: a.Build.AuditDir(), StepID: a.StepID}
	for _, in := range a.Inputs {
		if in.Key != "" { // optional and not given, or made later (Input.From)
			sc.Inputs = append(sc.Inputs, in.Key)
		}
	}
	for _, c := range a.Caches {
		sc.Caches = append(sc.Caches, c.Key)
	}
	if a.Timeout.Duration > 0 {
		allowance := w.UploadAllowance
		if allowance <= 0 {
			allowance = podspec.DefaultUploadAllowance
		}
		sc.Lifetime = a.Timeout.Duration + allowance + a.KeepAlive.Duration
	} else {
		sc.Lifetime = time.Duration(1<<63 - 1) // no timeout: as long as allowed
	}
	return sc
}

// StepCredentials are the blobstore credentials of the step of a, minted
// again: a gated step's go-ahead brings them, for the inputs whose keys
// were not known when its pod was declared.
func (r *Runtime) StepCredentials(ctx context.Context, w *Worker, a *action.Action) (stepcreds.Credentials, error) {
	c, err := r.creds.Issue(ctx, stepScope(a, w.spec))
	if err != nil {
		return stepcreds.Credentials{}, fmt.Errorf("blobstore credentials for step %s: %w", a.StepID, err)
	}
	return c, nil
}

// mintStepCredentials fills given with the step's own blobstore credentials.
func (r *Runtime) mintStepCredentials(ctx context.Context, a *action.Action, w podspec.Worker, given *podspec.Secrets) error {
	c, err := r.creds.Issue(ctx, stepScope(a, w))
	if err != nil {
		return fmt.Errorf("blobstore credentials for step %s: %w", a.StepID, err)
	}
	given.BlobstoreAccessKey, given.BlobstoreSecretKey, given.BlobstoreSessionToken = c.AccessKey, c.SecretKey, c.SessionToken
	return nil
}
