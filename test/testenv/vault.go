package testenv

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ErrNoVault is returned when the pinned Vault binary has not been built
// (hack/build-tools.sh vault).
var ErrNoVault = errors.New("no Vault binary")

// VaultBinary is the Vault built by hack/build-tools.sh at VAULT_VERSION of
// hack/versions.env: ~/.cache/porter/bin/vault-<version> (or under
// $TOOLS_BIN). An error wrapping ErrNoVault says it is missing.
func VaultBinary() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	f, err := os.Open(filepath.Join(root, "hack", "versions.env"))
	if err != nil {
		return "", fmt.Errorf("read the Vault version: %w", err)
	}
	defer f.Close()
	var version string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if v, ok := strings.CutPrefix(sc.Text(), "VAULT_VERSION="); ok {
			version = strings.TrimSpace(v)
		}
	}
	if version == "" {
		return "", errors.New("no VAULT_VERSION in hack/versions.env")
	}
	dir := os.Getenv("TOOLS_BIN")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("find the tool cache: %w", err)
		}
		dir = filepath.Join(home, ".cache", "porter", "bin")
	}
	bin := filepath.Join(dir, "vault-"+version)
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%w: %s is missing (run hack/build-tools.sh vault)", ErrNoVault, bin)
	}
	return bin, nil
}

// VaultServer is a real `vault server -dev` for tests: in memory, unsealed,
// with a root token, KV v2 mounted at secret/. Stop ends it.
//
//	v, err := testenv.StartVault(ctx, env.Cluster["PORTER_CLUSTER_NODE_IP"])
//	DeferCleanup(v.Stop)
//	v.EnableKV(ctx, "concourse", 2)
//	v.PutKV(ctx, "concourse", "main/token", map[string]any{"value": "s3cret"})
type VaultServer struct {
	// Addr is its URL, http://HOST:PORT.
	Addr string
	// Token is its root token.
	Token string

	cmd    *exec.Cmd
	home   string
	out    *lockedBuffer
	done   chan error
	client *http.Client
	mu     sync.Mutex
	kv     map[string]int // mount -> KV version, as enabled here

	stopOnce sync.Once
	stopErr  error
}

// StartVault starts a dev server listening on host (empty: 127.0.0.1) and
// waits until it answers.
func StartVault(ctx context.Context, host string) (*VaultServer, error) {
	bin, err := VaultBinary()
	if err != nil {
		return nil, err
	}
	if host == "" {
		host = "127.0.0.1"
	}
	var last error
	// The port is free a moment before vault binds it: another process may
	// take it in between, so try again with another.
	for range 3 {
		v, err := startVault(ctx, bin, host)
		if err == nil {
			return v, nil
		}
		last = err
	}
	return nil, last
}

func startVault(ctx context.Context, bin, host string) (*VaultServer, error) {
	addr, err := FreeAddr(host)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	home, err := os.MkdirTemp("", "porter-vault-")
	if err != nil {
		return nil, fmt.Errorf("vault: %w", err)
	}
	v := &VaultServer{Addr: "http://" + addr, Token: "porter-test-" + hex.EncodeToString(b), home: home,
		out: &lockedBuffer{}, done: make(chan error, 1), client: &http.Client{Timeout: 10 * time.Second},
		kv: map[string]int{"secret/": 2}}
	// Not CommandContext: the server outlives the context that started it.
	v.cmd = exec.Command(bin, "server", "-dev", "-dev-root-token-id="+v.Token, "-dev-listen-address="+addr, "-dev-no-store-token")
	// HOME and the address of any outer Vault stay out of the dev server.
	v.cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "VAULT_LOG_LEVEL=warn"}
	v.cmd.Stdout, v.cmd.Stderr = v.out, v.out
	v.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the tests, even on a panic
	if err := v.cmd.Start(); err != nil {
		return nil, errors.Join(fmt.Errorf("vault: start %s: %w", bin, err), os.RemoveAll(home))
	}
	go func() { v.done <- v.cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := v.do(ctx, http.MethodGet, "sys/health", nil, nil); err == nil {
			return v, nil
		}
		select {
		case err := <-v.done:
			v.done <- err
			return nil, errors.Join(fmt.Errorf("vault exited at start (%v): %s", err, v.out.String()), os.RemoveAll(home))
		case <-ctx.Done():
			return nil, errors.Join(ctx.Err(), v.Stop())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, errors.Join(fmt.Errorf("vault did not answer on %s within 30s: %s", addr, v.out.String()), v.Stop())
		}
	}
}

// Stop ends the server (its data goes with it); later calls do nothing.
func (v *VaultServer) Stop() error {
	v.stopOnce.Do(func() {
		if v.cmd.Process != nil {
			_ = v.cmd.Process.Signal(os.Interrupt)
			select {
			case <-v.done:
			case <-time.After(10 * time.Second):
				_ = v.cmd.Process.Kill()
				<-v.done
			}
		}
		v.stopErr = os.RemoveAll(v.home)
	})
	return v.stopErr
}

// Output is what the server printed.
func (v *VaultServer) Output() string { return v.out.String() }

// EnableKV mounts a KV secrets engine of version 1 or 2 at mount.
func (v *VaultServer) EnableKV(ctx context.Context, mount string, version int) error {
	body := map[string]any{"type": "kv", "options": map[string]string{"version": fmt.Sprint(version)}}
	if err := v.do(ctx, http.MethodPost, "sys/mounts/"+strings.Trim(mount, "/"), body, nil); err != nil {
		return fmt.Errorf("vault: enable KV v%d at %s: %w", version, mount, err)
	}
	v.mu.Lock()
	v.kv[strings.Trim(mount, "/")+"/"] = version
	v.mu.Unlock()
	return nil
}

// PutKV writes data as the secret at path under a KV mount enabled by
// EnableKV (or secret/, KV v2).
func (v *VaultServer) PutKV(ctx context.Context, mount, path string, data map[string]any) error {
	mount = strings.Trim(mount, "/")
	v.mu.Lock()
	version, ok := v.kv[mount+"/"]
	v.mu.Unlock()
	if !ok {
		return fmt.Errorf("vault: %s/ is not a KV mount of this server", mount)
	}
	apiPath, body := mount+"/"+strings.Trim(path, "/"), any(data)
	if version == 2 {
		apiPath, body = mount+"/data/"+strings.Trim(path, "/"), map[string]any{"data": data}
	}
	// A new KV v2 mount needs a moment before it takes writes, and one
	// taken while it upgrades may be lost: a write counts once read back.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := v.do(ctx, http.MethodPost, apiPath, body, nil)
		if err == nil {
			var back struct {
				Data map[string]any `json:"data"`
			}
			if err = v.do(ctx, http.MethodGet, apiPath, nil, &back); err == nil && back.Data == nil {
				err = errors.New("written, but not read back")
			}
		}
		if err == nil || time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("vault: write %s/%s: %w", mount, path, err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// DeleteKV deletes the secret at path (for KV v2, its latest version: the
// data is then null, not destroyed).
func (v *VaultServer) DeleteKV(ctx context.Context, mount, path string) error {
	mount = strings.Trim(mount, "/")
	v.mu.Lock()
	version := v.kv[mount+"/"]
	v.mu.Unlock()
	apiPath := mount + "/" + strings.Trim(path, "/")
	if version == 2 {
		apiPath = mount + "/data/" + strings.Trim(path, "/")
	}
	return v.do(ctx, http.MethodDelete, apiPath, nil, nil)
}

// TokenWithPolicy writes an ACL policy and returns a token that has only it.
func (v *VaultServer) TokenWithPolicy(ctx context.Context, name, hcl string) (string, error) {
	if err := v.do(ctx, http.MethodPut, "sys/policies/acl/"+name, map[string]any{"policy": hcl}, nil); err != nil {
		return "", fmt.Errorf("vault: write policy %s: %w", name, err)
	}
	var out struct {
		Auth struct {
			ClientToken string `json:"client_token"`
		} `json:"auth"`
	}
	if err := v.do(ctx, http.MethodPost, "auth/token/create", map[string]any{"policies": []string{name}, "no_default_policy": true}, &out); err != nil {
		return "", fmt.Errorf("vault: create a token with policy %s: %w", name, err)
	}
	return out.Auth.ClientToken, nil
}

func (v *VaultServer) do(ctx context.Context, method, path string, body, out any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, v.Addr+"/v1/"+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("X-Vault-Token", v.Token)
	resp, err := v.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(data))
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// Vault gives a test a dev server listening on host, stopped when the test
// ends. Without the binary the test is skipped, or fails when CI is set.
func Vault(t testing.TB, host string) *VaultServer {
	t.Helper()
	v, err := StartVault(t.Context(), host)
	if errors.Is(err, ErrNoVault) {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v; CI is set, so this is a failure", err)
		}
		t.Skipf("%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := v.Stop(); err != nil {
			t.Errorf("stop vault: %v", err)
		}
	})
	return v
}

// lockedBuffer collects a process's output while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Bounded: a chatty server must not grow without end.
	if l.b.Len() > 1<<20 {
		return len(p), nil
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
