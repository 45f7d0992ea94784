package atc

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// /livez answers as soon as the process serves; /readyz only once the
// server has registered its worker and resumed its builds (the database is
// checked then, proven by test/observability).
func TestOpsProbesBeforeReady(t *testing.T) {
	s := &Server{}
	h := s.opsRoutes()
	for path, want := range map[string]int{"/livez": http.StatusOK, "/readyz": http.StatusServiceUnavailable} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != want {
			t.Errorf("GET %s = %d %q, want %d", path, rec.Code, rec.Body.String(), want)
		}
	}
}

// The ops listener serves until stop, which returns once it is closed.
func TestStartOpsServesUntilStopped(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := &Server{cfg: Config{OpsListen: addr}, log: slog.New(slog.DiscardHandler)}
	stop, err := s.startOps(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{}
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://" + addr + "/livez")
	if err != nil {
		stop()
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/livez = %d", resp.StatusCode)
	}
	stop()
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Error("the ops listener still accepts after stop")
	}
}
