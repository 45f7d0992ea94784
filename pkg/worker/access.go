package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Access is one right the runtime needs in a worker's namespace.
type Access struct {
	Verb        string
	Resource    string
	Subresource string
}

func (a Access) String() string {
	r := a.Resource
	if a.Subresource != "" {
		r += "/" + a.Subresource
	}
	return a.Verb + " " + r
}

// Required lists every right the runtime uses in a worker's namespace:
// declaring, following and removing step pods and their Secrets, and
// recording Events on failed step pods.
func Required() []Access {
	return []Access{
		{Verb: "create", Resource: "pods"},
		{Verb: "get", Resource: "pods"},
		{Verb: "list", Resource: "pods"},
		{Verb: "watch", Resource: "pods"},
		{Verb: "delete", Resource: "pods"},
		{Verb: "create", Resource: "secrets"},
		{Verb: "patch", Resource: "secrets"},
		{Verb: "delete", Resource: "secrets"},
		{Verb: "create", Resource: "events"},
	}
}

// Optional lists the rights the runtime uses when it has them and does
// without otherwise: shrinking the requests of kept pods in place (GC).
// deploy/atc grants them; a worker is registered without them.
func Optional() []Access {
	return []Access{{Verb: "update", Resource: "pods", Subresource: "resize"}}
}

// AccessError names each right the worker's identity lacks.
type AccessError struct {
	Namespace string
	Missing   []Access
}

func (e *AccessError) Error() string {
	names := make([]string, len(e.Missing))
	for i, m := range e.Missing {
		names[i] = m.String()
	}
	return fmt.Sprintf("not allowed in namespace %s: %s", e.Namespace, strings.Join(names, ", "))
}

// CheckAccess asks the API server, with one SelfSubjectAccessReview per
// right, whether the client's identity may do what the runtime needs in
// namespace. It returns an *AccessError naming every missing right, or the
// error that kept it from asking.
func CheckAccess(ctx context.Context, kube kubernetes.Interface, namespace string, need []Access) error {
	var missing []Access
	var errs []error
	for _, a := range need {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: namespace, Verb: a.Verb, Resource: a.Resource, Subresource: a.Subresource,
			},
		}}
		got, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			errs = append(errs, fmt.Errorf("ask whether %s is allowed: %w", a, err))
			// An unreachable API server fails every review alike.
			break
		}
		if !got.Status.Allowed {
			missing = append(missing, a)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if len(missing) > 0 {
		return &AccessError{Namespace: namespace, Missing: missing}
	}
	return nil
}
