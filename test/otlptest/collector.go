// Package otlptest is an OTLP/gRPC receiver for tests: the processes under test export
// their spans and metrics to it through the standard OTEL_EXPORTER_OTLP_* variables, as they
// would to a real collector.
package otlptest

import (
	"context"
	"encoding/hex"
	"net"
	"sync"
	"testing"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// Collector holds what was exported to it.
type Collector struct {
	mu      sync.Mutex
	spans   []*tracepb.Span
	metrics []*metricpb.Metric
}

type traces struct {
	coltracepb.UnimplementedTraceServiceServer
	c *Collector
}

func (s traces) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	add(s.c, &s.c.spans, req.ResourceSpans, (*tracepb.ResourceSpans).GetScopeSpans, (*tracepb.ScopeSpans).GetSpans)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

type metrics struct {
	colmetricpb.UnimplementedMetricsServiceServer
	c *Collector
}

func (s metrics) Export(_ context.Context, req *colmetricpb.ExportMetricsServiceRequest) (*colmetricpb.ExportMetricsServiceResponse, error) {
	add(s.c, &s.c.metrics, req.ResourceMetrics, (*metricpb.ResourceMetrics).GetScopeMetrics, (*metricpb.ScopeMetrics).GetMetrics)
	return &colmetricpb.ExportMetricsServiceResponse{}, nil
}

// add appends every item of every scope of every resource of an export to *into.
func add[R, S, T any](c *Collector, into *[]T, resources []R, scopes func(R) []S, items func(S) []T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range resources {
		for _, sc := range scopes(r) {
			*into = append(*into, items(sc)...)
		}
	}
}

// Start serves a Collector on a loopback port for the test and points the OTLP exporters of
// this process (and of the processes it starts with its environment) at it.
func Start(t *testing.T) *Collector {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &Collector{}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, traces{c: c})
	colmetricpb.RegisterMetricsServiceServer(srv, metrics{c: c})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+ln.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	return c
}

// HasSpan reports whether a span called name of the trace traceID (hex) was received.
func (c *Collector) HasSpan(name, traceID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.spans {
		if s.Name == name && hex.EncodeToString(s.TraceId) == traceID {
			return true
		}
	}
	return false
}

// SpanNames is the name of every span received so far, for failure messages.
func (c *Collector) SpanNames() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, s := range c.spans {
		out = append(out, s.Name)
	}
	return out
}

// Sum is the latest value of the cumulative sum metric name whose data point has the
// attribute key=value ("" key: any point), and whether one was received.
func (c *Collector) Sum(name, key, value string) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var v int64
	found := false
	for _, m := range c.metrics {
		if m.Name != name || m.GetSum() == nil {
			continue
		}
		for _, dp := range m.GetSum().DataPoints {
			if key == "" || hasAttr(dp.Attributes, key, value) {
				v, found = dp.GetAsInt(), true
			}
		}
	}
	return v, found
}

func hasAttr(attrs []*commonpb.KeyValue, key, value string) bool {
	for _, a := range attrs {
		if a.Key == key && a.Value.GetStringValue() == value {
			return true
		}
	}
	return false
}
