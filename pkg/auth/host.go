package auth

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/porter-ci/porter/pkg/httpreply"
)

// RefuseForeignHost answers 400 to a request whose Host header names neither
// externalURL's host nor an address: a DNS rebinding page (a name of the
// attacker's that resolves to this server) sends its own name as Host and,
// as Origin, the same name, which the cross-origin check would otherwise
// take for this server. IP literals and "localhost" are accepted, whatever
// the port, since no rebinding can produce them: a browser sends them only
// to a page that really is at that address (kubelet probes and port-forwards
// send them too). A request without Host (HTTP/1.0) is no browser's and
// passes. Paths in exempt (e.g. /healthz) are never checked.
func RefuseForeignHost(externalURL string, exempt ...string) func(http.Handler) http.Handler {
	want := ""
	if u, err := url.Parse(externalURL); err == nil {
		want = normalHost(u.Hostname())
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Host == "" || slices.Contains(exempt, r.URL.Path) || hostAllowed(r.Host, want) {
				next.ServeHTTP(w, r)
				return
			}
			msg := fmt.Sprintf("host %q is not this server", r.Host)
			if want != "" {
				msg += fmt.Sprintf(": reach it at %s (its --external-url)", externalURL)
			}
			httpreply.Text(w, http.StatusBadRequest, msg)
		})
	}
}

func hostAllowed(hostport, want string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = normalHost(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	if host == "" {
		return false
	}
	if want != "" && host == want {
		return true
	}
	return host == "localhost" || net.ParseIP(host) != nil
}

// normalHost compares names as DNS does: without case or a final dot.
func normalHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(h), ".")
}
