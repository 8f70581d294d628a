package gateway

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"sless.dev/sless/gateway/history"
)

// tracerName names the gateway's spans. The tracer is taken from the global provider when a
// Server is built, not at package init: a tracer obtained earlier stays bound to whichever
// provider was installed first (the OTel global delegates only once).
const tracerName = "sless.dev/sless/gateway"

// metrics are the gateway's Prometheus series.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	rejected prometheus.Counter
	// coldStarts and coldStartTime are per function (knative#13459, http-add-on#1721 ask
	// for exactly these), of /fn/ calls only; coldStartTime is time to first byte.
	coldStarts    *prometheus.CounterVec
	coldStartTime *prometheus.HistogramVec
}

// newMetrics registers the request series, the held-requests gauge and, when the recorder
// counts them, the history drops.
func newMetrics(reg prometheus.Registerer, held func() int64, rec history.Recorder) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sless_gateway_requests_total", Help: "Requests served, by handler (fn, api, other) and status code.",
		}, []string{"handler", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sless_gateway_request_duration_seconds", Help: "Request latency, by handler.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"handler"}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sless_gateway_fn_rejected_total", Help: "/fn/ requests refused with 503 because the held-request cap was reached.",
		}),
		coldStarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sless_cold_starts_total", Help: "/fn/ calls answered through the gateway that waited for an instance of the function to start. Event, cron and asynchronous invocations (the dispatcher's) are not counted: their cold starts are in the invocation history (cold_start).",
		}, []string{"namespace", "function"}),
		coldStartTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sless_cold_start_duration_seconds", Help: "Time to first byte of a cold /fn/ call: from the request to the function's response headers, so the wait for an instance plus the handler's own time until it answers (the backend reports only whether the call was cold, not how long the start took).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2, 3, 5, 10, 30, 60},
		}, []string{"namespace", "function"}),
	}
	cs := []prometheus.Collector{m.requests, m.duration, m.rejected, m.coldStarts, m.coldStartTime,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sless_gateway_fn_held_requests", Help: "/fn/ requests in flight, including those held during a cold start.",
		}, func() float64 { return float64(held()) }),
	}
	if d, ok := rec.(interface{ Dropped() uint64 }); ok {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sless_gateway_history_dropped_total", Help: "Invocation records dropped (buffer full or database down); invocations were still served.",
		}, func() float64 { return float64(d.Dropped()) }))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register gateway metrics: %w", err)
		}
	}
	return m, nil
}

// instrument serves one request inside a server span (continuing the caller's W3C trace) and
// counts it.
func (s *Server) instrument(handler string, h http.Handler, w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx := w3c.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := s.tracer.Start(ctx, r.Method+" /"+handler, trace.WithSpanKind(trace.SpanKindServer))
	sw := &statusWriter{ResponseWriter: w, stall: s.cfg.Conns.WriteStall}
	defer func() {
		code := sw.status
		if code == 0 {
			code = http.StatusOK
		}
		if span.IsRecording() {
			span.SetAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path),
				attribute.Int("http.response.status_code", code))
			if code >= 500 {
				span.SetStatus(codes.Error, http.StatusText(code))
			}
		}
		span.End()
		s.metrics.requests.WithLabelValues(handler, strconv.Itoa(code)).Inc()
		s.metrics.duration.WithLabelValues(handler).Observe(time.Since(start).Seconds())
	}()
	h.ServeHTTP(sw, r.WithContext(ctx))
}

// SetupTracing installs a global tracer provider so every request has a trace id (recorded in
// the history and sent to functions as traceparent). Spans are recorded and exported over OTLP/gRPC when
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (the exporter reads
// the standard OTEL_* variables) and OTEL_TRACES_EXPORTER is not "none". The returned func
// flushes and stops it.
func SetupTracing(ctx context.Context, service string) (func(context.Context) error, error) {
	// Without an exporter, spans are not recorded (they would go nowhere) but still carry
	// fresh trace ids, unless the caller's traceparent asks for sampling.
	opts := []sdktrace.TracerProviderOption{sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample()))}
	if exportConfigured() {
		exp, err := otlptracegrpc.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("OTLP trace exporter: %w", err)
		}
		// The SDK's default sampler honours OTEL_TRACES_SAMPLER.
		opts = []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp)}
	}
	res, err := sdkresource.Merge(sdkresource.Default(), sdkresource.NewSchemaless(attribute.String("service.name", service)))
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(append(opts, sdktrace.WithResource(res))...)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return tp.Shutdown, nil
}

func exportConfigured() bool {
	if os.Getenv("OTEL_TRACES_EXPORTER") == "none" || os.Getenv("OTEL_SDK_DISABLED") == "true" {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}
