package auth

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func testThrottle(clk *clock) *Throttle {
	return NewThrottle(ThrottleConfig{
		PerUserAddress: ThrottleLimit{Burst: 3, Every: 10 * time.Second},
		PerAddress:     ThrottleLimit{Burst: 5, Every: 2 * time.Second},
		PerUser:        ThrottleLimit{Burst: 8, Every: 10 * time.Second},
		KnownFor:       time.Hour,
		MaxKeys:        100,
	}, clk.now)
}

// A guesser at one address is slowed for the name it guesses; the name's
// owner, at another address, is not locked out by it.
func TestThrottleUserPerAddress(t *testing.T) {
	clk := &clock{time.Unix(1_000_000, 0)}
	th := testThrottle(clk)
	for i := range 3 {
		if _, ok := th.Begin("alice", "10.0.0.1"); !ok {
			t.Fatalf("failure %d refused within the burst", i+1)
		}
	}
	wait, ok := th.Begin("alice", "10.0.0.1")
	if ok || wait != 10*time.Second {
		t.Fatalf("4th failure from the same address: ok=%v wait=%v, want refused for 10s", ok, wait)
	}
	// The owner, elsewhere, tries as usual.
	if _, ok := th.Begin("alice", "10.0.0.2"); !ok {
		t.Fatal("alice refused at 10.0.0.2 for a guesser's failures at 10.0.0.1")
	}
	th.Succeeded("alice", "10.0.0.2")
	// Another user from the first address is not the user's business.
	if _, ok := th.Begin("bob", "10.0.0.1"); !ok {
		t.Fatal("bob refused for alice's failures")
	}
	clk.t = clk.t.Add(4 * time.Second)
	if wait, ok := th.Begin("alice", "10.0.0.1"); ok || wait != 6*time.Second {
		t.Fatalf("after 4s: ok=%v wait=%v, want refused for 6s", ok, wait)
	}
	clk.t = clk.t.Add(6 * time.Second)
	if _, ok := th.Begin("alice", "10.0.0.1"); !ok {
		t.Fatal("refused once a failure refilled")
	}
	if _, ok := th.Begin("alice", "10.0.0.1"); ok {
		t.Fatal("a second attempt passed on one refilled failure")
	}
}

// Guessing one name from many addresses spends the name's own allowance:
// then new addresses wait, and the addresses the user logged in from
// still try within their own allowance.
func TestThrottleUserAcrossAddresses(t *testing.T) {
	clk := &clock{time.Unix(1_000_000, 0)}
	th := testThrottle(clk)
	if _, ok := th.Begin("alice", "192.0.2.1"); !ok {
		t.Fatal("alice's first login refused")
	}
	th.Succeeded("alice", "192.0.2.1")
	for i := range 8 {
		if _, ok := th.Begin("alice", fmt.Sprintf("10.1.0.%d", i)); !ok {
			t.Fatalf("failure %d refused within the user's burst", i+1)
		}
	}
	if wait, ok := th.Begin("alice", "10.1.0.100"); ok || wait != 10*time.Second {
		t.Fatalf("a 9th address: ok=%v wait=%v, want refused for 10s", ok, wait)
	}
	for i := range 3 {
		if _, ok := th.Begin("alice", "192.0.2.1"); !ok {
			t.Fatalf("alice's known address refused at try %d, within its own allowance", i+1)
		}
	}
	if _, ok := th.Begin("alice", "192.0.2.1"); ok {
		t.Fatal("alice's known address passed beyond its own allowance")
	}
	// Known for KnownFor only.
	clk.t = clk.t.Add(2 * time.Hour)
	for i := range 8 {
		th.Begin("alice", fmt.Sprintf("10.2.0.%d", i))
	}
	if _, ok := th.Begin("alice", "192.0.2.1"); ok {
		t.Fatal("an address known two hours ago, past KnownFor of an hour, bypassed the user's allowance")
	}
}

// An IPv6 host's /64 is one address: rotating within it does not reset
// the allowance.
func TestThrottleIPv6Slash64(t *testing.T) {
	clk := &clock{time.Unix(1_000_000, 0)}
	th := testThrottle(clk)
	for i := range 3 {
		if _, ok := th.Begin("alice", fmt.Sprintf("2001:db8:1:2::%x", i+1)); !ok {
			t.Fatalf("failure %d refused within the burst", i+1)
		}
	}
	if _, ok := th.Begin("alice", "2001:db8:1:2:ffff::9"); ok {
		t.Fatal("another address of the same /64 got a fresh allowance")
	}
	if _, ok := th.Begin("alice", "2001:db8:1:3::1"); !ok {
		t.Fatal("another /64 refused")
	}
}

func TestThrottlePerAddress(t *testing.T) {
	clk := &clock{time.Unix(1_000_000, 0)}
	th := testThrottle(clk)
	// Spraying names from one address: the address's allowance ends it.
	for i := range 5 {
		if _, ok := th.Begin("user"+string(rune('a'+i)), "192.0.2.7"); !ok {
			t.Fatalf("failure %d refused within the address's burst", i+1)
		}
	}
	wait, ok := th.Begin("fresh", "192.0.2.7")
	if ok || wait != 2*time.Second {
		t.Fatalf("6th: ok=%v wait=%v, want refused for 2s", ok, wait)
	}
	// The refusal took nothing from the user it named.
	for i := range 3 {
		if _, ok := th.Begin("fresh", "192.0.2.8"); !ok {
			t.Fatalf("fresh's failure %d from another address refused", i+1)
		}
	}
}

func TestThrottleSuccessGivesBack(t *testing.T) {
	clk := &clock{time.Unix(1_000_000, 0)}
	th := testThrottle(clk)
	for range 2 {
		th.Begin("alice", "10.0.0.1") // two typos
	}
	th.Begin("alice", "10.0.0.1")
	th.Succeeded("alice", "10.0.0.1") // then the right password
	// The user's slate is clean, and successes cost the address nothing:
	// many logins from one address (CI behind NAT) are fine.
	for i := range 20 {
		if _, ok := th.Begin("alice", "10.0.0.1"); !ok {
			t.Fatalf("login %d after success refused", i+1)
		}
		th.Succeeded("alice", "10.0.0.1")
	}
}

func TestThrottleMemoryIsBounded(t *testing.T) {
	clk := &clock{time.Unix(1_000_000, 0)}
	th := NewThrottle(ThrottleConfig{PerUserAddress: ThrottleLimit{Burst: 1, Every: time.Hour}, PerUser: ThrottleLimit{Burst: 1, Every: time.Hour},
		PerAddress: ThrottleLimit{Burst: 1 << 30, Every: time.Second}, MaxKeys: 50}, clk.now)
	long := strings.Repeat("x", 60<<10)
	for i := range 1000 {
		th.Begin(long+string(rune(i)), "10.0.0.1")
	}
	if n := th.users.len(); n != 50 {
		t.Fatalf("%d users remembered, want the bound of 50", n)
	}
	for e := th.users.order.Front(); e != nil; e = e.Next() {
		if k := e.Value.(*lruEntry).key; len(k) > 80 {
			t.Fatalf("a key of %d bytes is kept", len(k))
		}
	}
	// The most recent is still throttled.
	if _, ok := th.Begin(long+string(rune(999)), "10.0.0.1"); ok {
		t.Fatal("the most recent user was forgotten")
	}
}

// TestTokenLoginThrottled: past the allowance, the token endpoint answers 429
// with Retry-After before it looks the user up (so no bcrypt runs), even for
// the right password, and lets the person in once the wait is over.
func TestTokenLoginThrottled(t *testing.T) {
	clk := &clock{time.Now()}
	th := testThrottle(clk)
	srv, _, users := tokenServerWith(t, th)
	wrong := strings.Replace(flyLoginBody, "password=test", "password=nope", 1)
	for i := range 3 {
		if resp := flyTokenRequest(t, srv.URL, wrong, flyBasic); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong password %d: status %d, want 401", i+1, resp.StatusCode)
		}
	}
	users.set(func(u *memUsers) { u.down = true }) // a lookup now would be a 500
	for _, body := range []string{wrong, flyLoginBody} {
		resp := flyTokenRequest(t, srv.URL, body, flyBasic)
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("throttled login: status %d %s, want 429", resp.StatusCode, b)
		}
		if ra := resp.Header.Get("Retry-After"); ra != "10" {
			t.Errorf("Retry-After %q, want 10", ra)
		}
		var e oauthError
		if err := json.Unmarshal(b, &e); err != nil || e.Error != "temporarily_unavailable" || !strings.Contains(e.Description, "too many failed logins") {
			t.Errorf("body %s (%v)", b, err)
		}
	}
	users.set(func(u *memUsers) { u.down = false })
	clk.t = clk.t.Add(10 * time.Second)
	if resp := flyTokenRequest(t, srv.URL, flyLoginBody, flyBasic); resp.StatusCode != http.StatusOK {
		t.Fatalf("login after the wait: status %d, want 200", resp.StatusCode)
	}
}
