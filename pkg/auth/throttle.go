package auth

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// ThrottleLimit is a token bucket of failed logins: Burst failures at once,
// then one more every Every.
type ThrottleLimit struct {
	Burst int
	Every time.Duration
}

// ThrottleConfig limits failed logins. A guesser is slowed per user name
// and address; the user's owner, logging in from elsewhere, is not: a
// user name's own allowance across all addresses, once spent, shuts out
// only addresses the user has never logged in from.
type ThrottleConfig struct {
	// PerUserAddress limits the failures of one user name from one address
	// (an IPv6 address's /64, which one host is usually given whole).
	PerUserAddress ThrottleLimit
	// PerAddress limits the failures from one address, whatever the names.
	PerAddress ThrottleLimit
	// PerUser limits one user name's failures from all addresses together:
	// guessing spread over many addresses. Once spent, only addresses the
	// user logged in from within KnownFor may try.
	PerUser ThrottleLimit
	// KnownFor is how long an address the user logged in from is known.
	KnownFor time.Duration
	// MaxKeys bounds how many keys of each kind are remembered; the least
	// recently seen are forgotten first.
	MaxKeys int
}

// DefaultThrottleConfig lets a person mistype a few times without noticing,
// while a guesser gets a few bcrypt comparisons a minute rather than hundreds
// a second: 10 failures per user name and address, then one every 6 s; 40
// per address, then one every 1.5 s; 60 per user name from anywhere, then
// one every 10 s (8,640 a day however many addresses guess), past which the
// addresses the user logged in from in the last 30 days still get their
// own allowance. fly tries each login twice (golang.org/x/oauth2 probes the
// client authentication style, Basic then form, on any error), so a
// person's failed `fly login` counts two.
func DefaultThrottleConfig() ThrottleConfig {
	return ThrottleConfig{
		PerUserAddress: ThrottleLimit{Burst: 10, Every: 6 * time.Second},
		PerAddress:     ThrottleLimit{Burst: 40, Every: 1500 * time.Millisecond},
		PerUser:        ThrottleLimit{Burst: 60, Every: 10 * time.Second},
		KnownFor:       30 * 24 * time.Hour,
		MaxKeys:        10000,
	}
}

// Throttle counts failed logins, in bounded memory and without a
// goroutine: buckets refill lazily, and LRUs forget the keys seen least
// recently (a forgotten key is a full bucket, which is what it would have
// refilled to anyway, unless under a flood of keys).
type Throttle struct {
	cfg ThrottleConfig
	now func() time.Time

	mu sync.Mutex
	// userAddrs, addrs and users hold the buckets of each limit; known
	// holds, per user name and address, the last successful login (its
	// bucket's at).
	userAddrs, addrs, users, known *lru
}

// NewThrottle makes a Throttle reading the time from now (time.Now if nil).
func NewThrottle(cfg ThrottleConfig, now func() time.Time) *Throttle {
	if now == nil {
		now = time.Now
	}
	if cfg.MaxKeys < 1 {
		cfg.MaxKeys = 1
	}
	return &Throttle{cfg: cfg, now: now, userAddrs: newLRU(cfg.MaxKeys), addrs: newLRU(cfg.MaxKeys),
		users: newLRU(cfg.MaxKeys), known: newLRU(cfg.MaxKeys)}
}

// Begin reserves one failure of each allowance before a password is
// checked, so concurrent guesses cannot all pass before the first failure
// is counted. If one is spent it reserves nothing and says how long to
// wait. A login that then succeeds calls Succeeded.
func (t *Throttle) Begin(user, addr string) (wait time.Duration, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	addr = addressKey(addr)
	uk, ak, uak := throttleKey(user), throttleKey(addr), throttleKey(user+"\x00"+addr)
	uab := t.userAddrs.get(uak, t.cfg.PerUserAddress, now)
	ab := t.addrs.get(ak, t.cfg.PerAddress, now)
	ub := t.users.get(uk, t.cfg.PerUser, now)
	uw := ub.wait(t.cfg.PerUser, now)
	if uw > 0 && t.knownAddress(uak, now) {
		// The user's own address: its allowance per address is enough.
		uw = 0
	}
	uaw, aw := uab.wait(t.cfg.PerUserAddress, now), ab.wait(t.cfg.PerAddress, now)
	if uaw > 0 || aw > 0 || uw > 0 {
		return max(uaw, aw, uw), false
	}
	uab.take(t.cfg.PerUserAddress, now)
	ab.take(t.cfg.PerAddress, now)
	if ub.level(t.cfg.PerUser, now) >= 1 {
		ub.take(t.cfg.PerUser, now)
	}
	return 0, true
}

// Succeeded gives back what Begin reserved for a login that succeeded,
// forgets the user's earlier failures from that address (the person got
// in) and remembers the address as the user's.
func (t *Throttle) Succeeded(user, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	addr = addressKey(addr)
	uak := throttleKey(user + "\x00" + addr)
	t.userAddrs.remove(uak)
	if b := t.addrs.peek(throttleKey(addr)); b != nil {
		b.give(t.cfg.PerAddress, now)
	}
	if b := t.users.peek(throttleKey(user)); b != nil {
		b.give(t.cfg.PerUser, now)
	}
	t.known.get(uak, ThrottleLimit{}, now).at = now
}

func (t *Throttle) knownAddress(key string, now time.Time) bool {
	b := t.known.peek(key)
	return b != nil && now.Sub(b.at) < t.cfg.KnownFor
}

// addressKey is what an address is throttled as: an IPv4 address itself,
// an IPv6 address's /64 (a host gets a /64, and could spread its guesses
// over it).
func addressKey(addr string) string {
	ip, err := netip.ParseAddr(addr)
	if err != nil || !ip.Is6() || ip.Is4In6() {
		return addr
	}
	prefix, err := ip.Prefix(64)
	if err != nil {
		return addr
	}
	return prefix.String()
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
