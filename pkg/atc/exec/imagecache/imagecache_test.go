package imagecache

import (
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/concourse"
)

func TestImageCacheExpires(t *testing.T) {
	now := time.Unix(1000, 0)
	c := New(time.Minute, 10)
	c.now = func() time.Time { return now }
	c.Put("k", "sha256:1")
	if d, ok := c.Get("k"); !ok || d != "sha256:1" {
		t.Fatalf("get = %q, %v right after put", d, ok)
	}
	now = now.Add(59 * time.Second)
	if _, ok := c.Get("k"); !ok {
		t.Error("entry gone before its TTL")
	}
	now = now.Add(time.Second)
	if d, ok := c.Get("k"); ok {
		t.Errorf("get = %q after the TTL", d)
	}
	if len(c.entries) != 0 {
		t.Errorf("expired entry still held: %v", c.entries)
	}
}

func TestImageCacheIsBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	c := New(time.Minute, 3)
	c.now = func() time.Time { return now }
	for _, k := range []string{"a", "b", "c"} {
		c.Put(k, "sha256:"+k)
		now = now.Add(time.Second)
	}
	// Full: the entry that expires soonest goes.
	c.Put("d", "sha256:d")
	if _, ok := c.Get("a"); ok {
		t.Error("oldest entry kept in a full cache")
	}
	for _, k := range []string{"b", "c", "d"} {
		if _, ok := c.Get(k); !ok {
			t.Errorf("entry %s dropped", k)
		}
	}
	// Updating a held entry drops nothing.
	c.Put("b", "sha256:b2")
	if d, _ := c.Get("b"); d != "sha256:b2" || len(c.entries) != 3 {
		t.Errorf("after update: b = %q, %d entries", d, len(c.entries))
	}
	// Expired entries go first, all of them.
	now = now.Add(2 * time.Minute)
	c.Put("e", "sha256:e")
	if len(c.entries) != 1 {
		t.Errorf("%d entries after the others expired, want 1", len(c.entries))
	}
}

func TestImageCacheKey(t *testing.T) {
	base := concourse.TypeImage{BaseType: "registry-image"}
	src := map[string]any{"repository": "busybox"}
	key := func(team int, typ string, ti concourse.TypeImage, types []concourse.ResourceType, source map[string]any) string {
		t.Helper()
		k, err := Key(team, typ, ti, types, source)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	k := key(1, "registry-image", base, nil, src)
	if k != key(1, "registry-image", base, nil, map[string]any{"repository": "busybox"}) {
		t.Error("same resolution, different keys")
	}
	// Plan ids differ from build to build; they are not part of the key.
	other := base
	other.CheckPlan = nil
	if k != key(1, "registry-image", other, []concourse.ResourceType{{Name: "unused", Type: "registry-image"}}, src) {
		t.Error("a base type's key depends on the pipeline's other types")
	}
	for name, k2 := range map[string]string{
		"team":   key(2, "registry-image", base, nil, src),
		"type":   key(1, "docker-image", base, nil, src),
		"source": key(1, "registry-image", base, nil, map[string]any{"repository": "busybox", "tag": "1.36"}),
		"custom": key(1, "my-image", concourse.TypeImage{CheckPlan: &concourse.Plan{ID: "x"}}, []concourse.ResourceType{{Name: "my-image", Type: "registry-image"}}, src),
	} {
		if k2 == k {
			t.Errorf("another %s gives the same key", name)
		}
	}
}
