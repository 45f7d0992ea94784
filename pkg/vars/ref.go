// Package vars fills in Concourse's ((vars)): in any decoded JSON or YAML
// value, or in template bytes. A string that is exactly one var becomes the
// var's value, whatever its type; a var inside a longer string is written
// into it as text.
package vars

import (
	"fmt"
	"path"
	"strings"
)

// LocalSource is the var source of a build's local vars (load_var,
// across): ((.:name)).
const LocalSource = "."

// Ref names a var: ((source:path.field.sub)). Segments may be quoted to
// hold dots or colons: (("a.b".c)).
type Ref struct {
	// Source is the var source, "" for the default one.
	Source string
	// Path is the var's name.
	Path string
	// Fields are picked, in order, out of the var's value.
	Fields []string
}

// String writes the ref back, quoting segments that need it.
func (r Ref) String() string {
	var b strings.Builder
	if r.Source != "" {
		b.WriteString(r.Source + ":")
	}
	b.WriteString(quoteSegment(r.Path))
	for _, f := range r.Fields {
		b.WriteString("." + quoteSegment(f))
	}
	return b.String()
}

func quoteSegment(s string) string {
	if strings.ContainsAny(s, ",.:/ ") {
		return fmt.Sprintf("%q", s)
	}
	return s
}

// ParseRef reads what is between (( and )).
func ParseRef(name string) (Ref, error) {
	if strings.Count(name, `"`)%2 != 0 {
		return Ref{}, fmt.Errorf("invalid var '%s': contains unclosed quotes", name)
	}
	var ref Ref
	rest := name
	if i := indexUnquoted(rest, ':'); i >= 0 {
		ref.Source = strings.TrimSpace(strings.ReplaceAll(rest[:i], `"`, ""))
		rest = rest[i+1:]
	}
	var segments []string
	for {
		i := indexUnquoted(rest, '.')
		seg := rest
		if i >= 0 {
			seg = rest[:i]
		}
		seg = strings.TrimSpace(strings.ReplaceAll(seg, `"`, ""))
		if seg == "" {
			return Ref{}, fmt.Errorf("invalid var '%s': empty field", name)
		}
		segments = append(segments, cleanSegment(seg))
		if i < 0 {
			break
		}
		rest = rest[i+1:]
	}
	ref.Path, ref.Fields = segments[0], segments[1:]
	return ref, nil
}

// cleanSegment normalises a path-like segment ("a//b/" is "a/b") so that
// one var is not looked up under two names.
func cleanSegment(s string) string {
	if strings.HasPrefix(s, "/") {
		return path.Clean(s)
	}
	return path.Clean("/" + s)[1:]
}

// indexUnquoted is the index of the first c outside double quotes, or -1.
func indexUnquoted(s string, c byte) int {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			quoted = !quoted
		case c:
			if !quoted {
				return i
			}
		}
	}
	return -1
}
