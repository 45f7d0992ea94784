package observability_test

import (
	"context"
	"encoding/hex"
	"strconv"
	"sync"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
)

// span is one received span, flattened.
type span struct {
	Service, Name           string
	TraceID, SpanID, Parent string
	Attrs                   map[string]string
}

// traceReceiver is an OTLP/gRPC trace collector that keeps what it gets.
type traceReceiver struct {
	collectortrace.UnimplementedTraceServiceServer

	mu    sync.Mutex
	spans []span
}

func newTraceReceiver() *traceReceiver { return &traceReceiver{} }

func (r *traceReceiver) register(g *grpc.Server) { collectortrace.RegisterTraceServiceServer(g, r) }

func (r *traceReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				attrs := map[string]string{}
				for _, kv := range sp.GetAttributes() {
					switch v := kv.GetValue().GetValue().(type) {
					case *commonpb.AnyValue_StringValue:
						attrs[kv.GetKey()] = v.StringValue
					case *commonpb.AnyValue_IntValue:
						attrs[kv.GetKey()] = strconv.FormatInt(v.IntValue, 10)
					case *commonpb.AnyValue_BoolValue:
						attrs[kv.GetKey()] = strconv.FormatBool(v.BoolValue)
					}
				}
				r.spans = append(r.spans, span{Service: service, Name: sp.GetName(),
					TraceID: hex.EncodeToString(sp.GetTraceId()), SpanID: hex.EncodeToString(sp.GetSpanId()),
					Parent: hex.EncodeToString(sp.GetParentSpanId()), Attrs: attrs})
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// all returns a copy of the spans received so far.
func (r *traceReceiver) all() []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]span(nil), r.spans...)
}
