// Package creds looks up the ((vars)) of pipelines and tasks in a
// credential manager, and redacts the values it handed out from build logs.
package creds

import (
	"context"
	"fmt"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/porter-ci/porter/pkg/vars"
)

// DefaultNamespacePrefix is Concourse's: team main's secrets live in
// namespace concourse-main.
const DefaultNamespacePrefix = "concourse-"

// valueKey is the Secret key a var without fields reads, as in Concourse.
const valueKey = "value"

// Kubernetes reads vars from Secrets in the team's namespace, like
// Concourse's Kubernetes credential manager: ((name)) is Secret
// "<pipeline>.<name>" if it exists, else Secret "<name>"; its key "value" is
// the var's value, or, without that key, every key is a field.
type Kubernetes struct {
	Client          kubernetes.Interface
	NamespacePrefix string
}

// Lookup finds the var named name for team's pipeline (empty for one-off
// builds). found is false when no Secret has it; err is for lookups that
// could not be made (RBAC, API down), which must fail the step rather than
// read as "undefined".
func (k *Kubernetes) Lookup(ctx context.Context, team, pipeline, name string) (value any, found bool, err error) {
	ns := k.NamespacePrefix + team
	var names []string
	if pipeline != "" {
		names = append(names, pipeline+"."+name)
	}
	names = append(names, name)
	for _, secretName := range names {
		// A var name that cannot be a Secret's name cannot be found there;
		// asking would only earn a 400.
		if len(validation.IsDNS1123Subdomain(secretName)) > 0 {
			continue
		}
		s, err := k.Client.CoreV1().Secrets(ns).Get(ctx, secretName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			// Forbidden above all must not read as "undefined": the ATC
			// lacks RBAC in the team's namespace, and the message says so.
			return nil, false, fmt.Errorf("cannot read Secret %s in namespace %s for ((%s)): %w", secretName, ns, name, err)
		}
		if v, ok := s.Data[valueKey]; ok {
			return string(v), true, nil
		}
		fields := make(map[string]any, len(s.Data)+len(s.StringData))
		keys := make([]string, 0, len(s.Data))
		for key := range s.Data {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		for _, key := range keys {
			fields[key] = string(s.Data[key])
		}
		return fields, true, nil
	}
	return nil, false, nil
}

// Manager is a team's credential manager: Kubernetes Secrets or Vault.
// found is false when it has no such var; err is a lookup that could not
// be made, which must fail the step rather than read as "undefined".
type Manager interface {
	Lookup(ctx context.Context, team, pipeline, name string) (value any, found bool, err error)
}

// Resolver answers the ((vars)) of one team's pipeline (or one-off build)
// from the server's credential manager.
type Resolver struct {
	K        Manager
	Team     string
	Pipeline string
}

// Get looks up ref's whole var; the interpolator picks its fields.
func (r Resolver) Get(ctx context.Context, ref vars.Ref) (any, bool, error) {
	if ref.Source != "" {
		return nil, false, fmt.Errorf("((%s)): var source %q is not configured (var_sources are not supported yet)", ref, ref.Source)
	}
	return r.K.Lookup(ctx, r.Team, r.Pipeline, ref.Path)
}
