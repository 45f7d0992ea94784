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
