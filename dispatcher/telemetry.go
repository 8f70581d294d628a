package dispatcher

import (
	"context"
	"strings"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"
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
	attrs                                                 metric.MeasurementOption
}

func newMeters(queue string) *meters {
	meter := otel.Meter(instrumentation)
	m := &meters{attrs: metric.WithAttributes(attribute.String("messaging.destination.name", queue))}
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
	otelC.Add(context.Background(), 1, m.attrs)
}

func (m *meters) flight(delta int64) {
	m.inFlight.Add(delta)
	m.inFlightC.Add(context.Background(), delta, m.attrs)
}

func (m *meters) stats() Stats {
	return Stats{Consumed: m.consumed.Load(), Acked: m.acked.Load(), Retried: m.retried.Load(),
		DeadLettered: m.deadLettered.Load(), Requeued: m.requeued.Load()}
}

// startDeliverySpan starts the consumer span of one delivery as a child of, and linked to,
// the producer's traceparent header when the message carries one.
func startDeliverySpan(ctx context.Context, d *amqp.Delivery, queue string) (context.Context, trace.Span) {
	var carrier propagation.MapCarrier
	for k, v := range d.Headers {
		if s, ok := v.(string); ok {
			if lk := strings.ToLower(k); lk == "traceparent" || lk == "tracestate" {
				if carrier == nil {
					carrier = propagation.MapCarrier{}
				}
				carrier.Set(lk, s)
			}
		}
	}
	producer := ctx
	if carrier != nil {
		producer = propagator.Extract(ctx, carrier)
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	if sc := trace.SpanContextFromContext(producer); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	ctx, span := tracer.Start(producer, "process "+queue, opts...)
	if span.IsRecording() { // attributes cost allocations a no-op tracer would throw away
		span.SetAttributes(
			attribute.String("messaging.system", "rabbitmq"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", queue),
			attribute.String("messaging.message.id", d.MessageId),
		)
	}
	return ctx, span
}

func traceIDOf(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}
