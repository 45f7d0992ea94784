// Package redact replaces secret values (credentials, secret params) with
// ((redacted)) wherever they would be shown. It has no dependencies, so the
// sidecar can redact its audit journal without the credential managers.
package redact

import (
	"bytes"
	"encoding/json"
	"sort"
	"strings"
)

// Redacted replaces a credential's value wherever it would be shown.
const Redacted = "((redacted))"

// Redactor replaces the values of credentials in text. The zero value
// redacts nothing.
type Redactor struct {
	replacer *strings.Replacer
}

// New redacts every value, and each line of a value that spans lines (a
// log event carries at most one line of it), trimmed, that is longer than
// one byte: as in Concourse, a one-character value is no secret, and
// redacting it would garble every word holding that letter. Longer values
// are replaced first, so a value containing another is redacted whole.
func New(values []string) *Redactor {
	seen := map[string]bool{}
	var all []string
	add := func(v string) {
		v = strings.TrimSpace(v)
		if len(v) > 1 && !seen[v] {
			seen[v] = true
			all = append(all, v)
		}
	}
	for _, v := range values {
		add(v)
		if strings.Contains(v, "\n") {
			for _, line := range strings.Split(v, "\n") {
				add(line)
			}
		}
	}
	if len(all) == 0 {
		return &Redactor{}
	}
	sort.Slice(all, func(i, j int) bool { return len(all[i]) > len(all[j]) })
	pairs := make([]string, 0, 2*len(all))
	for _, v := range all {
		pairs = append(pairs, v, Redacted)
	}
	return &Redactor{replacer: strings.NewReplacer(pairs...)}
}

// Redact returns s with every credential value replaced.
func (r *Redactor) Redact(s string) string {
	if r == nil || r.replacer == nil {
		return s
	}
	return r.replacer.Replace(s)
}

// Bytes is Redact for bytes (a process's output); it returns b itself when
// nothing is redacted.
func (r *Redactor) Bytes(b []byte) []byte {
	if r == nil || r.replacer == nil {
		return b
	}
	s := string(b)
	if out := r.replacer.Replace(s); out != s {
		return []byte(out)
	}
	return b
}

// JSON redacts the strings of a JSON document (map keys are its structure
// and are left alone). Redacting the encoded text instead would miss values
// JSON escapes (quotes, newlines).
func (r *Redactor) JSON(doc []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, err
	}
	return json.Marshal(r.tree(tree))
}

func (r *Redactor) tree(v any) any {
	switch n := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(n))
		for k, x := range n {
			out[k] = r.tree(x)
		}
		return out
	case []any:
		out := make([]any, len(n))
		for i, x := range n {
			out[i] = r.tree(x)
		}
		return out
	case string:
		return r.Redact(n)
	}
	return v
}
