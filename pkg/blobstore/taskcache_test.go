package blobstore

import (
	"strings"
	"testing"
)

func TestTaskCacheKey(t *testing.T) {
	for _, c := range []struct {
		team, pipeline, job, step, path string
		want                            string // "" when refused
	}{
		{"main", "p", "j", "unit", "cache", "task-caches/main/p/j/unit/cache.tar.zst"},
		{"main", "p", "j", "unit", "/a/./b/", "task-caches/main/p/j/unit/a/b.tar.zst"},
		{"main", "", "", "unit", "cache", "task-caches/main/_/_/unit/cache.tar.zst"},
		{"main", "p", "j", "../../other", "cache", ""},
		{"main", "", "", "../../other", "cache", ""},
		{"main", "p", "j", "a/b", "cache", ""},
		{"main", "p", "j", "", "cache", ""},
		{"main", "p", "", "unit", "cache", ""}, // a pipeline without a job
		{"main", "..", "j", "unit", "cache", ""},
		{"main", "p", "j", "unit", "../../../x", ""},
		{"main", "p", "j", "unit", "a/../..", ""},
		{"main", "p", "j", "unit", ".", ""},
		{"main", "p", "j", "unit", "", ""},
		{"main", "p", "j", `..\x`, "cache", ""},
		{"main", "p", "j\x00", "unit", "cache", ""},
		{"main", "p", "j", "unit\n", "cache", ""},
		{"main", "p", "j", "unit", "a\x00b", ""},
		{"main", "p", strings.Repeat("j", 256), "unit", "cache", ""},
	} {
		got, err := CheckedTaskCacheKey(c.team, c.pipeline, c.job, c.step, c.path)
		if c.want == "" {
			if err == nil {
				t.Errorf("CheckedTaskCacheKey(%q, %q, %q, %q, %q) = %q, want an error", c.team, c.pipeline, c.job, c.step, c.path, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("CheckedTaskCacheKey(%q, %q, %q, %q, %q) = %q, %v; want %q", c.team, c.pipeline, c.job, c.step, c.path, got, err, c.want)
		}
		// Every key stays under its step's prefix, which clear-task-cache deletes.
		names := []string{c.team, c.pipeline, c.job, c.step}
		if c.pipeline == "" {
			names = []string{c.team, "_", "_", c.step}
		}
		if prefix, _ := TaskCachePrefix(names...); !strings.HasPrefix(got, prefix) {
			t.Errorf("key %q is not under %q", got, prefix)
		}
	}
}

// Instances of one pipeline get segments of their own, the same vars the
// same one whatever their order, and a plain pipeline keeps its name.
func TestTaskCachePipeline(t *testing.T) {
	if got := TaskCachePipeline("p", nil); got != "p" {
		t.Errorf("plain pipeline: %q, want %q", got, "p")
	}
	a := TaskCachePipeline("p", map[string]any{"branch": "a", "n": 1.0})
	again := TaskCachePipeline("p", map[string]any{"n": 1.0, "branch": "a"})
	b := TaskCachePipeline("p", map[string]any{"branch": "b", "n": 1.0})
	if a != again || a == b || !strings.HasPrefix(a, "p@") {
		t.Errorf("instances: a %q, a again %q, b %q: want stable, distinct p@ segments", a, again, b)
	}
	if _, err := TaskCachePrefix("main", a); err != nil {
		t.Errorf("an instance's segment is no key segment: %v", err)
	}
}
