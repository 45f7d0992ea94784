// Command docshots takes the README's screenshots of the web UI from a
// real run: a server on the local cluster, a few pipelines with real
// builds (one fails), the dashboard, a pipeline and a build in headless
// Chromium.
//
//	go run ./test/ui/docshots [-out docs]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/porter-ci/porter/test/testenv"
)

func main() {
	out := flag.String("out", "docs", "directory for the PNGs")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *out); err != nil {
		fmt.Fprintln(os.Stderr, "docshots:", err)
		os.Exit(1)
	}
}

func releaseYAML() string {
	return "resources:\n- name: source\n  type: mock\n  source: {initial_version: v1.4.2}\njobs:\n" +
		job("unit", "", true, `printf '\033[32mok\033[0m  42 tests passed\n'`) +
		job("integration", "unit", true, `echo connecting to the staging database; printf '\033[31mFAIL\033[0m  timeout after 30s\n'; exit 1`) +
		job("deploy", "integration", false, "echo deploying")
}

// job is a job that gets source (after passed, if any) and runs script.
func job(name, passed string, trigger bool, script string) string {
	s := fmt.Sprintf("- name: %s\n  plan:\n  - get: source\n    trigger: %t\n", name, trigger)
	if passed != "" {
		s += "    passed: [" + passed + "]\n"
	}
	return s + fmt.Sprintf("  - task: run\n    config:\n      platform: linux\n      image_resource: {type: registry-image, source: {repository: busybox}}\n      run: {path: sh, args: [-c, %q]}\n", script)
}

func run(ctx context.Context, out string) error {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "docshots-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b, err := testenv.StartBenchServer(ctx, dir, "porter-docshots-")
	if err != nil {
		return err
	}
	defer b.Close(context.WithoutCancel(ctx))
	token, err := b.Server.Login(ctx, "bench", "bench")
	if err != nil {
		return err
	}
	fly := func(args ...string) error {
		res, err := b.Fly.Run(ctx, args...)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("fly %v: %s", args, res)
		}
		return err
	}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		_ = os.WriteFile(p, []byte(content), 0o644)
		return p
	}
	hello, err := filepath.Abs("examples/pipeline.yml")
	if err != nil {
		return err
	}
	for _, step := range [][]string{
		{"set-pipeline", "-n", "-p", "hello", "-c", hello},
		{"set-pipeline", "-n", "-p", "release", "-c", write("release.yml", releaseYAML())},
		{"set-pipeline", "-n", "-p", "nightly", "-c", hello},
		{"unpause-pipeline", "-p", "hello"},
		{"unpause-pipeline", "-p", "release"},
		{"expose-pipeline", "-p", "hello"},
	} {
		if err := fly(step...); err != nil {
			return err
		}
	}
	// Wait for the pipelines to run by themselves: ship after test, and
	// integration (which fails) after unit.
	for _, j := range []string{"hello/ship", "release/integration"} {
		if err := waitFinished(ctx, b.Server.URL(), token, j); err != nil {
			return err
		}
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 720), chromedp.Flag("disable-dev-shm-usage", true))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	tab, cancel := chromedp.NewContext(allocCtx)
	defer cancel()
	setToken := chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool](fmt.Sprintf(`localStorage.setItem("porter.token", %q), true`, token))(ctx, t)
		return err
	})
	if err := chromedp.Do(tab, chromedp.Navigate(b.Server.URL()+"/login"), setToken); err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, shot := range []struct{ name, path, ready string }{
		{"ui-dashboard.png", "/", `[data-pipeline="main/release"] .seg.status-failed`},
		{"ui-pipeline.png", "/teams/main/pipelines/release", `[data-job="integration"][data-status="failed"]`},
		{"ui-build.png", "/teams/main/pipelines/release/jobs/integration/builds/1", `[data-testid=build-end]`},
	} {
		wait, cancelWait := context.WithTimeout(tab, time.Minute)
		err := chromedp.Do(wait, chromedp.Navigate(b.Server.URL()+shot.path), chromedp.WaitVisible(chromedp.CSS(shot.ready)),
			chromedp.Sleep(300*time.Millisecond))
		cancelWait()
		if err != nil {
			html, _ := chromedp.Run(tab, chromedp.Evaluate[string](`document.body.innerHTML`))
			return fmt.Errorf("%s: %w; the page: %s", shot.path, err, html)
		}
		png, err := chromedp.Run(tab, chromedp.CaptureScreenshot())
		if err != nil {
			return err
		}
		p := filepath.Join(out, shot.name)
		if err := os.WriteFile(p, png, 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", p)
	}
	return nil
}

// waitFinished waits until the job (pipeline/job) has a finished build.
func waitFinished(ctx context.Context, base, token, job string) error {
	p, j, _ := strings.Cut(job, "/")
	url := fmt.Sprintf("%s/api/v1/teams/main/pipelines/%s/jobs/%s", base, p, j)
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var v struct {
			FinishedBuild *struct{ Status string } `json:"finished_build"`
		}
		if json.Unmarshal(body, &v) == nil && v.FinishedBuild != nil {
			return nil
		}
		time.Sleep(time.Second)
	}
	return errors.New(job + " never finished a build")
}
