package cli_test

import (
	"context"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atcclient/atcfake"
	"github.com/porter-ci/porter/pkg/cli"
)

// runWithStdin runs a command against atcURL with stdin (never a terminal).
func runWithStdin(ctx context.Context, atcURL string, stdin io.Reader, args ...string) run {
	var stdout, stderr syncBuffer
	code := cli.Run(ctx, append([]string{"--atc", atcURL}, args...), cli.Env{
		Stdin: stdin, Stdout: &stdout, Stderr: &stderr,
		Getenv: func(string) string { return "" },
	})
	return run{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

func TestInterceptUsage(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{args: []string{"intercept", "-h"}, code: 0, stdout: "usage: atc-porter-runtime intercept [--step NAME]"},
		{args: []string{"intercept"}, code: 2, stderr: "want one BUILD argument, got 0"},
		{args: []string{"intercept", "x"}, code: 2, stderr: `"x" is not a build id`},
		{args: []string{"intercept", "1", "sh"}, code: 2, stderr: `unexpected argument "sh" (the command goes after --)`},
		{args: []string{"intercept", "1", "--"}, code: 2, stderr: "no COMMAND after --"},
		{args: []string{"intercept", "--step"}, code: 2, stderr: "flag needs an argument"},
		{args: []string{"help"}, code: 0, stdout: "intercept"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := runWithStdin(context.Background(), "http://127.0.0.1:1", strings.NewReader(""), tc.args...)
			if r.code != tc.code {
				t.Errorf("exit %d, want %d\nstderr: %s", r.code, tc.code, r.stderr)
			}
			if !strings.Contains(r.stdout, tc.stdout) {
				t.Errorf("stdout %q does not contain %q", r.stdout, tc.stdout)
			}
			if !strings.Contains(r.stderr, tc.stderr) {
				t.Errorf("stderr %q does not contain %q", r.stderr, tc.stderr)
			}
		})
	}
}

func TestInterceptPipesStdinAndExitsWithTheProcess(t *testing.T) {
	srv := atcfake.NewIntercept(t)
	srv.ExitStatus = 7
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := runWithStdin(ctx, srv.URL, strings.NewReader("echo hi\n"),
		"intercept", "5", "--step", "build", "--", "sh", "-c", "--step x")
	if r.code != 7 {
		t.Fatalf("exit %d, want 7\nstderr: %s", r.code, r.stderr)
	}
	if r.stdout != "echo hi\n" || r.stderr != "ready\n" {
		t.Errorf("stdout %q stderr %q: want the input echoed on stdout and ready on stderr", r.stdout, r.stderr)
	}
	sessions := srv.Sessions()
	if len(sessions) != 1 {
		t.Fatalf("%d sessions, want 1", len(sessions))
	}
	s := sessions[0]
	if s.Build != "5" || s.Query.Get("step") != "build" || s.Query.Get("tty") != "false" {
		t.Errorf("build %q query %v: want build 5, step=build, tty=false", s.Build, s.Query)
	}
	if got, want := s.Query["cmd"], []string{"sh", "-c", "--step x"}; !reflect.DeepEqual(got, want) {
		t.Errorf("cmd %q, want %q (everything after -- is the command)", got, want)
	}
	if s.Query.Has("rows") || s.Query.Has("cols") {
		t.Errorf("query %v: no terminal, no size", s.Query)
	}
	want := []api.InterceptMessage{{Type: api.InterceptInput, Data: []byte("echo hi\n")}, {Type: api.InterceptEOF}}
	if !reflect.DeepEqual(s.Received, want) {
		t.Errorf("received %+v, want %+v", s.Received, want)
	}
}

func TestInterceptDefaultsToTheOnlyStepAndTheShell(t *testing.T) {
	srv := atcfake.NewIntercept(t)
	r := runWithStdin(context.Background(), srv.URL, strings.NewReader(""), "intercept", "12")
	if r.code != 0 {
		t.Fatalf("exit %d, want 0\nstderr: %s", r.code, r.stderr)
	}
	q := srv.Sessions()[0].Query
	if q.Has("step") || q.Has("cmd") {
		t.Errorf("query %v: want neither step nor cmd, the server's defaults", q)
	}
}

func TestInterceptErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(*atcfake.Intercept)
		code   int
		stderr string
	}{
		{"pod gone", func(f *atcfake.Intercept) {
			f.Refuse, f.Message = http.StatusConflict, `step "one-off" is not running or no longer interceptible: its pod is gone`
		}, 2, `intercept: intercept build 3: 409 Conflict: step "one-off" is not running or no longer interceptible: its pod is gone`},
		{"unknown build", func(f *atcfake.Intercept) { f.Refuse, f.Message = http.StatusNotFound, "no such build" },
			2, "404 Not Found: no such build"},
		{"session error", func(f *atcfake.Intercept) { f.Error = "lost the step's sidecar" }, 2, "intercept: lost the step's sidecar"},
		{"no exit status", func(f *atcfake.Intercept) { f.ExitStatus = -1 }, 2, "ended without an exit status (-1)"},
		{"exit status passes through", func(f *atcfake.Intercept) { f.ExitStatus = 130 }, 130, "ready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := atcfake.NewIntercept(t)
			tc.setup(srv)
			r := runWithStdin(context.Background(), srv.URL, strings.NewReader(""), "intercept", "3")
			if r.code != tc.code || !strings.Contains(r.stderr, tc.stderr) {
				t.Errorf("exit %d stderr %q, want exit %d and %q", r.code, r.stderr, tc.code, tc.stderr)
			}
		})
	}
}

func TestInterceptATCUnreachable(t *testing.T) {
	r := runWithStdin(context.Background(), "http://127.0.0.1:1", strings.NewReader(""), "intercept", "3")
	if r.code != cli.ExitErrored || !strings.Contains(r.stderr, "intercept build 3") {
		t.Errorf("exit %d stderr %q", r.code, r.stderr)
	}
}

func TestInterceptInterruptClosesTheSession(t *testing.T) {
	srv := atcfake.NewIntercept(t)
	stdin, feed := io.Pipe() // stdin stays open: the session would go on
	defer feed.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan run, 1)
	go func() { done <- runWithStdin(ctx, srv.URL, stdin, "intercept", "3") }()
	if _, err := feed.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case r := <-done:
		if r.code != cli.ExitInterrupted || !strings.Contains(r.stderr, "interrupted") {
			t.Errorf("exit %d stderr %q, want %d", r.code, r.stderr, cli.ExitInterrupted)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("intercept did not stop when interrupted")
	}
}
