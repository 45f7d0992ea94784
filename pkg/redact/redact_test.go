package redact

import (
	"strings"
	"testing"
)

// A value JSON escapes (a quote, a newline) is redacted in the document's
// strings, where a redaction of the encoded text would miss it; keys and
// numbers are left as they are.
func TestJSONRedactsEscapedValuesInStrings(t *testing.T) {
	r := New([]string{`q"uote`, "line1\nline2", "key"})
	doc := []byte(`{"key":"a q\"uote","list":["line1\nline2",12345678901234567890],"n":1.50}`)
	got, err := r.JSON(doc)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"key":"a ((redacted))","list":["((redacted))",12345678901234567890],"n":1.50}`
	if string(got) != want {
		t.Errorf("JSON(%s) = %s, want %s", doc, got, want)
	}
	if _, err := r.JSON([]byte(`{"unterminated`)); err == nil || !strings.Contains(err.Error(), "unexpected EOF") {
		t.Errorf("JSON of a broken document: err %v, want unexpected EOF", err)
	}
}

// As in Concourse, a value (or a line of one) of a single character is not
// redacted: it would garble every word holding that letter. Longer values,
// and the longer lines of a value, still are.
func TestSingleCharacterValuesAreNotRedacted(t *testing.T) {
	r := New([]string{"x", " v \n", "ab\nc\nlong-line"})
	got := r.Redact("platform linux; var data fetched; ab then long-line; c")
	want := "platform linux; var data fetched; ((redacted)) then ((redacted)); c"
	if got != want {
		t.Errorf("Redact = %q, want %q", got, want)
	}
	if got := (New([]string{"x", "y"})).Redact("xyz"); got != "xyz" {
		t.Errorf("only one-character values: Redact = %q, want it unchanged", got)
	}
}
