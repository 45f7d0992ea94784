// Package dex runs Dex, the OpenID provider, on the host as a test's
// single sign-on provider: static password users (with groups) that a spec
// can change by restarting it.
package dex

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/porter-ci/porter/test/testenv"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// ErrNoBinary: Dex could not be found or built (hack/build-tools.sh dex).
var ErrNoBinary = errors.New("no dex binary")

// User is a static password user of Dex. Its ID token says UserName as
// preferred_username (none if empty) and Name, else UserName, as name; sub
// stands for UserID.
type User struct {
	Email, Password, UserName, Name, UserID string
	Groups                                  []string
}

// Config is what a test's Dex knows.
type Config struct {
	// ClientID and ClientSecret are Porter's static client; RedirectURI its
	// callback (<external URL>/sky/issuer/callback).
	ClientID, ClientSecret, RedirectURI string
	Users                               []User
}

// Dex is a real Dex (github.com/dexidp/dex, built from the module proxy at
// DEX_VERSION) run on the host as a test's OpenID provider: in-memory
// storage, one static client, static password users (with groups).
type Dex struct {
	addr, bin, dir string
	cfg            Config
	cmd            *exec.Cmd
	done           chan struct{}

	mu  sync.Mutex
	log bytes.Buffer
}

// Find is the Dex binary, built by `hack/build-tools.sh dex` if it is not
// in the tool cache yet (minutes, once; under a second afterwards).
func Find(ctx context.Context) (string, error) {
	if p := os.Getenv("PORTER_DEX"); p != "" {
		return p, nil
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoBinary, err)
	}
	env, err := os.ReadFile(filepath.Join(root, "hack", "versions.env"))
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoBinary, err)
	}
	version := ""
	for line := range strings.SplitSeq(string(env), "\n") {
		if v, ok := strings.CutPrefix(line, "DEX_VERSION="); ok {
			version = strings.TrimSpace(v)
		}
	}
	if version == "" {
		return "", fmt.Errorf("%w: no DEX_VERSION in hack/versions.env", ErrNoBinary)
	}
	bin := os.Getenv("TOOLS_BIN")
	if bin == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrNoBinary, err)
		}
		bin = filepath.Join(home, ".cache", "porter", "bin")
	}
	path := filepath.Join(bin, "dex-"+version)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	out, err := exec.CommandContext(ctx, filepath.Join(root, "hack", "build-tools.sh"), "dex").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%w: hack/build-tools.sh dex: %w\n%s", ErrNoBinary, err, out)
	}
	return path, nil
}

// Start runs Dex from bin on a free port of 127.0.0.1 with its
// configuration in dir, and waits until it answers its discovery document.
func Start(ctx context.Context, bin, dir string, cfg Config) (*Dex, error) {
	addr, err := testenv.FreeAddr("127.0.0.1")
	if err != nil {
		return nil, err
	}
	d := &Dex{addr: addr, bin: bin, dir: dir, cfg: cfg}
	if err := d.start(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// Restart stops Dex and starts it again at the same issuer URL with users
// instead of its static password users: how a spec changes what a user's
// ID tokens say (a user renaming itself). Dex's storage is in memory, so its
// signing keys and sessions are new; a user's sub stays as long as its
// UserID does.
func (d *Dex) Restart(ctx context.Context, users []User) error {
	if err := d.Stop(); err != nil {
		return err
	}
	d.cfg.Users = users
	return d.start(ctx)
}

func (d *Dex) start(ctx context.Context) error {
	// Until the new process runs, Stop has nothing to stop.
	d.cmd, d.done = nil, make(chan struct{})
	type password struct {
		Email             string   `json:"email"`
		Hash              string   `json:"hash"`
		Username          string   `json:"username,omitempty"`
		Name              string   `json:"name,omitempty"`
		PreferredUsername string   `json:"preferredUsername,omitempty"`
		UserID            string   `json:"userID"`
		Groups            []string `json:"groups"`
	}
	var users []password
	for _, u := range d.cfg.Users {
		// The lowest cost Dex accepts: the specs log in, they do not guard.
		hash, err := bcrypt.GenerateFromPassword([]byte(u.Password), 10)
		if err != nil {
			return fmt.Errorf("hash Dex user %s's password: %w", u.Email, err)
		}
		users = append(users, password{Email: u.Email, Hash: string(hash), Username: u.UserName, Name: u.Name,
			PreferredUsername: u.UserName, UserID: u.UserID, Groups: u.Groups})
	}
	// Dex reads YAML, of which JSON is a part.
	conf := map[string]any{
		"issuer":           d.Issuer(),
		"storage":          map[string]any{"type": "memory"},
		"web":              map[string]any{"http": d.addr},
		"logger":           map[string]any{"level": "info"},
		"enablePasswordDB": true,
		"oauth2":           map[string]any{"skipApprovalScreen": true},
		"staticClients": []any{map[string]any{
			"id": d.cfg.ClientID, "secret": d.cfg.ClientSecret, "name": "Porter", "redirectURIs": []string{d.cfg.RedirectURI},
		}},
		"staticPasswords": users,
	}
	raw, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return fmt.Errorf("encode Dex's config: %w", err)
	}
	path := filepath.Join(d.dir, "dex.yaml")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		return fmt.Errorf("write Dex's config: %w", err)
	}
	d.cmd = exec.Command(d.bin, "serve", path)
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		return err
	}
	d.cmd.Stdout = d.cmd.Stderr
	if err := d.cmd.Start(); err != nil {
		return fmt.Errorf("start Dex: %w", err)
	}
	cmd, done := d.cmd, d.done
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			d.mu.Lock()
			d.log.WriteString(sc.Text() + "\n")
			d.mu.Unlock()
		}
		_ = cmd.Wait()
		close(done)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.Issuer()+"/.well-known/openid-configuration", nil)
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("Dex exited at start:\n%s", d.Log())
		case <-ctx.Done():
			_ = d.Stop()
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = d.Stop()
			return fmt.Errorf("Dex did not answer in 30s:\n%s", d.Log())
		}
	}
}

// Issuer is Dex's issuer URL (--oidc-issuer).
func (d *Dex) Issuer() string { return "http://" + d.addr + "/dex" }

// Log is what Dex printed.
func (d *Dex) Log() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.String()
}

// Stop ends Dex and waits for it.
func (d *Dex) Stop() error {
	if d.cmd == nil || d.cmd.Process == nil {
		return nil
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
	return nil
}
