package telemetry

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// EndpointEnv is OpenTelemetry's standard variable for the OTLP endpoint.
const EndpointEnv = "OTEL_EXPORTER_OTLP_ENDPOINT"

// Tracing is a process's tracer provider and how to flush it.
type Tracing struct {
	Provider trace.TracerProvider
	// Shutdown flushes the spans still buffered; call it before exiting.
	Shutdown func(context.Context) error
}

// Tracer names Porter's instrumentation scope.
func (t Tracing) Tracer() trace.Tracer { return t.Provider.Tracer("github.com/porter-ci/porter") }

// Noop records nothing and costs nothing.
func Noop() Tracing {
	return Tracing{Provider: noop.NewTracerProvider(), Shutdown: func(context.Context) error { return nil }}
}

// TracingFromEnv exports spans by OTLP/gRPC when OTEL_EXPORTER_OTLP_ENDPOINT
// is set (the exporter reads the other standard OTEL_EXPORTER_OTLP_*
// variables too), and is Noop otherwise.
func TracingFromEnv(ctx context.Context, service string) (Tracing, error) {
	if os.Getenv(EndpointEnv) == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return Noop(), nil
	}
	return newTracing(ctx, service)
}

// TracingTo exports spans by OTLP/gRPC to endpoint, a URL (http:// means
// without TLS); an empty endpoint is Noop.
func TracingTo(ctx context.Context, service, endpoint string) (Tracing, error) {
	if endpoint == "" {
		return Noop(), nil
	}
	return newTracing(ctx, service, otlptracegrpc.WithEndpointURL(endpoint))
}

func newTracing(ctx context.Context, service string, opts ...otlptracegrpc.Option) (Tracing, error) {
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return Tracing{}, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res := resource.NewSchemaless(semconv.ServiceName(service))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(2*time.Second)),
		sdktrace.WithResource(res),
	)
	return Tracing{Provider: tp, Shutdown: tp.Shutdown}, nil
}

var propagator = propagation.TraceContext{}

// TraceParent is the W3C traceparent of ctx's span ("" without one).
func TraceParent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c.Get("traceparent")
}

// WithTraceParent returns ctx with the remote span a W3C traceparent names
// as its parent (ctx unchanged for "").
func WithTraceParent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}
