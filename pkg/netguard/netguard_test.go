package netguard

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	allowed, err := ParseNetworks([]string{"127.0.0.2/32, 10.9.0.0/16", "::1"})
	if err != nil {
		t.Fatal(err)
	}
	g := Guard{Allowed: allowed, Flag: "var-source-allowed-networks"}
	for _, c := range []struct {
		ip, kind string // kind "" : allowed
	}{
		{"127.0.0.1", "loopback"}, {"127.0.0.2", ""}, {"::1", ""}, {"::ffff:127.0.0.1", "loopback"},
		{"169.254.169.254", "link-local"}, {"fe80::1", "link-local"}, {"0.0.0.0", "unspecified"}, {"::", "unspecified"},
		{"239.1.2.3", "multicast"}, {"10.0.0.1", ""}, {"192.168.1.1", ""}, {"203.0.113.9", ""},
		{"100.100.100.200", "cloud metadata"}, {"fd00:ec2::254", "cloud metadata"}, {"::ffff:100.100.100.200", "cloud metadata"},
		{"100.100.100.201", ""}, {"fd00::1", ""},
	} {
		err := g.Check(netip.MustParseAddr(c.ip))
		var re *RefusedError
		switch {
		case c.kind == "" && err != nil:
			t.Errorf("%s: refused: %v", c.ip, err)
		case c.kind != "" && (!errors.As(err, &re) || re.Kind != c.kind):
			t.Errorf("%s: %v, want refused as %s", c.ip, err, c.kind)
		case c.kind != "" && !strings.Contains(err.Error(), "--var-source-allowed-networks"):
			t.Errorf("%s: %v does not name the flag", c.ip, err)
		}
	}
	if _, err := ParseNetworks([]string{"not-a-net"}); err == nil || !strings.Contains(err.Error(), `"not-a-net"`) {
		t.Errorf("ParseNetworks of garbage: %v", err)
	}
}

// A real HTTP client dialling through the guard: a name that resolves to
// loopback is refused when the connection is made, and so is a redirect
// from an allowed address to a refused one.
func TestControlRefusesAtDial(t *testing.T) {
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("secret")) }))
	defer target.Close()
	client := func(g Guard) *http.Client {
		tr := &http.Transport{DialContext: (&net.Dialer{Control: g.Control}).DialContext}
		return &http.Client{Transport: tr}
	}
	_, port, _ := net.SplitHostPort(target.Listener.Addr().String())
	var re *RefusedError
	_, err := client(Guard{}).Get("http://localhost:" + port + "/")
	if !errors.As(err, &re) {
		t.Fatalf("localhost: %v, want refused", err)
	}
	// Allowed: the same server is reached.
	resp, err := client(Guard{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}).Get(target.URL)
	if err != nil {
		t.Fatalf("allowed loopback: %v", err)
	}
	resp.Body.Close()

	// A redirect from an allowed address (127.0.0.2) to a refused one.
	redirect := httptest.NewUnstartedServer(http.RedirectHandler(target.URL, http.StatusFound))
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no 127.0.0.2 here: %v", err)
	}
	redirect.Listener = l
	redirect.Start()
	defer redirect.Close()
	_, err = client(Guard{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}}).Get(redirect.URL)
	if !errors.As(err, &re) || re.Addr.String() != "127.0.0.1" {
		t.Fatalf("redirect to 127.0.0.1: %v, want refused", err)
	}
}
