package resource

import (
	"strings"
	"testing"
)

func TestResponseValidJSON(t *testing.T) {
	r := NewStdout("check", 1<<10)
	r.Write([]byte(`[{"ref":`))
	r.Write([]byte(`"1"}]` + "\n"))
	body, err := r.Body()
	if err != nil {
		t.Fatal(err)
	}
	if string(body) != `[{"ref":"1"}]`+"\n" {
		t.Fatalf("body = %q", body)
	}
}

func TestResponseInvalidJSON(t *testing.T) {
	r := NewStdout("in", 1<<10)
	r.Write([]byte("fetching...\n{\"version\":{}}"))
	_, err := r.Body()
	if err == nil {
		t.Fatal("no error for invalid JSON")
	}
	for _, want := range []string{"in printed invalid JSON", `"fetching...\n{\"version\":{}}"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestResponseEmpty(t *testing.T) {
	_, err := NewStdout("out", 1<<10).Body()
	if err == nil || !strings.Contains(err.Error(), "out printed invalid JSON: stdout was empty") {
		t.Fatalf("err = %v", err)
	}
}

func TestResponseTooLong(t *testing.T) {
	r := NewStdout("check", 8<<20)
	chunk := []byte(strings.Repeat("x", 1<<20))
	for range 9 {
		r.Write(chunk)
	}
	_, err := r.Body()
	if err == nil || !strings.Contains(err.Error(), "check printed more than 8388608 bytes on stdout") {
		t.Fatalf("err = %v", err)
	}
	if r.buf != nil {
		t.Fatal("an overlong response is still held in memory")
	}
}
