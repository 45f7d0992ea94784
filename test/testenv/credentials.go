package testenv

import (
	"context"
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ApplyATCCredentialsRBAC lets the ATC of atcNamespace (deploy/atc's service
// account there) read the Secrets of credNamespace, a team's credential
// namespace, as `kubectl -n <credNamespace> apply -f
// deploy/atc/credentials.yaml` does with the subject's namespace set.
func ApplyATCCredentialsRBAC(ctx context.Context, kube kubernetes.Interface, atcNamespace, credNamespace string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	objs, err := DecodeManifests(filepath.Join(root, "deploy", "atc", "credentials.yaml"))
	if err != nil {
		return err
	}
	for _, obj := range objs {
		switch o := obj.(type) {
		case *rbacv1.Role:
			o.Namespace = credNamespace
			_, err = kube.RbacV1().Roles(credNamespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			o.Namespace = credNamespace
			for i := range o.Subjects {
				if o.Subjects[i].Kind == rbacv1.ServiceAccountKind {
					o.Subjects[i].Namespace = atcNamespace
				}
			}
			_, err = kube.RbacV1().RoleBindings(credNamespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			return fmt.Errorf("unexpected %T in deploy/atc/credentials.yaml", obj)
		}
		if err != nil {
			return fmt.Errorf("apply deploy/atc/credentials.yaml in %s: %w", credNamespace, err)
		}
	}
	return nil
}

// NewCredentialNamespace makes team's credential namespace for the servers of
// worker: namespace <prefix><team> under a prefix unique to this call (pass
// it as ATCConfig.CredentialNamespacePrefix), where worker's service account
// may get Secrets. remove deletes the namespace.
func (e *ATCEnv) NewCredentialNamespace(ctx context.Context, worker WorkerNamespace, team string) (prefix string, remove func(context.Context) error, err error) {
	prefix = "porter-creds-" + randomHex(4) + "-"
	name := prefix + team
	remove = func(context.Context) error { return nil }
	_, err = e.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"porter.ci/test": "e2e"}},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", remove, fmt.Errorf("create namespace %s: %w", name, err)
	}
	remove = func(ctx context.Context) error {
		if err := e.Admin.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("delete namespace %s: %w", name, err)
		}
		return nil
	}
	if err := ApplyATCCredentialsRBAC(ctx, e.Admin, worker.Name, name); err != nil {
		return "", remove, err
	}
	return prefix, remove, nil
}

// CreateSecret writes a credential: Secret name in namespace ns with data
// (key "value" for a plain var, any keys for a var with fields).
func CreateSecret(ctx context.Context, kube kubernetes.Interface, ns, name string, data map[string]string) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, StringData: data}
	if _, err := kube.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create Secret %s/%s: %w", ns, name, err)
	}
	return nil
}
