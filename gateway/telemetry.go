package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"sless.dev/sless/history"
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
		}, []string{"namespace", "function", "revision"}),
		coldStartTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sless_cold_start_duration_seconds", Help: "Time to first byte of a cold /fn/ call: from the request to the function's response headers, so the wait for an instance plus the handler's own time until it answers (the backend reports only whether the call was cold, not how long the start took).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2, 3, 5, 10, 30, 60},
		}, []string{"namespace", "function", "revision"}),
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

// SetupTelemetry installs the global tracer and meter providers. Every request gets a trace
// id (recorded in the history and sent to functions as traceparent); spans are recorded and
// exported over OTLP/gRPC when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// is set and OTEL_TRACES_EXPORTER is not "none". The OpenTelemetry metrics (the dispatcher's
// message counters, the history writer's records written and dropped) are exported the same
// way beside them (OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, OTEL_METRICS_EXPORTER, every
// OTEL_METRIC_EXPORT_INTERVAL, default 60 s); the exporters read the standard OTEL_*
// variables. The returned func flushes and stops both.
func SetupTelemetry(ctx context.Context, service string) (func(context.Context) error, error) {
	res, err := sdkresource.Merge(sdkresource.Default(), sdkresource.NewSchemaless(attribute.String("service.name", service)))
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	// Without an exporter, spans are not recorded (they would go nowhere) but still carry
	// fresh trace ids, unless the caller's traceparent asks for sampling.
	opts := []sdktrace.TracerProviderOption{sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample()))}
	if exportConfigured("TRACES") {
		exp, err := otlptracegrpc.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("OTLP trace exporter: %w", err)
		}
		// The SDK's default sampler honours OTEL_TRACES_SAMPLER.
		opts = []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp)}
	}
	tp := sdktrace.NewTracerProvider(append(opts, sdktrace.WithResource(res))...)
	stops := []func(context.Context) error{tp.Shutdown}
	if exportConfigured("METRICS") {
		exp, err := otlpmetricgrpc.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("OTLP metric exporter: %w", err)
		}
		// The periodic reader honours OTEL_METRIC_EXPORT_INTERVAL; Shutdown exports once more.
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)), sdkmetric.WithResource(res))
		otel.SetMeterProvider(mp)
		stops = append(stops, mp.Shutdown)
	}
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return func(ctx context.Context) error {
		var errs []error
		for _, stop := range stops {
			errs = append(errs, stop(ctx))
		}
		return errors.Join(errs...)
	}, nil
}

// exportConfigured reports whether the signal (TRACES or METRICS) is to be exported: an OTLP
// endpoint for it or for all signals, and the signal's exporter not turned off.
func exportConfigured(signal string) bool {
	if os.Getenv("OTEL_"+signal+"_EXPORTER") == "none" || os.Getenv("OTEL_SDK_DISABLED") == "true" {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT") != ""
}
