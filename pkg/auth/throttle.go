package auth

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"net"
	"net/http"
	"sync"
	"time"
)

// ThrottleLimit is a token bucket of failed logins: Burst failures at once,
// then one more every Every.
type ThrottleLimit struct {
	Burst int
	Every time.Duration
}

// ThrottleConfig limits failed logins per user name and per client address.
type ThrottleConfig struct {
	PerUser, PerAddress ThrottleLimit
	// MaxKeys bounds how many user names, and how many addresses, are
	// remembered; the least recently seen are forgotten first.
	MaxKeys int
}

// DefaultThrottleConfig lets a person mistype a few times without noticing,
// while a guesser gets a few bcrypt comparisons a minute rather than hundreds
// a second: 10 failures per user name, then one every 6 s; 40 per address,
// then one every 1.5 s. fly tries each login twice (golang.org/x/oauth2
// probes the client authentication style, Basic then form, on any error), so
// a person's failed `fly login` counts two.
func DefaultThrottleConfig() ThrottleConfig {
	return ThrottleConfig{
		PerUser:    ThrottleLimit{Burst: 10, Every: 6 * time.Second},
		PerAddress: ThrottleLimit{Burst: 40, Every: 1500 * time.Millisecond},
		MaxKeys:    10000,
	}
}

// Throttle counts failed logins per user and per client address, in bounded
// memory and without a goroutine: buckets refill lazily, and an LRU forgets
// the keys seen least recently (a forgotten key is a full bucket, which is
// what it would have refilled to anyway, unless under a flood of keys).
type Throttle struct {
	cfg ThrottleConfig
	now func() time.Time

	mu           sync.Mutex
	users, addrs *lru
}

// NewThrottle makes a Throttle reading the time from now (time.Now if nil).
func NewThrottle(cfg ThrottleConfig, now func() time.Time) *Throttle {
	if now == nil {
		now = time.Now
	}
	if cfg.MaxKeys < 1 {
		cfg.MaxKeys = 1
	}
	return &Throttle{cfg: cfg, now: now, users: newLRU(cfg.MaxKeys), addrs: newLRU(cfg.MaxKeys)}
}

// Begin reserves one failure of user's and of addr's allowance before a
// password is checked, so concurrent guesses cannot all pass before the
// first failure is counted. If either allowance is spent it reserves nothing
// and says how long to wait. A login that then succeeds calls Succeeded.
func (t *Throttle) Begin(user, addr string) (wait time.Duration, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	ub := t.users.get(throttleKey(user), t.cfg.PerUser, now)
	ab := t.addrs.get(throttleKey(addr), t.cfg.PerAddress, now)
	uw, aw := ub.wait(t.cfg.PerUser, now), ab.wait(t.cfg.PerAddress, now)
	if uw > 0 || aw > 0 {
		return max(uw, aw), false
	}
	ub.take(t.cfg.PerUser, now)
	ab.take(t.cfg.PerAddress, now)
	return 0, true
}

// Succeeded gives back what Begin reserved for a login that succeeded, and
// forgets the user's earlier failures: the person got in.
func (t *Throttle) Succeeded(user, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.users.remove(throttleKey(user))
	if b := t.addrs.peek(throttleKey(addr)); b != nil {
		b.give(t.cfg.PerAddress, t.now())
	}
}

// throttleKey bounds the memory a key takes: a form may send a long name.
func throttleKey(s string) string {
	if len(s) <= 64 {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// bucket holds tokens as of at; each failure takes one.
type bucket struct {
	tokens float64
	at     time.Time
}

func (b *bucket) level(l ThrottleLimit, now time.Time) float64 {
	if l.Every <= 0 {
		return float64(l.Burst)
	}
	return math.Min(float64(l.Burst), b.tokens+float64(now.Sub(b.at))/float64(l.Every))
}

// wait is how long until a token is there, 0 if one is.
func (b *bucket) wait(l ThrottleLimit, now time.Time) time.Duration {
	missing := 1 - b.level(l, now)
	if missing <= 0 {
		return 0
	}
	if l.Every <= 0 {
		return time.Second // Burst < 1: never; say "later"
	}
	return time.Duration(math.Ceil(missing * float64(l.Every)))
}

func (b *bucket) take(l ThrottleLimit, now time.Time) { b.tokens, b.at = b.level(l, now)-1, now }
func (b *bucket) give(l ThrottleLimit, now time.Time) {
	b.tokens, b.at = math.Min(float64(l.Burst), b.level(l, now)+1), now
}

// lru is a bounded map of buckets, least recently used dropped first.
type lru struct {
	max   int
	order *list.List // of *lruEntry, most recent first
	index map[string]*list.Element
}

type lruEntry struct {
	key string
	b   bucket
}

func newLRU(max int) *lru {
	return &lru{max: max, order: list.New(), index: map[string]*list.Element{}}
}

// get returns key's bucket, a full one if key is new.
func (c *lru) get(key string, l ThrottleLimit, now time.Time) *bucket {
	if e, ok := c.index[key]; ok {
		c.order.MoveToFront(e)
		return &e.Value.(*lruEntry).b
	}
	for c.order.Len() >= c.max {
		oldest := c.order.Back()
		delete(c.index, oldest.Value.(*lruEntry).key)
		c.order.Remove(oldest)
	}
	e := c.order.PushFront(&lruEntry{key: key, b: bucket{tokens: float64(l.Burst), at: now}})
	c.index[key] = e
	return &e.Value.(*lruEntry).b
}

func (c *lru) peek(key string) *bucket {
	if e, ok := c.index[key]; ok {
		return &e.Value.(*lruEntry).b
	}
	return nil
}

func (c *lru) remove(key string) {
	if e, ok := c.index[key]; ok {
		delete(c.index, key)
		c.order.Remove(e)
	}
}

func (c *lru) len() int { return c.order.Len() }

// clientAddress is the address a request came from: the connection's peer,
// not a header a client could set.
func clientAddress(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
