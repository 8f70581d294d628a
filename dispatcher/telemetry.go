package dispatcher

import (
	"context"
	"net/http"
	"slices"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

const instrumentation = "sless.dev/sless/dispatcher"

var (
	tracer = otel.Tracer(instrumentation)
	// The W3C format is fixed rather than taken from the global propagator: functions and
	// producers speak traceparent whatever the process-wide setup is.
	propagator = propagation.TraceContext{}
)

// Stats counts what a Run did. Acked counts messages acknowledged after a successful
// invocation; Retried and DeadLettered messages are acked too, after their republish.
type Stats struct {
	Consumed     int64 // deliveries taken
	Acked        int64
	Retried      int64
	DeadLettered int64
	Requeued     int64 // handed back to the broker unprocessed (drain, abort)
}

// meters counts into both Stats (for the caller and the exit log) and OpenTelemetry.
type meters struct {
	consumed, acked, retried, deadLettered, requeued atomic.Int64
	inFlight                                         atomic.Int64

	consumedC, ackedC, retriedC, deadLetteredC, requeuedC metric.Int64Counter
	inFlightC                                             metric.Int64UpDownCounter
	// The options of every measurement, built once: a variadic argument built per call
	// escapes to the heap through the instrument's interface, four allocations a message.
	addOpts []metric.AddOption
}

func newMeters(queue string) *meters {
	meter := otel.Meter(instrumentation)
	m := &meters{addOpts: []metric.AddOption{metric.WithAttributes(attribute.String("messaging.destination.name", queue))}}
	m.consumedC, _ = meter.Int64Counter("sless.dispatcher.messages.consumed", metric.WithDescription("Messages taken from the queue"))
	m.ackedC, _ = meter.Int64Counter("sless.dispatcher.messages.acked", metric.WithDescription("Messages acknowledged after a successful invocation"))
	m.retriedC, _ = meter.Int64Counter("sless.dispatcher.messages.retried", metric.WithDescription("Messages republished for another attempt"))
	m.deadLetteredC, _ = meter.Int64Counter("sless.dispatcher.messages.dead_lettered", metric.WithDescription("Messages moved to the dead-letter queue"))
	m.requeuedC, _ = meter.Int64Counter("sless.dispatcher.messages.requeued", metric.WithDescription("Messages handed back unprocessed on stop"))
	m.inFlightC, _ = meter.Int64UpDownCounter("sless.dispatcher.messages.in_flight", metric.WithDescription("Messages being processed"))
	return m
}

func (m *meters) count(c *atomic.Int64, otelC metric.Int64Counter) {
	c.Add(1)
	otelC.Add(context.Background(), 1, m.addOpts...)
}

func (m *meters) flight(delta int64) {
	m.inFlight.Add(delta)
	m.inFlightC.Add(context.Background(), delta, m.addOpts...)
}

func (m *meters) stats() Stats {
	return Stats{Consumed: m.consumed.Load(), Acked: m.acked.Load(), Retried: m.retried.Load(),
		DeadLettered: m.deadLettered.Load(), Requeued: m.requeued.Load()}
}

// deliverySpans starts the consumer span of each delivery of one source; its name and
// options are built once, not per message.
type deliverySpans struct {
	name   string
	queue  string
	system string
	opts   []trace.SpanStartOption
}

func newDeliverySpans(src Source) deliverySpans {
	q := src.Destination()
	return deliverySpans{name: "process " + q, queue: q, system: src.System(), opts: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}}
}

// start starts the consumer span of one delivery as a child of, and linked to, the
// producer's trace context when the message carries one.
func (s deliverySpans) start(ctx context.Context, d Delivery) (context.Context, trace.Span) {
	producer, opts := ctx, s.opts
	if carrier := d.TraceCarrier(); carrier != nil {
		producer = propagator.Extract(ctx, carrier)
		if sc := trace.SpanContextFromContext(producer); sc.IsValid() {
			opts = append(slices.Clip(opts), trace.WithLinks(trace.Link{SpanContext: sc}))
		}
	}
	ctx, span := tracer.Start(producer, s.name, opts...)
	if span.IsRecording() { // attributes cost allocations a no-op tracer would throw away
		span.SetAttributes(
			attribute.String("messaging.system", s.system),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", s.queue),
			attribute.String("messaging.message.id", d.MessageID()),
		)
	}
	return ctx, span
}

// headerCarrier is propagation.HeaderCarrier without canonicalizing the W3C keys on every
// Set (an allocation each): the propagator only ever sets traceparent and tracestate.
type headerCarrier http.Header

func (c headerCarrier) Get(key string) string { return http.Header(c).Get(key) }

func (c headerCarrier) Set(key, value string) {
	switch key {
	case "traceparent":
		c["Traceparent"] = []string{value}
	case "tracestate":
		c["Tracestate"] = []string{value}
	default:
		http.Header(c).Set(key, value)
	}
}

func (c headerCarrier) Keys() []string { return propagation.HeaderCarrier(c).Keys() }

func traceIDOf(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}
