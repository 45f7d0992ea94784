package sidecar

import (
	"strings"
	"testing"
)

func TestResponseValidJSON(t *testing.T) {
	r := newResponse("check", 1<<10)
	r.write([]byte(`[{"ref":`))
	r.write([]byte(`"1"}]` + "\n"))
	body, err := r.body()
	if err != nil {
		t.Fatal(err)
	}
	if string(body) != `[{"ref":"1"}]`+"\n" {
		t.Fatalf("body = %q", body)
	}
}

func TestResponseInvalidJSON(t *testing.T) {
	r := newResponse("in", 1<<10)
	r.write([]byte("fetching...\n{\"version\":{}}"))
	_, err := r.body()
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
	_, err := newResponse("out", 1<<10).body()
	if err == nil || !strings.Contains(err.Error(), "out printed invalid JSON: stdout was empty") {
		t.Fatalf("err = %v", err)
	}
}

func TestResponseTooLong(t *testing.T) {
	r := newResponse("check", 8<<20)
	chunk := []byte(strings.Repeat("x", 1<<20))
	for range 9 {
		r.write(chunk)
	}
	_, err := r.body()
	if err == nil || !strings.Contains(err.Error(), "check printed more than 8388608 bytes on stdout") {
		t.Fatalf("err = %v", err)
	}
	if r.buf != nil {
		t.Fatal("an overlong response is still held in memory")
	}
}

func TestResourceScript(t *testing.T) {
	for typ, want := range map[string]string{"check": "check", "get": "in", "put": "out", "task": ""} {
		if got := ResourceScript(typ); got != want {
			t.Errorf("ResourceScript(%q) = %q, want %q", typ, got, want)
		}
	}
}
