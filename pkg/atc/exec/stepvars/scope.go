// Package stepvars is how a build's steps fill in their ((vars)): the
// build's local vars (load_var, across) in nested scopes, the pipeline's
// var_sources, a step's static vars and the team's credentials, every value
// a credential manager or var source gave recorded so that it is redacted
// from the build's events and kept out of pod specs.
package stepvars

import (
	"context"
	"sync"

	"github.com/porter-ci/porter/pkg/vars"
)

// LocalSource is the var source of a build's local vars: ((.:name)).
const LocalSource = vars.LocalSource

// Scope holds a build's local vars: those load_var set, and across's for
// one of its runs. A run of an across step sees its own values over the
// build's; what it loads stays in its scope, as in Concourse.
type Scope struct {
	parent *Scope

	mu   sync.Mutex
	vars map[string]any
}

// NewScope is a build's root scope.
func NewScope() *Scope { return &Scope{vars: map[string]any{}} }

// Child is a scope that sees s's vars under its own.
func (s *Scope) Child() *Scope {
	return &Scope{parent: s, vars: map[string]any{}}
}

// Set sets name in s.
func (s *Scope) Set(name string, v any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.vars[name] = v
}

// Get is name's value in s or the nearest scope above it.
func (s *Scope) Get(name string) (any, bool) {
	for sc := s; sc != nil; sc = sc.parent {
		sc.mu.Lock()
		v, ok := sc.vars[name]
		sc.mu.Unlock()
		if ok {
			return v, true
		}
	}
	return nil, false
}

type scopeKey struct{}

// WithScope is ctx for the steps of one across run.
func WithScope(ctx context.Context, s *Scope) context.Context {
	return context.WithValue(ctx, scopeKey{}, s)
}

// ScopeOf is the local vars the step running under ctx sees: its across
// run's, else root.
func ScopeOf(ctx context.Context, root *Scope) *Scope {
	if s, ok := ctx.Value(scopeKey{}).(*Scope); ok {
		return s
	}
	return root
}
