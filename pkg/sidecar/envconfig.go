package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/blobstore"
)

// DefaultSocket is the control socket's path in a step pod.
const DefaultSocket = "/porter/run/control.sock"

// LoadConfig is the sidecar's Config from the variables podspec declares
// for the sidecar container, read through getenv: `porter sidecar` passes
// os.Getenv; a simulated sidecar passes the pod's declared environment. It
// opens the blobstores; Tracer is left to the caller.
func LoadConfig(ctx context.Context, getenv func(string) string, log *slog.Logger) (Config, error) {
	raw := getenv(action.EnvVar)
	if raw == "" {
		return Config{}, fmt.Errorf("%s is not set: the sidecar needs the step's action", action.EnvVar)
	}
	a, err := action.Decode([]byte(raw))
	if err != nil {
		return Config{}, err
	}
	atc := ATCConfig{
		Address:    getenv("PORTER_ATC_ADDRESS"),
		ServerName: getenv("PORTER_ATC_SERVER_NAME"),
		Token:      getenv("PORTER_STEP_TOKEN"),
		CAPEM:      []byte(getenv("PORTER_ATC_CA_PEM")),
	}
	if f := getenv("PORTER_ATC_CA_FILE"); f != "" && len(atc.CAPEM) == 0 {
		if atc.CAPEM, err = os.ReadFile(f); err != nil {
			return Config{}, fmt.Errorf("read PORTER_ATC_CA_FILE: %w", err)
		}
	}
	var missing []error
	if atc.Address == "" {
		missing = append(missing, errors.New("PORTER_ATC_ADDRESS is not set"))
	}
	if atc.Token == "" {
		missing = append(missing, errors.New("PORTER_STEP_TOKEN is not set"))
	}
	if err := errors.Join(missing...); err != nil {
		return Config{}, err
	}
	bcfg, err := blobstore.ConfigFrom(getenv)
	if err != nil {
		return Config{}, err
	}
	store, err := blobstore.Open(ctx, bcfg)
	if err != nil {
		return Config{}, err
	}
	extractLimits, err := blobstore.ExtractLimitsFromEnv(getenv)
	if err != nil {
		return Config{}, err
	}
	return Config{
		Action:     a,
		ATC:        atc,
		PodName:    getenv("PORTER_POD_NAME"),
		SocketPath: or(getenv("PORTER_SOCKET"), DefaultSocket),
		StdinFile:  getenv(action.StdinFileEnvVar),
		Redact:     redactValues(getenv("PORTER_REDACT"), log),
		Artifacts:  BlobArtifacts(store, a.Build.Team, a.StepID, extractLimits),
		Relogin: func(ctx context.Context, c Credentials) (Artifacts, error) {
			again := bcfg
			again.AccessKey, again.SecretKey, again.SessionToken = c.AccessKey, c.SecretKey, c.SessionToken
			store, err := blobstore.Open(ctx, again)
			if err != nil {
				return nil, fmt.Errorf("open the blobstore with the go-ahead's credentials: %w", err)
			}
			return BlobArtifacts(store, a.Build.Team, a.StepID, extractLimits), nil
		},
		// The step container does not mount the journal's directory.
		JournalDir: or(getenv("PORTER_JOURNAL_DIR"), filepath.Join(os.TempDir(), "porter-journal")),
		Log:        log,
		// Set by podspec for native sidecars (see Config).
		StayUntilTerminated: getenv("PORTER_NATIVE_SIDECAR") == "true",
	}, nil
}

func or(v, fallback string) string {
	if v != "" {
		return v
	}
	return fallback
}

// redactValues are the values the step's Secret says to redact from the
// audit journal (PORTER_REDACT, a JSON list).
func redactValues(raw string, log *slog.Logger) []string {
	if raw == "" {
		return nil
	}
	var values []string
	if err := json.Unmarshal([]byte(raw), &values); err != nil {
		log.Warn("PORTER_REDACT is not a JSON list of strings: the journal is not redacted", "err", err)
	}
	return values
}
