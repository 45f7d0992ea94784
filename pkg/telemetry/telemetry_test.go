package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/klog/v2"

	"github.com/porter-ci/porter/pkg/telemetry"
)

func TestNewLoggerJSONAtLevel(t *testing.T) {
	var buf bytes.Buffer
	log, err := telemetry.NewLogger(&buf, "json", "warn")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown", "k", "v")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one line at warn and up, got %q", buf.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatalf("not JSON: %q: %v", lines[0], err)
	}
	if rec["msg"] != "shown" || rec["level"] != "WARN" || rec["k"] != "v" {
		t.Errorf("record = %v", rec)
	}
}

func TestNewLoggerRejectsUnknownSettings(t *testing.T) {
	if _, err := telemetry.NewLogger(&bytes.Buffer{}, "xml", "info"); err == nil {
		t.Error("format xml accepted")
	}
	if _, err := telemetry.NewLogger(&bytes.Buffer{}, "text", "loud"); err == nil {
		t.Error("level loud accepted")
	}
}

// klog (client-go's logger) writes through the slog logger, in its format.
func TestRouteKlog(t *testing.T) {
	var buf bytes.Buffer
	log, err := telemetry.NewLogger(&buf, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	telemetry.RouteKlog(log, false)
	t.Cleanup(func() { klog.ClearLogger() })
	klog.InfoS("from client-go", "pod", "p1")
	klog.Flush()
	var rec map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(buf.Bytes()), &rec); err != nil {
		t.Fatalf("klog output is not one JSON line: %q: %v", buf.String(), err)
	}
	if rec["msg"] != "from client-go" || rec["logger"] != "klog" || rec["pod"] != "p1" {
		t.Errorf("record = %v", rec)
	}
}

// A traceparent made from a span gives back a context whose remote parent
// is that span: how the sidecar's spans join the server's.
func TestTraceParentRoundTrip(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("t").Start(context.Background(), "step")
	defer span.End()
	header := telemetry.TraceParent(ctx)
	if !strings.HasPrefix(header, "00-"+span.SpanContext().TraceID().String()+"-"+span.SpanContext().SpanID().String()) {
		t.Fatalf("traceparent %q does not name the span", header)
	}
	remote := trace.SpanContextFromContext(telemetry.WithTraceParent(context.Background(), header))
	if !remote.IsRemote() || remote.TraceID() != span.SpanContext().TraceID() || remote.SpanID() != span.SpanContext().SpanID() {
		t.Errorf("remote parent = %v, want the step span", remote)
	}
	if telemetry.TraceParent(context.Background()) != "" {
		t.Error("a context without a span has a traceparent")
	}
}

// Without an endpoint there is no exporter.
func TestTracingFromEnvWithoutEndpointIsNoop(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tr, err := telemetry.TracingFromEnv(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	_, span := tr.Tracer().Start(context.Background(), "s")
	if span.SpanContext().IsValid() {
		t.Error("a span was recorded without an endpoint")
	}
}
