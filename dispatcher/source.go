package dispatcher

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/propagation"
)

// Source is one queue of a broker that Run consumes. A queue trigger kind implements it in
// its own package (triggers/rabbitmq/amqpsource); the dispatcher knows no broker.
type Source interface {
	// Destination names the consumed queue in logs, spans, metrics and the X-Sless-Queue
	// header.
	Destination() string
	// System is the broker as OpenTelemetry's messaging.system names it ("rabbitmq").
	System() string
	// Check reports the source's bad settings (as *ConfigError, joined) before Run connects;
	// prefetch is the number of deliveries Run keeps unsettled at once.
	Check(prefetch int) error
	// Open connects and starts consuming with at most prefetch unsettled deliveries,
	// logging to log. A *ConfigError ends Run; any other error is retried with backoff.
	Open(ctx context.Context, prefetch int, log *slog.Logger) (Session, error)
}

// Session is one connection's consumer of a Source.
type Session interface {
	// Next waits for the next delivery; ok is false once quit is closed or the consumer
	// ended (Cancel, or the connection went away: Lost says why).
	Next(quit <-chan struct{}) (d Delivery, ok bool)
	// Lost says why deliveries ended without Cancel (e.g. the broker closed the connection).
	Lost() error
	// Empty reports whether the queue holds no message ready for consumers.
	Empty() (bool, error)
	// Cancel stops the consumer: Next hands out the deliveries already on their way, then
	// reports !ok. Deliveries never handed out return to the queue.
	Cancel() error
	// Close sends every outcome reported and ends the session, once every delivery it
	// handed out is settled; what was not settled returns to the queue. It may be called
	// again, doing nothing.
	Close() error
}

// Delivery is one message taken from a Session. Exactly one of Ack, Requeue, Retry and
// DeadLetter settles it, once; a Retry or DeadLetter that fails leaves it unsettled and
// the dispatcher requeues it.
type Delivery interface {
	Body() []byte
	ContentType() string
	// MessageID is the producer's message ID, for spans ("" if none).
	MessageID() string
	// LogArgs name the delivery in log lines (slog key-value pairs).
	LogArgs() []any
	// Attempt is the 1-based attempt number the message carries (1 when it carries none).
	Attempt() int
	// RetryAt is the earliest time the message may run (zero: at once).
	RetryAt() time.Time
	// Attribute is the message's string attribute key (an application header), "" if none.
	Attribute(key string) string
	// TraceCarrier holds the producer's W3C trace context, or is nil when the message
	// carries none.
	TraceCarrier() propagation.TextMapCarrier
	// Header is what the function receives for the message as an event: NewEventHeader's
	// headers for trigger and attempt, and the broker's own (X-Amqp-*).
	Header(trigger string, attempt int) http.Header

	// Ack settles the message as done.
	Ack()
	// Requeue hands the message back unprocessed, as it came.
	Requeue()
	// Retry makes the message come again as attempt next, not before at, carrying
	// lastErr; the message is settled only once that copy is durable.
	Retry(ctx context.Context, next int, at time.Time, lastErr error) error
	// DeadLetter moves the message to the dead-letter queue with its attempt, lastErr and
	// reason; it is settled only once that copy is durable.
	DeadLetter(ctx context.Context, attempt int, lastErr error, reason string) error
}
