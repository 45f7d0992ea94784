package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// The targets file is fly's own ~/.flyrc, in fly's shape, so that a person
// can log in with either tool and use the other.

// flyrc is the whole file.
type flyrc struct {
	Targets map[string]target `json:"targets"`
}

// target is one named server and the login to it.
type target struct {
	API      string       `json:"api"`
	Team     string       `json:"team"`
	Insecure bool         `json:"insecure,omitempty"`
	Token    *targetToken `json:"token,omitempty"`
	// CACert is the PEM text itself, not a path, as fly stores it.
	CACert         string `json:"ca_cert,omitempty"`
	ClientCertPath string `json:"client_cert_path,omitempty"`
	ClientKeyPath  string `json:"client_key_path,omitempty"`
}

type targetToken struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

// errNoTarget: no -t given.
var errNoTarget = errors.New("no target specified")

// unknownTargetError: -t names a target the file does not have.
type unknownTargetError struct{ name string }

func (e unknownTargetError) Error() string { return "unknown target: " + e.name }

// flyrcPath is where fly keeps its targets: $FLY_HOME/.flyrc, else
// $HOME/.flyrc.
func (a *app) flyrcPath() (string, error) {
	for _, v := range []string{"FLY_HOME", "HOME"} {
		if home, ok := a.env.LookupEnv(v); ok && home != "" {
			return filepath.Join(home, ".flyrc"), nil
		}
	}
	return "", errors.New("find the targets file: neither $FLY_HOME nor $HOME is set")
}

// loadTargets reads the targets file; a missing file has no targets.
func (a *app) loadTargets() (map[string]target, error) {
	p, err := a.flyrcPath()
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]target{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read targets: %w", err)
	}
	var rc flyrc
	if err := yaml.Unmarshal(data, &rc); err != nil {
		return nil, fmt.Errorf("in the file '%s': %w", p, err)
	}
	if rc.Targets == nil {
		rc.Targets = map[string]target{}
	}
	for name, t := range rc.Targets {
		if t.Team == "" {
			t.Team = "main"
			rc.Targets[name] = t
		}
	}
	return rc.Targets, nil
}

// saveTarget sets one target and writes the file back (mode 0600: it holds
// tokens), keeping the others.
func (a *app) saveTarget(name string, t target) error {
	targets, err := a.loadTargets()
	if err != nil {
		return err
	}
	targets[name] = t
	data, err := yaml.Marshal(flyrc{Targets: targets})
	if err != nil {
		return fmt.Errorf("encode targets: %w", err)
	}
	p, err := a.flyrcPath()
	if err != nil {
		return err
	}
	if err := os.WriteFile(p, data, 0o600); err != nil {
		return fmt.Errorf("save target %s: %w", name, err)
	}
	// WriteFile keeps an existing file's mode; tokens are for its owner only.
	if err := os.Chmod(p, 0o600); err != nil {
		return fmt.Errorf("save target %s: %w", name, err)
	}
	return nil
}

// selectTarget returns the target -t names.
func (a *app) selectTarget() (target, error) {
	if a.targetName == "" {
		return target{}, errNoTarget
	}
	targets, err := a.loadTargets()
	if err != nil {
		return target{}, err
	}
	t, ok := targets[a.targetName]
	if !ok {
		return target{}, unknownTargetError{a.targetName}
	}
	return t, nil
}

// tlsConfig is how fly reaches a target: its CA certificate (PEM text), its
// client certificate, or no verification when insecure.
func (t target) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{InsecureSkipVerify: t.Insecure}
	if t.CACert != "" && !t.Insecure {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM([]byte(t.CACert)) {
			return nil, errors.New("the target's CA certificate is not PEM")
		}
		cfg.RootCAs = pool
	}
	if t.ClientCertPath != "" || t.ClientKeyPath != "" {
		cert, err := tls.LoadX509KeyPair(t.ClientCertPath, t.ClientKeyPath)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
