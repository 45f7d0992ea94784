// Package telemetry sets up how Porter's processes report on themselves:
// their slog logger (format, level, klog routed into it) and their
// OpenTelemetry tracing (OTLP export when configured, W3C trace context
// carried into step pods).
package telemetry

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"k8s.io/klog/v2"
)

// Log formats.
const (
	FormatText = "text"
	FormatJSON = "json"
)

// Environment variables the sidecar (and serve's defaults) read.
const (
	LogFormatEnv = "PORTER_LOG_FORMAT"
	LogLevelEnv  = "PORTER_LOG_LEVEL"
)

// ParseLevel reads debug, info, warn or error.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToLower(s))); err != nil {
		return 0, fmt.Errorf("log level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// NewLogger returns a logger writing format (text or json) at level and up.
func NewLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	l, err := ParseLevel(level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: l}
	switch strings.ToLower(format) {
	case FormatText, "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case FormatJSON:
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want text or json", format)
}

// LoggerFromEnv is NewLogger with PORTER_LOG_FORMAT and PORTER_LOG_LEVEL
// (default text, info); a bad value falls back to the default and says so.
func LoggerFromEnv(w io.Writer) *slog.Logger {
	log, err := NewLogger(w, os.Getenv(LogFormatEnv), envOr(LogLevelEnv, "info"))
	if err != nil {
		log = slog.New(slog.NewTextHandler(w, nil))
		log.Warn("logging from the environment", "err", err)
	}
	return log
}

// RouteKlog sends client-go's klog output through log, so that one
// process writes one format. With verbose, klog's verbosity is raised to 4
// (client-go's informer and request tracing, at slog's debug level). klog
// is process-wide; call it once, from main.
func RouteKlog(log *slog.Logger, verbose bool) {
	klog.SetSlogLogger(log.With("logger", "klog"))
	if verbose {
		fs := flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(fs)
		_ = fs.Set("v", "4")
	}
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
