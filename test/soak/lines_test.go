package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func numbered(tag string, from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "soak %s line %d\n", tag, i)
	}
	return b.String()
}

func TestCheckLines(t *testing.T) {
	all := numbered("left", 1, linesPerTask)
	interleaved := ""
	for i := 1; i <= linesPerTask; i++ {
		interleaved += numbered("left", i, i) + "noise\n" + numbered("right", i, i)
	}
	for _, tc := range []struct {
		name, out string
		want      map[string]bool
		problem   string
	}{
		{"complete", all, map[string]bool{"left": true}, ""},
		{"two tags interleaved", interleaved, map[string]bool{"left": true, "right": true}, ""},
		{"any tags", interleaved, nil, ""},
		{"a line twice", numbered("left", 1, 5) + numbered("left", 5, linesPerTask), nil, "tag left: line 5 after line 5"},
		{"a line missing", numbered("left", 1, 5) + numbered("left", 7, linesPerTask), nil, "tag left: line 7 after line 5"},
		{"cut short", numbered("left", 1, 5), nil, "tag left: 5 of 20 lines"},
		{"a wanted tag absent", all, map[string]bool{"left": true, "right": true}, "tag right: 0 of 20 lines"},
		{"an unwanted tag", interleaved, map[string]bool{"left": true}, "unexpected tag right (20 lines)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkLines(tc.out, tc.want); got != tc.problem {
				t.Fatalf("checkLines = %q, want %q", got, tc.problem)
			}
		})
	}
}

func TestParseFaults(t *testing.T) {
	if got, err := parseFaults("all"); err != nil || len(got) != len(allFaults) {
		t.Fatalf("all: %v %v", got, err)
	}
	if got, err := parseFaults("none"); err != nil || len(got) != 0 {
		t.Fatalf("none: %v %v", got, err)
	}
	if got, err := parseFaults("kubelet, minio"); err != nil || strings.Join(got, ",") != "kubelet,minio" {
		t.Fatalf("kubelet, minio: %v %v", got, err)
	}
	if _, err := parseFaults("kubelet,etcd"); err == nil || !strings.Contains(err.Error(), `unknown fault "etcd"`) {
		t.Fatalf("etcd: %v", err)
	}
}

func TestServerLogAbout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "atc.log")
	log := `msg="resuming build" build=16
msg="step pod created" step=b163-sleep-5af05b
msg="build finished" build=163 status=aborted
msg="server stopping: build left to resume" build=163
msg="build finished" build=1630 status=succeeded
`
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	got := serverLogAbout(path, []int64{163}, 2)[163]
	want := []string{`msg="build finished" build=163 status=aborted`, `msg="server stopping: build left to resume" build=163`}
	if !slices.Equal(got, want) {
		t.Errorf("serverLogAbout = %q, want %q", got, want)
	}
	if got := serverLogAbout(path, []int64{163}, 8)[163]; len(got) != 3 {
		t.Errorf("all lines about build 163: %q", got)
	}
	// Several builds, one read: each gets its own lines.
	both := serverLogAbout(path, []int64{16, 163}, 8)
	if len(both[16]) != 1 || len(both[163]) != 3 {
		t.Errorf("lines about builds 16 and 163: %v", both)
	}
}
