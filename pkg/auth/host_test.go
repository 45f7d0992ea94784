package auth

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestRefuseForeignHost(t *testing.T) {
	h := RefuseForeignHost("https://CI.example.com:8443", "/healthz")(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	tests := []struct {
		host, path string
		want       int
	}{
		{"ci.example.com:8443", "/api/v1/info", 200},
		{"ci.example.com", "/api/v1/info", 200}, // a proxy may drop or change the port
		{"CI.Example.COM.:443", "/api/v1/info", 200},
		{"127.0.0.1:8080", "/api/v1/info", 200}, // local fly, port-forward
		{"[::1]:8080", "/api/v1/info", 200},
		{"10.244.0.17:8080", "/api/v1/teams", 200}, // an address: no rebinding makes one
		{"localhost:8080", "/api/v1/info", 200},
		{"", "/api/v1/info", 200}, // HTTP/1.0, no browser
		{"rebind.attacker.example:8080", "/api/v1/teams", 400},
		{"ci.example.com.attacker.example", "/api/v1/teams", 400},
		{"rebind.attacker.example", "/sky/issuer/token", 400},
		{"rebind.attacker.example", "/healthz", 200},
	}
	for _, tt := range tests {
		t.Run(tt.host+tt.path, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, tt.path, nil)
			req.Host = tt.host
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.want, rec.Body)
			}
			if tt.want == 400 {
				body := rec.Body.String()
				if !strings.Contains(body, `host "`+tt.host+`" is not this server`) || !strings.Contains(body, "https://CI.example.com:8443") {
					t.Errorf("unclear refusal: %q", body)
				}
			}
		})
	}
}

// TestForeignHostCannotPassTheOriginCheck is the DNS rebinding case in the
// server's order: the Host check runs first, so an Origin matching a forged
// Host is never trusted.
func TestForeignHostCannotPassTheOriginCheck(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	h := RefuseForeignHost("http://10.245.0.1:30880")(RefuseCrossOrigin("http://10.245.0.1:30880")(ok))
	req := httptest.NewRequest(http.MethodPost, "/api/v1/teams/main/builds", strings.NewReader("{}"))
	req.Host = "rebind.attacker.example:30880"
	req.Header.Set("Origin", "http://rebind.attacker.example:30880")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest {
		t.Fatalf("rebound POST: %d %s, want 400", rec.Code, rec.Body)
	}
	// Without the Host check the origin check alone lets it through.
	rec = httptest.NewRecorder()
	RefuseCrossOrigin("http://10.245.0.1:30880")(ok).ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("origin check alone: %d, expected it to trust the forged Host", rec.Code)
	}
}
