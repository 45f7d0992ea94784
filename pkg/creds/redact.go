package creds

import "github.com/porter-ci/porter/pkg/redact"

// Redacted replaces a credential's value wherever it would be shown.
const Redacted = redact.Redacted

// Redactor replaces the values of credentials in text (pkg/redact, which
// the sidecar uses without the credential managers).
type Redactor = redact.Redactor

// NewRedactor is redact.New.
func NewRedactor(values []string) *Redactor { return redact.New(values) }
