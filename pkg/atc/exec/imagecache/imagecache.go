// Package imagecache remembers, for a short while and in memory, the
// digests that image checks found for a task's image_resource, so that a
// build's tasks and the next builds do not check again (each server keeps
// its own).
package imagecache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/porter-ci/porter/pkg/concourse"
)

// Key identifies an image resolution: the team (a team's
// registry credentials answer only its own tasks), the type (with the
// pipeline's resource types when it is one of them) and the source.
func Key(teamID int, typ string, ti concourse.TypeImage, types []concourse.ResourceType, source map[string]any) (string, error) {
	var custom []concourse.ResourceType
	if ti.CheckPlan != nil || ti.GetPlan != nil {
		custom = types
	}
	body, err := json.Marshal(struct {
		Team   int                      `json:"team"`
		Type   string                   `json:"type"`
		Types  []concourse.ResourceType `json:"types,omitempty"`
		Source map[string]any           `json:"source"`
	}{teamID, typ, custom, source})
	if err != nil {
		return "", fmt.Errorf("image cache key: %w", err)
	}
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:]), nil
}

// Cache remembers the digests image checks found, for a short while,
// in memory: each server checks on its own.
type Cache struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu      sync.Mutex
	entries map[string]entry
}

type entry struct {
	digest  string
	expires time.Time
}

// New is a cache keeping each digest for ttl, at most max of them.
func New(ttl time.Duration, max int) *Cache {
	return &Cache{ttl: ttl, max: max, now: time.Now, entries: map[string]entry{}}
}

// Get is the digest kept under key, if it has not expired.
func (c *Cache) Get(key string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		return "", false
	}
	if !c.now().Before(e.expires) {
		delete(c.entries, key)
		return "", false
	}
	return e.digest, true
}

// Put keeps a digest; a full cache first drops what expired, then what
// expires soonest.
func (c *Cache) Put(key, digest string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if _, ok := c.entries[key]; !ok && len(c.entries) >= c.max {
		for k, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, k)
			}
		}
		for len(c.entries) >= c.max {
			oldest := ""
			for k, e := range c.entries {
				if oldest == "" || e.expires.Before(c.entries[oldest].expires) {
					oldest = k
				}
			}
			delete(c.entries, oldest)
		}
	}
	c.entries[key] = entry{digest: digest, expires: now.Add(c.ttl)}
}
