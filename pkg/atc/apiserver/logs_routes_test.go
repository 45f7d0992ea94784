package apiserver

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/atc/apiserver/logserver"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events"
)

// A build's stored log by range (logserver): build 1's step "1" printed
// "line 1".."line 2000", 100 lines a record, each 10 records a chunk.
func seedLog(t *testing.T, a *testAPI) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	l := a.logs.Open(1)
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	l.Append(events.StartTask{Time: 1, Origin: events.Origin{ID: "1"}})
	for r := range 20 {
		var sb strings.Builder
		for i := r*100 + 1; i <= r*100+100; i++ {
			fmt.Fprintf(&sb, "line %d\n", i)
		}
		l.Append(events.Log{Time: int64(r), Origin: events.Origin{ID: "1"}, Payload: sb.String()})
		if r%10 == 9 {
			if err := l.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	l.Append(events.FinishTask{Time: 2, Origin: events.Origin{ID: "1"}, ExitStatus: 0})
	l.Append(events.Status{Status: concourse.StatusSucceeded, Time: 3})
	l.Finish()
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestBuildLogPages(t *testing.T) {
	a := newTestAPI(t)
	seedLog(t, a)
	viewer := a.roleIn(t, "viewer")
	p := decode[logserver.PageAnswer](t, a.do(t, "GET", "/api/v1/builds/1/log?step=1&limit=150", viewer, ""), 200)
	if !p.End || p.Start || len(p.Logs) != 2 || !strings.HasSuffix(p.Logs[1].Payload, "line 2000\n") || p.Step != "1" {
		t.Fatalf("the end: %+v", p)
	}
	var got []string
	pages := 1
	for !p.Start {
		got = append([]string{p.Logs[0].Payload, p.Logs[len(p.Logs)-1].Payload}, got...)
		p = decode[logserver.PageAnswer](t, a.do(t, "GET", fmt.Sprintf("/api/v1/builds/1/log?step=1&limit=150&before=%d", p.From), viewer, ""), 200)
		pages++
	}
	if pages != 11 || len(p.Logs) != 0 {
		t.Errorf("%d pages of 2 records for 20 records, the last holds %d", pages, len(p.Logs))
	}
	if !strings.HasPrefix(got[0], "line 1\n") {
		t.Errorf("the first page begins %q", got[0][:20])
	}
	// After a record: the next ones, to the end.
	f := decode[logserver.PageAnswer](t, a.do(t, "GET", "/api/v1/builds/1/log?step=1&after=5&limit=10", viewer, ""), 200)
	if len(f.Logs) != 1 || f.Logs[0].ID != 6 || f.End || f.From != 6 || f.To != 6 {
		t.Errorf("after 5: %+v", f)
	}

	o := decode[logserver.OutlineAnswer](t, a.do(t, "GET", "/api/v1/builds/1/log/outline", viewer, ""), 200)
	var kinds []string
	for _, e := range o.Events {
		kinds = append(kinds, string(e.Event))
	}
	if strings.Join(kinds, " ") != "start-task finish-task status" || o.Last != 23 || o.StoredBytes <= 0 {
		t.Errorf("outline %v, last %d, stored %d", kinds, o.Last, o.StoredBytes)
	}
}

func TestBuildLogSearch(t *testing.T) {
	a := newTestAPI(t)
	seedLog(t, a)
	viewer := a.roleIn(t, "viewer")
	s := decode[logserver.SearchAnswer](t, a.do(t, "GET", "/api/v1/builds/1/log/search?q=LINE+1999&step=1", viewer, ""), 200)
	if len(s.Hits) != 1 || s.Hits[0].Text != "line 1999" || s.Hits[0].ID != 21 || s.Hits[0].K != 98 || s.More {
		t.Fatalf("search: %+v", s)
	}
	// "line 1" is in 1111 lines: 100 hits (of whole records) at a time.
	n, searches := 0, 0
	cursor := ""
	for {
		s = decode[logserver.SearchAnswer](t, a.do(t, "GET", "/api/v1/builds/1/log/search?q=line+1&limit=100"+cursor, viewer, ""), 200)
		n += len(s.Hits)
		searches++
		if !s.More {
			break
		}
		cursor = "&cursor=" + url.QueryEscape(s.Next)
	}
	if n != 1111 || searches < 2 {
		t.Errorf("%d hits in %d searches, want 1111", n, searches)
	}
}

// Bad input gets a 400 (or 404) that names the problem.
func TestBuildLogBadInput(t *testing.T) {
	a := newTestAPI(t)
	viewer := a.roleIn(t, "viewer")
	for _, c := range []struct {
		query string
		code  int
		says  string
	}{
		{"log", 400, "step (the plan id of one of the build's steps) is required"},
		{"log?step=nope", 404, `build 1 has no step "nope"`},
		{"log?step=1&before=abc", 400, `before must be a record id (a whole number from 1), not "abc"`},
		{"log?step=1&before=-3", 400, `before must be a record id`},
		{"log?step=1&before=0", 400, `before must be a record id`},
		{"log?step=1&after=1.5", 400, `after must be a record id`},
		{"log?step=1&before=5&after=2", 400, "give before or after, not both"},
		{"log?step=1&limit=-1", 400, `limit must be a number of lines from 1 to 10000, not "-1"`},
		{"log?step=1&limit=abc", 400, `limit must be a number of lines`},
		{"log?step=1&limit=10001", 400, `limit must be a number of lines`},
		{"log/search", 400, "q (the text to search the log for) is required"},
		{"log/search?q=" + strings.Repeat("x", 1001), 400, "q is 1001 bytes long: at most 1000"},
		{"log/search?q=x&step=nope", 404, `build 1 has no step "nope"`},
		{"log/search?q=x&limit=0", 400, `limit must be a number of hits from 1 to 1000, not "0"`},
		{"log/search?q=x&cursor=1.2", 400, `cursor "1.2" is not one a search answered`},
		{"log/search?q=x&cursor=a.b.c", 400, `cursor "a.b.c" is not one a search answered`},
	} {
		ans := a.do(t, "GET", "/api/v1/builds/1/"+c.query, viewer, "")
		if c.code == 404 {
			want404(t, ans, "Step Not Found Error", c.says)
			continue
		}
		wantError(t, ans, c.code, c.says)
	}
	// A build with no plan yet has no step.
	want404(t, a.do(t, "GET", "/api/v1/builds/2/log?step=1", viewer, ""), "Step Not Found Error", `build 2 has no step "1"`)
	// A log that is not there (none written): an empty page, the start and the end.
	p := decode[logserver.PageAnswer](t, a.do(t, "GET", "/api/v1/builds/1/log?step=1", viewer, ""), 200)
	if !p.Start || !p.End || p.Logs == nil || len(p.Logs) != 0 {
		t.Errorf("no log: %+v", p)
	}
}
