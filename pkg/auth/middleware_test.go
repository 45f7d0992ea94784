package auth

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestRefuseCrossOrigin(t *testing.T) {
	h := RefuseCrossOrigin("https://ci.example.com")(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()

	tests := []struct {
		name, method string
		header       map[string]string
		want         int
	}{
		{"fly: POST without Origin", "POST", nil, 200},
		{"POST from a foreign Origin", "POST", map[string]string{"Origin": "https://evil.example"}, 403},
		{"DELETE from a foreign Origin", "DELETE", map[string]string{"Origin": "https://evil.example"}, 403},
		{"PUT cross-site", "PUT", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"POST same-origin by Host", "POST", map[string]string{"Origin": srv.URL}, 200},
		{"POST from the external URL", "POST", map[string]string{"Origin": "https://ci.example.com", "Sec-Fetch-Site": "cross-site"}, 200},
		{"POST Sec-Fetch-Site same-origin", "POST", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": srv.URL}, 200},
		{"GET from a foreign Origin", "GET", map[string]string{"Origin": "https://evil.example"}, 200},
		{"WebSocket upgrade from a foreign Origin", "GET", map[string]string{"Origin": "https://evil.example", "Upgrade": "websocket", "Connection": "Upgrade"}, 403},
		{"WebSocket upgrade same-origin", "GET", map[string]string{"Origin": srv.URL, "Upgrade": "websocket", "Connection": "Upgrade"}, 200},
		{"fly: WebSocket upgrade without Origin", "GET", map[string]string{"Upgrade": "websocket", "Connection": "Upgrade"}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, srv.URL+"/api/v1/teams/main/builds", strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.want, body)
			}
			if tt.want == 403 && !strings.Contains(string(body), "cross-origin request refused") {
				t.Errorf("unclear refusal: %q", body)
			}
		})
	}
}

// A refused token's reason, which the 401 leaves out when it is a token
// library's, is in the server's log at a level operators keep; an expired
// token, which is routine, only at debug.
func TestAuthenticateLogsWhyATokenWasRefused(t *testing.T) {
	var logged strings.Builder
	log := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelInfo}))
	clk := &clock{time.Now()}
	iss := NewIssuer(newTestKey(t), testIssuerURL, time.Hour, WithClock(clk.now))
	h := Authenticate(iss, &memUsers{}, log, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	send := func(token string) {
		req := httptest.NewRequest(http.MethodGet, "/api/v1/user", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	send("a.b.c")
	if got := logged.String(); !strings.Contains(got, "level=INFO") || !strings.Contains(got, "refused token") || !strings.Contains(got, "malformed") {
		t.Errorf("a malformed token: the log says %q, want the library's reason at info", got)
	}
	logged.Reset()
	token, err := iss.Issue(testClaims())
	if err != nil {
		t.Fatal(err)
	}
	clk.t = clk.t.Add(2 * time.Hour)
	send(token)
	if got := logged.String(); got != "" {
		t.Errorf("an expired token logged at info: %q", got)
	}
}
