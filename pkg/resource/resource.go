// Package resource holds the types of Concourse's resource protocol and the
// runner that the resource binary (cmd/resource) uses to answer it:
//
//	/opt/resource/check      request {source, version} on stdin, a JSON list of versions on stdout
//	/opt/resource/in  DIR    request {source, params, version}, writes DIR, {version, metadata} on stdout
//	/opt/resource/out DIR    request {source, params}, reads DIR, {version, metadata} on stdout
//
// Logs go to stderr; a failure exits non-zero with the reason on stderr.
package resource

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Version identifies one version of a resource: string keys and values.
type Version map[string]string

// MetadataField is one name/value pair shown next to a fetched or put version.
type MetadataField struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// CheckRequest is what /opt/resource/check reads. Version is nil on a first check.
type CheckRequest struct {
	Source  json.RawMessage `json:"source"`
	Version Version         `json:"version"`
}

// InRequest is what /opt/resource/in reads.
type InRequest struct {
	Source  json.RawMessage `json:"source"`
	Params  json.RawMessage `json:"params,omitempty"`
	Version Version         `json:"version"`
}

// OutRequest is what /opt/resource/out reads.
type OutRequest struct {
	Source json.RawMessage `json:"source"`
	Params json.RawMessage `json:"params,omitempty"`
}

// Response is what in and out print.
type Response struct {
	Version  Version         `json:"version"`
	Metadata []MetadataField `json:"metadata,omitempty"`
}

// Type is one resource type. Log output goes to log (stderr).
type Type interface {
	Check(ctx context.Context, req CheckRequest, log io.Writer) ([]Version, error)
	In(ctx context.Context, dir string, req InRequest, log io.Writer) (Response, error)
	Out(ctx context.Context, dir string, req OutRequest, log io.Writer) (Response, error)
}

// RawChecker is implemented by types that may answer check with bytes of
// their own instead of a version list (the mock, to simulate a broken check).
type RawChecker interface {
	// CheckRaw returns ok=true and the bytes to print when it takes over.
	CheckRaw(ctx context.Context, req CheckRequest, log io.Writer) (out []byte, ok bool, err error)
}

// Actions of the protocol, named after the scripts in /opt/resource.
const (
	ActionCheck = "check"
	ActionIn    = "in"
	ActionOut   = "out"
)

// Run answers one protocol call: action is check, in or out; args are the
// script's arguments (the directory for in and out). The request is read from
// stdin and the response written to stdout.
func Run(ctx context.Context, t Type, action string, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	raw, err := io.ReadAll(stdin)
	if err != nil {
		return fmt.Errorf("read request from stdin: %w", err)
	}
	var out any
	switch action {
	case ActionCheck:
		var req CheckRequest
		if err := decodeRequest(raw, &req); err != nil {
			return err
		}
		if rc, ok := t.(RawChecker); ok {
			b, took, err := rc.CheckRaw(ctx, req, stderr)
			if err != nil {
				return fmt.Errorf("check: %w", err)
			}
			if took {
				_, err := stdout.Write(b)
				return err
			}
		}
		versions, err := t.Check(ctx, req, stderr)
		if err != nil {
			return fmt.Errorf("check: %w", err)
		}
		if versions == nil {
			versions = []Version{}
		}
		out = versions
	case ActionIn, ActionOut:
		if len(args) != 1 || args[0] == "" {
			return fmt.Errorf("%s: want exactly one argument, the directory, got %d", action, len(args))
		}
		dir, err := filepath.Abs(args[0])
		if err != nil {
			return fmt.Errorf("%s: directory %q: %w", action, args[0], err)
		}
		var resp Response
		if action == ActionIn {
			var req InRequest
			if err := decodeRequest(raw, &req); err != nil {
				return err
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("in: create %s: %w", dir, err)
			}
			resp, err = t.In(ctx, dir, req, stderr)
			if err != nil {
				return fmt.Errorf("in: %w", err)
			}
		} else {
			var req OutRequest
			if err := decodeRequest(raw, &req); err != nil {
				return err
			}
			resp, err = t.Out(ctx, dir, req, stderr)
			if err != nil {
				return fmt.Errorf("out: %w", err)
			}
		}
		if len(resp.Version) == 0 {
			return fmt.Errorf("%s: produced no version", action)
		}
		out = resp
	default:
		return fmt.Errorf("unknown action %q: want check, in or out", action)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	if _, err := stdout.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write response: %w", err)
	}
	return nil
}

func decodeRequest(raw []byte, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return errors.New("empty request on stdin: want a JSON object")
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("decode request from stdin: %w", err)
	}
	return nil
}

// Decode decodes a source or params object into v, refusing unknown fields so
// a typo is an error that names the field. Empty or null leaves v untouched.
func Decode(what string, raw json.RawMessage, v any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid %s: %w", what, err)
	}
	return nil
}

// Duration is a time.Duration written in JSON as a Go duration string ("10s", "1m").
type Duration time.Duration

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"10s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// Sleep waits for d or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Logf writes one log line to w.
func Logf(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, format+"\n", args...)
}

// JoinInside joins rel to dir, refusing absolute paths and paths that climb
// out of dir, so request fields cannot write or read elsewhere.
func JoinInside(dir, rel string) (string, error) {
	if rel == "" {
		return "", errors.New("empty path")
	}
	if filepath.IsAbs(rel) {
		return "", fmt.Errorf("path %q is absolute: want one relative to %s", rel, dir)
	}
	clean := filepath.Clean(rel)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("path %q leaves %s", rel, dir)
	}
	return filepath.Join(dir, clean), nil
}

// String is a string that also accepts a JSON number or boolean, since YAML
// turns `tag: 1.0` or `version: 2` into numbers on the way to the resource.
type String string

// UnmarshalJSON accepts a string, number or boolean.
func (s *String) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err == nil {
		*s = String(str)
		return nil
	}
	var raw any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return err
	}
	switch v := raw.(type) {
	case json.Number:
		*s = String(v.String())
	case bool:
		*s = String(fmt.Sprint(v))
	case nil:
		*s = ""
	default:
		return fmt.Errorf("want a string, got %s", b)
	}
	return nil
}
