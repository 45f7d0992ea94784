package apiserver

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// Internals a failing store names in its errors; no answer may carry them.
const (
	internalAddr = "10.9.8.7:5432"
	internalUser = "porter_s3cret_user"
)

// placeholder is a path parameter of a route pattern.
var placeholder = regexp.MustCompile(`\{[a-z_]+\}`)

// seedValues are path parameters that exist in the fake store.
var seedValues = map[string]string{
	"{team_name}": "main", "{pipeline_name}": "p", "{job_name}": "j", "{resource_name}": "r", "{build_id}": "2",
	"{build_name}": "1", "{version_id}": "300", "{id}": "c1", "{worker_name}": "w1", "{artifact_id}": "1", "{step_name}": "t",
	"{component_name}": "scheduler", "{resource_type_name}": "rt", "{step_id}": "s1", "{object}": "pod.yaml", "{output}": "out",
}

var fuzzMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodHead, "PROPFIND"}

// FuzzAPI sends arbitrary requests through the real router and middleware,
// with fakes behind, as every kind of caller, with the database up or
// down. It fails on a panic (even one recoverPanics caught), on an answer
// that names the store's internals, on a 5xx that does not say which
// request it was, and on a handler that does not return.
func FuzzAPI(f *testing.F) {
	patterns := newTestAPI(f).routes().patterns
	for i, p := range patterns {
		for who := range uint8(5) {
			f.Add(uint8(i), uint8(1), "", "", "", "", []byte(nil), who, false)
		}
		f.Add(uint8(i), uint8(1), "", "", "", "limit=1&since=2&until=0", []byte(`{}`), uint8(1), true)
		if strings.HasPrefix(p, "GET") {
			// The largest numbers a page takes (they once overflowed).
			f.Add(uint8(i), uint8(1), "", "", "", "limit=9223372036854775807&to=9223372036854775807&from=9223372036854775807", []byte(nil), uint8(2), false)
		}
		if strings.Contains(p, "/log") {
			// A build log by range (logserver): good and bad ranges, cursors.
			f.Add(uint8(i), uint8(1), "1", "", "", "step=1&before=3&limit=2", []byte(nil), uint8(1), false)
			f.Add(uint8(i), uint8(1), "1", "", "", "step=1&after=18446744073709551615&limit=-1", []byte(nil), uint8(2), false)
			f.Add(uint8(i), uint8(1), "1", "", "", "q=%1b[&step=1&cursor=9223372036854775807.1.2147483648", []byte(nil), uint8(1), false)
		}
		if strings.HasSuffix(p, "/check/webhook") {
			// The right token (anyone may send it) and a wrong one.
			f.Add(uint8(i), uint8(1), "", "", "", "webhook_token=s3cret", []byte(nil), uint8(0), false)
			f.Add(uint8(i), uint8(1), "", "", "", `webhook_token=x&vars.branch="y"`, []byte(nil), uint8(0), true)
		}
		if strings.HasSuffix(p, "/comment") {
			// A build's comment: one, a NUL, and one over its cap.
			f.Add(uint8(i), uint8(2), "", "", "", "", []byte(`{"comment":"<b>x</b>"}`), uint8(1), false)
			f.Add(uint8(i), uint8(2), "", "", "", "", []byte(`{"comment":"\u0000"}`), uint8(1), false)
			f.Add(uint8(i), uint8(2), "", "", "", "", []byte(`{"comment":"`+strings.Repeat("é", 6<<10)+`"}`), uint8(1), false)
		}
		if strings.HasPrefix(p, "POST") || strings.HasPrefix(p, "PUT") {
			f.Add(uint8(i), uint8(1), "", "", "", "", []byte(`{"name":"x","auth":{"owner":{"users":["local:a"]}}}`), uint8(1), false)
			f.Add(uint8(i), uint8(1), "", "", "", "", []byte(`[`), uint8(1), false)
		}
	}
	f.Add(uint8(255), uint8(0), "api/v1/teams/main/pipelines/p/resources/r/versions/abc/pin", "", "", "", []byte(nil), uint8(1), true)
	f.Add(uint8(255), uint8(2), "api/v1/teams/../pipelines", "", "", "vars.x=1", []byte(nil), uint8(0), false)

	f.Fuzz(func(t *testing.T, route, method uint8, seg1, seg2, seg3, query string, body []byte, who uint8, dbDown bool) {
		panics := &panicLog{}
		api := newTestAPI(t)
		api.log = slog.New(panics)
		if dbDown {
			down := errors.New("dial tcp " + internalAddr + ": password authentication failed for user " + internalUser)
			api.store.fail, api.engine.fail, api.blobs.fail = down, down, down
		}
		var path, verb string
		if int(route) < len(patterns) {
			verb, path, _ = strings.Cut(patterns[route], " ")
			segs := []string{seg1, seg2, seg3}
			n := 0
			path = placeholder.ReplaceAllStringFunc(path, func(ph string) string {
				v := seedValues[ph]
				if n < len(segs) && segs[n] != "" {
					v = url.PathEscape(segs[n])
				}
				n++
				return v
			})
			if method%4 == 0 {
				verb = fuzzMethods[int(method/4)%len(fuzzMethods)]
			}
		} else {
			verb, path = fuzzMethods[int(method)%len(fuzzMethods)], "/"+seg1
		}
		target := path
		if query != "" {
			target += "?" + query
		}
		u, err := url.ParseRequestURI(target)
		if err != nil {
			return // no client can send it
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, verb, "http://porter.test", bytes.NewReader(body))
		if err != nil {
			return
		}
		req.URL.Path, req.URL.RawPath, req.URL.RawQuery = u.Path, u.RawPath, u.RawQuery
		req.RequestURI = target
		switch who % 5 {
		case 1:
			req.Header.Set("Authorization", "Bearer "+api.token(t, "admin", map[string]string{"main": "owner"}))
		case 2:
			req.Header.Set("Authorization", "Bearer "+api.token(t, "viewer", map[string]string{"main": "viewer"}))
		case 3:
			req.Header.Set("Authorization", "Bearer "+api.token(t, "other", map[string]string{"other": "owner"}))
		case 4:
			req.Header.Set("Authorization", "Bearer not-a-token")
		}
		rec := httptest.NewRecorder()
		done := make(chan struct{})
		go func() {
			defer close(done)
			api.Handler().ServeHTTP(rec, req)
		}()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Fatalf("%s %s did not return", verb, target)
		}
		if p := panics.first(); p != "" {
			t.Fatalf("%s %s panicked: %s", verb, target, p)
		}
		got := rec.Body.String()
		if strings.Contains(got, internalAddr) || strings.Contains(got, internalUser) {
			t.Fatalf("%s %s answered %d naming the store's internals: %s", verb, target, rec.Code, got)
		}
		if rec.Code >= 500 && !strings.Contains(got, rec.Header().Get("X-Request-Id")) {
			t.Fatalf("%s %s answered %d without its request id: %s", verb, target, rec.Code, got)
		}
	})
}

// panicLog is a log handler that keeps what recoverPanics logs.
type panicLog struct {
	mu     sync.Mutex
	panics []string
}

func (l *panicLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *panicLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *panicLog) WithGroup(string) slog.Handler            { return l }
func (l *panicLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "handler panicked" {
		return nil
	}
	var b strings.Builder
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(a.Key + "=" + a.Value.String() + " ")
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.panics = append(l.panics, b.String())
	return nil
}

func (l *panicLog) first() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.panics) == 0 {
		return ""
	}
	return l.panics[0]
}
