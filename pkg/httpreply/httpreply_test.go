package httpreply

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/httpreply/bodylimit"
)

func TestDecode(t *testing.T) {
	type in struct {
		Name string `json:"name"`
	}
	for _, tc := range []struct {
		body       string
		allowEmpty bool
		tooLarge   bool
		bad        bool
	}{
		{body: `{"name":"x"}`},
		{body: ``, allowEmpty: true},
		{body: ``, bad: true},
		{body: `{"name":`, bad: true},
		{body: `{"name":"` + strings.Repeat("x", 100) + `"}`, tooLarge: true},
	} {
		var v in
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tc.body))
		err := Decode(httptest.NewRecorder(), r, 64, &v, tc.allowEmpty)
		var client interface{ BadRequest() bool }
		switch {
		case tc.tooLarge && !bodylimit.TooLarge(err):
			t.Errorf("%q: err %v, want one over the limit", tc.body, err)
		case tc.bad && !(errors.As(err, &client) && client.BadRequest()):
			t.Errorf("%q: err %v, want a bad request", tc.body, err)
		case !tc.tooLarge && !tc.bad && err != nil:
			t.Errorf("%q: %v", tc.body, err)
		}
	}
}

func TestInternalAnswersTheRequestIDOnly(t *testing.T) {
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	h := WithRequestID(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		Internal(w, r, log, http.StatusInternalServerError, "doing it", errors.New("dial tcp 10.0.0.7:5432: refused"))
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
	id := rec.Header().Get("X-Request-Id")
	if rec.Code != http.StatusInternalServerError || id == "" || strings.Contains(rec.Body.String(), "10.0.0.7") ||
		!strings.Contains(rec.Body.String(), id) {
		t.Errorf("answer %d %q (request %s)", rec.Code, rec.Body.String(), id)
	}
	if !strings.Contains(logged.String(), "10.0.0.7") || !strings.Contains(logged.String(), "request_id="+id) {
		t.Errorf("log %q lacks the error or the request ID", logged.String())
	}
}
