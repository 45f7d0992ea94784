package atc

import (
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/api"
)

func TestSessionOpenFromQuery(t *testing.T) {
	for _, tc := range []struct {
		query string
		tty   bool
		rows  uint32
		cols  uint32
		cmd   []string
		err   string
	}{
		{query: "", tty: true},
		{query: "tty=false&cmd=sh&cmd=-c&cmd=exit+4", tty: false, cmd: []string{"sh", "-c", "exit 4"}},
		{query: "rows=30&cols=100", tty: true, rows: 30, cols: 100},
		{query: "tty=maybe", err: `tty="maybe"`},
		{query: "rows=-1", err: `rows="-1"`},
		{query: "cols=70000", err: `cols="70000"`},
		{query: "cmd=", err: "the program's name is empty"},
	} {
		q, err := url.ParseQuery(tc.query)
		if err != nil {
			t.Fatal(err)
		}
		open, err := sessionOpen(q)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.query, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.query, err)
			continue
		}
		if open.GetTty() != tc.tty || open.GetRows() != tc.rows || open.GetCols() != tc.cols || !reflect.DeepEqual(open.GetCommand(), tc.cmd) {
			t.Errorf("%q: got tty=%v %dx%d %q", tc.query, open.GetTty(), open.GetRows(), open.GetCols(), open.GetCommand())
		}
	}
}

func TestInterceptStep(t *testing.T) {
	one := api.Build{ID: 7, Steps: []api.Step{{ID: "b7-build-abc", Name: "build"}}}
	two := api.Build{ID: 8, Steps: []api.Step{{ID: "s1", Name: "a"}, {ID: "s2", Name: "b"}}}
	for _, tc := range []struct {
		b      api.Build
		name   string
		wantID string
		code   int
	}{
		{b: one, name: "", wantID: "b7-build-abc"},
		{b: one, name: "build", wantID: "b7-build-abc"},
		{b: one, name: "b7-build-abc", wantID: "b7-build-abc"},
		{b: one, name: "test", code: http.StatusNotFound},
		{b: two, name: "", code: http.StatusBadRequest},
		{b: two, name: "b", wantID: "s2"},
	} {
		st, code, err := interceptStep(tc.b, tc.name)
		if code != tc.code || st.ID != tc.wantID || (err != nil) != (tc.code != 0) {
			t.Errorf("build %d step %q: got %q, %d, %v", tc.b.ID, tc.name, st.ID, code, err)
		}
	}
}

func TestNotInterceptibleSaysWhy(t *testing.T) {
	gone := notInterceptible(api.Step{Name: "build", Status: api.StatusFailed}).Error()
	if !strings.Contains(gone, `step "build" is not running or no longer interceptible: its pod is gone`) {
		t.Errorf("finished step: %s", gone)
	}
	starting := notInterceptible(api.Step{Name: "build", Status: api.StatusStarted}).Error()
	if !strings.Contains(starting, "not interceptible yet") {
		t.Errorf("starting step: %s", starting)
	}
}
