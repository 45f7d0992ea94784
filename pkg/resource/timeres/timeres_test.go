package timeres_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/resource"
	"github.com/porter-ci/porter/pkg/resource/timeres"
)

func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func check(t *testing.T, now time.Time, source string, prev string) ([]string, error) {
	t.Helper()
	typ := &timeres.Type{Now: func() time.Time { return now }}
	req := resource.CheckRequest{Source: json.RawMessage(source)}
	if prev != "" {
		req.Version = resource.Version{"time": prev}
	}
	vs, err := typ.Check(context.Background(), req, &bytes.Buffer{})
	var out []string
	for _, v := range vs {
		out = append(out, v["time"])
	}
	return out, err
}

func TestCheck(t *testing.T) {
	// 2026-11-23 is a Monday.
	for _, tc := range []struct {
		name, now, source, prev string
		want                    []string
	}{
		{"first check", "2026-11-23T10:00:00Z", `{"interval":"1h"}`, "", []string{"2026-11-23T10:00:00Z"}},
		{"interval not elapsed", "2026-11-23T10:30:00Z", `{"interval":"1h"}`, "2026-11-23T10:00:00Z", []string{"2026-11-23T10:00:00Z"}},
		{"interval elapsed", "2026-11-23T11:00:00Z", `{"interval":"1h"}`, "2026-11-23T10:00:00Z", []string{"2026-11-23T10:00:00Z", "2026-11-23T11:00:00Z"}},
		{"outside the range", "2026-11-23T08:00:00Z", `{"start":"9:00","stop":"17:00"}`, "", nil},
		{"outside the range, initial version", "2026-11-23T08:00:00Z", `{"start":"9:00","stop":"17:00","initial_version":true}`, "", []string{"2026-11-23T08:00:00Z"}},
		{"in the range once", "2026-11-23T09:30:00Z", `{"start":"9AM","stop":"5PM"}`, "2026-11-22T09:10:00Z", []string{"2026-11-22T09:10:00Z", "2026-11-23T09:30:00Z"}},
		{"already emitted in this range", "2026-11-23T12:00:00Z", `{"start":"9:00 AM","stop":"5:00 PM"}`, "2026-11-23T09:30:00Z", []string{"2026-11-23T09:30:00Z"}},
		{"range in a location", "2026-11-23T08:30:00Z", `{"start":"9:00","stop":"10:00","location":"Europe/Paris"}`, "", []string{"2026-11-23T08:30:00Z"}},
		{"range past midnight", "2026-11-24T01:00:00Z", `{"start":"2200","stop":"0200"}`, "2026-11-23T12:00:00Z", []string{"2026-11-23T12:00:00Z", "2026-11-24T01:00:00Z"}},
		{"wrong day", "2026-11-23T10:00:00Z", `{"interval":"1m","days":["Tuesday","saturday"]}`, "", nil},
		{"right day", "2026-11-23T10:00:00Z", `{"interval":"1m","days":["Monday"]}`, "", []string{"2026-11-23T10:00:00Z"}},
		{"interval in a range", "2026-11-23T10:00:00Z", `{"interval":"10m","start":"9:00","stop":"11:00"}`, "2026-11-23T09:55:00Z", []string{"2026-11-23T09:55:00Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := check(t, at(t, tc.now), tc.source, tc.prev)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("check = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestBadSource(t *testing.T) {
	now := time.Now()
	for source, want := range map[string]string{
		`{}`:                              "needs interval, or start and stop",
		`{"interval":"often"}`:            "often",
		`{"start":"9:00"}`:                "set both or neither",
		`{"start":"25:00","stop":"9:00"}`: "not a time of day",
		`{"interval":"1m","location":"Mars/Olympus"}`: "Mars/Olympus",
		`{"interval":"1m","days":["Funday"]}`:         "Funday",
		`{"interval":"1m","every":"day"}`:             `unknown field "every"`,
	} {
		if _, err := check(t, now, source, ""); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("source %s: err = %v, want it to mention %q", source, err, want)
		}
	}
}

func TestInOut(t *testing.T) {
	now := at(t, "2026-11-23T10:00:00Z")
	typ := &timeres.Type{Now: func() time.Time { return now }}
	dir := t.TempDir()
	resp, err := typ.In(context.Background(), dir, resource.InRequest{Source: json.RawMessage(`{"interval":"1m"}`), Version: resource.Version{"time": "2026-11-23T09:00:00Z"}}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Version["time"] != "2026-11-23T09:00:00Z" {
		t.Fatalf("in version = %v", resp.Version)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "timestamp")); strings.TrimSpace(string(b)) != "2026-11-23T09:00:00Z" {
		t.Fatalf("timestamp = %q", b)
	}
	resp, err = typ.Out(context.Background(), dir, resource.OutRequest{Source: json.RawMessage(`{"interval":"1m"}`)}, &bytes.Buffer{})
	if err != nil || resp.Version["time"] != "2026-11-23T10:00:00Z" {
		t.Fatalf("out = %v, %v", resp, err)
	}
}
