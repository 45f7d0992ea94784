// Package ui_test drives Porter's web UI in a real headless Chromium
// (Debian's chromium, through chromedp) against the real
// `atc-porter-runtime serve` on the local cluster, with Concourse's real
// fly setting up pipelines and logging in through the browser.
//
// The specs share one server, one namespace and one browser; each spec
// opens its own browser context (its own localStorage), so a logged-in
// spec and an anonymous one do not see each other's token. Every spec
// saves a screenshot under $PORTER_UI_SCREENSHOTS (default: a fresh
// directory whose path the suite prints).
package ui_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/test/testenv"
	"github.com/porter-ci/porter/test/testenv/dex"
)

func TestUI(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "web UI in a real browser")
}

var _ = ReportAfterSuite("spec times", testenv.RecordSpecTimes)

// admin owns team main; bob too, and is the one who logs out (a logout
// ends every token of its user, and admin's are shared by the suite).
const (
	adminUser = "admin"
	bobUser   = "bob"
)

type suite struct {
	env           *testenv.ATCEnv
	server        *testenv.ATC
	flyBin        string
	adminPassword string
	bobPassword   string
	adminFly      *testenv.Fly
	adminToken    string
	// dex is the OpenID provider of single sign-on; ssoUser logs in there
	// through the browser, alice and mallory by plain HTTP; dexUsers are
	// all of them, as Dex starts.
	dex            *dex.Dex
	ssoUser        dex.User
	alice, mallory dex.User
	dexUsers       []dex.User
	// browser is the one Chromium; specs open contexts of their own in it.
	browser     context.Context
	screenshots string
}

var s suite

// ErrNoChromium: neither chromium nor chrome is on PATH.
var ErrNoChromium = errors.New("no chromium on PATH (apt-get install chromium)")

// FindChromium finds Debian's chromium (or a Chrome) on PATH.
func FindChromium() (string, error) {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", ErrNoChromium
}

var _ = BeforeSuite(func(ctx SpecContext) {
	// A page follows the API within a second on an idle machine; CI's
	// suites share two cores, where a second is not enough to be sure.
	SetDefaultEventuallyTimeout(10 * time.Second)
	chromium, err := FindChromium()
	skipIfUnavailable(err)
	flyBin, err := testenv.FindFly()
	skipIfUnavailable(err)
	env, err := testenv.NewATCEnv(ctx, GinkgoT().TempDir())
	skipIfUnavailable(err)
	s = suite{env: env, flyBin: flyBin, adminPassword: rand.Text(), bobPassword: rand.Text()}

	s.screenshots = os.Getenv("PORTER_UI_SCREENSHOTS")
	if s.screenshots == "" {
		s.screenshots, err = os.MkdirTemp("", "porter-ui-screenshots-")
		Expect(err).NotTo(HaveOccurred())
	}
	Expect(os.MkdirAll(s.screenshots, 0o755)).To(Succeed())
	fmt.Fprintf(GinkgoWriter, "screenshots go to %s\n", s.screenshots)
	AddReportEntry("screenshots", s.screenshots)

	ns, removeNS, err := env.NewWorkerNamespace(ctx, "porter-ui-")
	DeferCleanup(removeNS)
	Expect(err).NotTo(HaveOccurred())
	dsn, drop, err := env.NewDatabase(ctx)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(drop)
	// This tree's sidecar and entrypoint: the build page shows what they
	// record (a step's phases, its container's peak memory and CPU time).
	porterImage, removeImage, err := testenv.BuildPorterImage(ctx, GinkgoT().TempDir(), "ui")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(removeImage)
	srv, err := env.NewATC(testenv.ATCConfig{
		Worker: ns, WorkerName: "ui", Database: dsn,
		LocalUsers:    []string{adminUser + ":" + s.adminPassword, bobUser + ":" + s.bobPassword},
		MainTeamUsers: []string{adminUser, bobUser},
		Args:          []string{"--porter-image", porterImage},
	})
	Expect(err).NotTo(HaveOccurred())
	startDex(ctx, srv)
	Expect(srv.Start(ctx)).To(Succeed())
	DeferCleanup(func() {
		Expect(srv.Stop()).To(Succeed())
		GinkgoWriter.Printf("log of the server at %s:\n%s\n", srv.URL(), srv.Log())
	})
	s.server = srv
	s.adminFly = newFly("ui")
	res, err := s.adminFly.Login(ctx, srv.URL(), adminUser, s.adminPassword)
	Expect(err).NotTo(HaveOccurred())
	Expect(res.ExitCode).To(Equal(0), res.String())
	s.adminToken, err = srv.Login(ctx, adminUser, s.adminPassword)
	Expect(err).NotTo(HaveOccurred())

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox, // CI runs as root
		chromedp.WindowSize(1400, 900),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	DeferCleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(allocCtx)
	DeferCleanup(cancelBrowser)
	Expect(chromedp.Do(browser)).To(Succeed(), "start chromium")
	s.browser = browser
})

// The OIDC group the Dex user is in (team roles name it "oidc:porter-devs").
const ssoGroup = "porter-devs"

// startDex starts a real Dex whose static client is srv's, with a password
// user in group ssoGroup, and points srv's --oidc-* flags at it.
func startDex(ctx context.Context, srv *testenv.ATC) {
	GinkgoHelper()
	bin, err := dex.Find(ctx)
	skipIfUnavailable(err)
	s.ssoUser = dex.User{Email: "carol@example.com", Password: rand.Text(), UserName: "carol",
		UserID: "carol-0001", Groups: []string{ssoGroup}}
	s.alice = dex.User{Email: "alice@example.com", Password: rand.Text(), UserName: "alice", UserID: "alice-0001"}
	s.mallory = dex.User{Email: "mallory@example.com", Password: rand.Text(), UserName: "mallory", UserID: "mallory-0001"}
	s.dexUsers = []dex.User{s.ssoUser, s.alice, s.mallory}
	secret := rand.Text()
	d, err := dex.Start(ctx, bin, GinkgoT().TempDir(), dex.Config{
		ClientID: "porter", ClientSecret: secret, RedirectURI: srv.URL() + "/sky/issuer/callback",
		Users: s.dexUsers,
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		Expect(d.Stop()).To(Succeed())
		if CurrentSpecReport().Failed() {
			GinkgoWriter.Printf("log of Dex:\n%s\n", d.Log())
		}
	})
	s.dex = d
	// Dex sends no "username" (Concourse's default key); its static users'
	// preferred_username is set by the operator only.
	srv.Config.Args = append(srv.Config.Args, "--oidc-display-name", "Dex", "--oidc-issuer", d.Issuer(),
		"--oidc-client-id", "porter", "--oidc-scope", "groups", "--oidc-scope", "profile", "--oidc-scope", "email",
		"--oidc-user-name-key", "preferred_username")
	srv.Config.Env = append(srv.Config.Env, "PORTER_OIDC_CLIENT_SECRET="+secret)
}

// skipIfUnavailable skips the suite when the cluster, PostgreSQL, fly or
// chromium is missing, unless CI is set: then it fails.
func skipIfUnavailable(err error) {
	GinkgoHelper()
	if testenv.Unavailable(err) || errors.Is(err, ErrNoChromium) || errors.Is(err, dex.ErrNoBinary) {
		if os.Getenv("CI") == "" {
			Skip(fmt.Sprintf("%v (run `make cluster-up`; apt-get install chromium)", err))
		}
		Fail(fmt.Sprintf("CI needs the local cluster, PostgreSQL, fly, chromium and Dex: %v", err))
	}
	Expect(err).NotTo(HaveOccurred())
}

func newFly(target string) *testenv.Fly {
	f := testenv.NewFly(s.flyBin, GinkgoT().TempDir(), target)
	f.Log = GinkgoWriter
	return f
}

// tab is a browser context of the spec's own (own storage), closed when the
// spec ends; at the end it saves a screenshot named after the spec.
func tab() context.Context {
	GinkgoHelper()
	ctx, cancel := chromedp.NewContext(s.browser, chromedp.WithNewBrowserContext())
	Expect(chromedp.Do(ctx)).To(Succeed())
	DeferCleanup(cancel)
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			screenshot(ctx, "at failure")
		}
	})
	return ctx
}

var unsafeName = regexp.MustCompile(`[^a-z0-9]+`)

// screenshot saves what the tab shows as <spec>-<what>.png and prints
// its path.
func screenshot(ctx context.Context, what string) {
	GinkgoHelper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	Expect(err).NotTo(HaveOccurred())
	slug := func(s string, max int) string {
		s = strings.Trim(unsafeName.ReplaceAllString(strings.ToLower(s), "-"), "-")
		return s[:min(len(s), max)]
	}
	name := slug(CurrentSpecReport().LeafNodeText, 48) + "--" + slug(what, 30)
	path := filepath.Join(s.screenshots, name+".png")
	Expect(os.WriteFile(path, png, 0o644)).To(Succeed())
	GinkgoWriter.Printf("screenshot: %s\n", path)
}

// loggedIn is a tab holding admin's token, as the login page leaves it.
func loggedIn() context.Context {
	GinkgoHelper()
	ctx := tab()
	Expect(chromedp.Do(ctx,
		chromedp.Navigate(s.server.URL()+"/login"),
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := chromedp.Evaluate[bool](fmt.Sprintf(`localStorage.setItem("porter.token", %q), true`, s.adminToken))(ctx, t)
			return err
		}),
	)).To(Succeed())
	return ctx
}

// open navigates and waits for sel to be visible.
func open(ctx context.Context, path, sel string) {
	GinkgoHelper()
	Expect(chromedp.Do(ctx, chromedp.Navigate(s.server.URL()+path), chromedp.WaitVisible(chromedp.CSS(sel)))).To(Succeed())
}

// eval evaluates js in the tab.
func eval[T any](ctx context.Context, js string) T {
	GinkgoHelper()
	out, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	Expect(err).NotTo(HaveOccurred(), js)
	return out
}

// evalEventually is eval for Eventually.
func evalEventually[T any](ctx context.Context, js string) func() (T, error) {
	return func() (T, error) { return chromedp.Run(ctx, chromedp.Evaluate[T](js)) }
}

// writeFile writes content into a fresh directory and returns its path.
func writeFile(name, content string) string {
	GinkgoHelper()
	p := filepath.Join(GinkgoT().TempDir(), name)
	Expect(os.WriteFile(p, []byte(content), 0o644)).To(Succeed())
	return p
}

func succeed(ctx context.Context, f *testenv.Fly, args ...string) testenv.FlyResult {
	GinkgoHelper()
	res, err := f.Run(ctx, args...)
	Expect(err).NotTo(HaveOccurred(), res.String())
	Expect(res.ExitCode).To(Equal(0), res.String())
	return res
}

func pipelineName(prefix string) string {
	return prefix + "-" + strings.ToLower(rand.Text()[:6])
}

const specTimeout = 3 * time.Minute
