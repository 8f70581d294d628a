package amqpsource_test

import (
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestSpanContinuesProducerTrace: the consumer span is a child of and linked to the
// producer's traceparent, and the function receives the consumer span's context.
func TestSpanContinuesProducerTrace(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	useGlobal[trace.TracerProvider](t, otel.GetTracerProvider, otel.SetTracerProvider, sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))

	const producerTrace, producerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	q := newQueue(t)
	publish(t, q, 1, func(int) amqp.Publishing {
		return amqp.Publishing{Body: []byte(`{}`), Headers: amqp.Table{"traceparent": "00-" + producerTrace + "-" + producerSpan + "-01"}}
	})
	f := newFnServer(t, ok)
	run(t, config(t, q, f))

	var consumer sdktrace.ReadOnlySpan
	for _, s := range spans.Ended() {
		if s.SpanKind() == trace.SpanKindConsumer {
			consumer = s
		}
	}
	if consumer == nil {
		t.Fatal("no consumer span recorded")
	}
	if consumer.Name() != "process "+q || consumer.Parent().SpanID().String() != producerSpan || consumer.SpanContext().TraceID().String() != producerTrace {
		t.Fatalf("span %q parent %s trace %s; want a child of the producer span", consumer.Name(), consumer.Parent().SpanID(), consumer.SpanContext().TraceID())
	}
	if links := consumer.Links(); len(links) != 1 || links[0].SpanContext.SpanID().String() != producerSpan {
		t.Fatalf("links %v, want one link to the producer span", links)
	}
	if tp := f.headers["0"].Get("Traceparent"); !strings.Contains(tp, consumer.SpanContext().SpanID().String()) {
		t.Fatalf("function got traceparent %q, want the consumer span %s", tp, consumer.SpanContext().SpanID())
	}
}
