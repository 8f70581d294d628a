package amqpsource

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/propagation"

	"sless.dev/sless/dispatcher"
)

// Headers the dispatcher keeps on messages it republishes; they never reach the function as
// application headers. The attempt count lives in the message, so retries survive a
// dispatcher restart.
const (
	headerAttempt     = "x-sless-attempt"    // attempt number of the next delivery (1-based)
	headerRetryAt     = "x-sless-retry-at"   // unix milliseconds before which it must not run
	headerLastError   = "x-sless-last-error" // error of the previous attempt
	headerDeadReason  = "x-sless-dead-letter-reason"
	headerSourceQueue = "x-sless-source-queue"
	headerDeadAt      = "x-sless-dead-lettered-at"
)

// delivery is an AMQP delivery of a session as a dispatcher.Delivery.
type delivery struct {
	amqp.Delivery
	s *session
}

func (m *delivery) Body() []byte        { return m.Delivery.Body }
func (m *delivery) ContentType() string { return m.Delivery.ContentType }
func (m *delivery) MessageID() string   { return m.MessageId }
func (m *delivery) LogArgs() []any {
	return []any{"messageId", m.MessageId, "deliveryTag", m.DeliveryTag}
}
func (m *delivery) Attempt() int       { return attemptOf(m.Headers) }
func (m *delivery) RetryAt() time.Time { return retryAtOf(m.Headers) }

func (m *delivery) Attribute(key string) string {
	v, _ := m.Headers[key].(string)
	return v
}

func (m *delivery) Header(trigger string, attempt int) http.Header {
	return InvocationHeader(&m.Delivery, m.s.src.Queue, trigger, attempt)
}

// TraceCarrier holds the message's traceparent and tracestate headers.
func (m *delivery) TraceCarrier() propagation.TextMapCarrier {
	var carrier propagation.MapCarrier
	for k, v := range m.Headers {
		if str, ok := v.(string); ok {
			if lk := strings.ToLower(k); lk == "traceparent" || lk == "tracestate" {
				if carrier == nil {
					carrier = propagation.MapCarrier{}
				}
				carrier.Set(lk, str)
			}
		}
	}
	if carrier == nil {
		return nil
	}
	return carrier
}

func (m *delivery) Ack() { m.s.acker.ack(m.DeliveryTag) }

func (m *delivery) Requeue() { m.s.acker.requeue(m.DeliveryTag) }

// Retry republishes m to its queue with the next attempt number and its earliest run time,
// then acks it.
func (m *delivery) Retry(ctx context.Context, next int, at time.Time, lastErr error) error {
	h := copyTable(m.Headers)
	h[headerAttempt] = int32(next)
	h[headerRetryAt] = at.UnixMilli()
	h[headerLastError] = dispatcher.CleanValue(lastErr.Error())
	return m.publishThenAck(ctx, m.s.src.Queue, republished(m.Delivery, h, m.DeliveryMode))
}

// DeadLetter publishes m (persistent) to the dead-letter queue with why it failed, then acks
// it.
func (m *delivery) DeadLetter(ctx context.Context, attempt int, lastErr error, reason string) error {
	dlq := m.s.src.DeadLetterQueue
	h := copyTable(m.Headers)
	h[headerAttempt] = int32(attempt)
	h[headerLastError] = dispatcher.CleanValue(lastErr.Error())
	h[headerDeadReason] = reason
	h[headerSourceQueue] = m.s.src.Queue
	h[headerDeadAt] = time.Now().UTC().Format(time.RFC3339)
	// The default exchange silently drops a message for a missing queue, so the dead-letter
	// queue is re-declared (idempotent) in case it was deleted since the session began.
	if _, err := m.s.ch.QueueDeclare(dlq, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare the dead-letter queue %s: %w", dlq, err)
	}
	return m.publishThenAck(ctx, dlq, republished(m.Delivery, h, amqp.Persistent))
}

// publishThenAck publishes p to queue, waits for the broker's confirm, and only then acks m;
// an error leaves m unacked (the dispatcher requeues it), so the message exists in the broker
// at every moment (a duplicate is possible, a loss is not).
func (m *delivery) publishThenAck(ctx context.Context, queue string, p amqp.Publishing) error {
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	if err := publishConfirmed(ctx, m.s.ch, queue, p); err != nil {
		return err
	}
	m.Ack()
	return nil
}

func publishConfirmed(ctx context.Context, ch *amqp.Channel, queue string, p amqp.Publishing) error {
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, p)
	if err != nil {
		return fmt.Errorf("publish to %s: %w", queue, err)
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("confirm of publish to %s: %w", queue, err)
	}
	if !acked {
		return fmt.Errorf("broker nacked the publish to %s", queue)
	}
	return nil
}

// republished copies m's properties and body into a new publishing with headers h. UserId is
// left out: the broker rejects a user-id that differs from the publishing connection's user.
func republished(m amqp.Delivery, h amqp.Table, mode uint8) amqp.Publishing {
	return amqp.Publishing{
		Headers: h, ContentType: m.ContentType, ContentEncoding: m.ContentEncoding, DeliveryMode: mode,
		Priority: m.Priority, CorrelationId: m.CorrelationId, ReplyTo: m.ReplyTo, Expiration: m.Expiration,
		MessageId: m.MessageId, Timestamp: m.Timestamp, Type: m.Type, AppId: m.AppId, Body: m.Body,
	}
}

func copyTable(t amqp.Table) amqp.Table {
	c := make(amqp.Table, len(t)+6)
	for k, v := range t {
		c[k] = v
	}
	return c
}

// InvocationHeader maps an AMQP delivery onto the HTTP headers the function receives:
// properties become X-Amqp-<Property>, application headers X-Amqp-Header-<Name> (name
// characters outside [A-Za-z0-9-] become '-'), beside dispatcher.NewEventHeader's X-Sless-*
// invocation metadata.
// traceparent/tracestate are handled by the tracing code, not copied here.
func InvocationHeader(d *amqp.Delivery, queue, trigger string, attempt int) http.Header {
	n := len(d.Headers)
	for _, set := range [...]bool{d.Exchange != "", d.RoutingKey != "", d.ContentType != "",
		d.ContentEncoding != "", d.MessageId != "", d.CorrelationId != "", d.ReplyTo != "", d.Type != "", d.AppId != "",
		d.UserId != "", d.Expiration != "", d.Priority != 0, !d.Timestamp.IsZero(), d.Redelivered} {
		if set {
			n++
		}
	}
	b := dispatcher.NewEventHeader(queue, trigger, attempt, n)
	b.SetIf("X-Amqp-Exchange", d.Exchange)
	b.SetIf("X-Amqp-Routing-Key", d.RoutingKey)
	b.SetIf("X-Amqp-Content-Type", d.ContentType)
	b.SetIf("X-Amqp-Content-Encoding", d.ContentEncoding)
	b.SetIf("X-Amqp-Message-Id", d.MessageId)
	b.SetIf("X-Amqp-Correlation-Id", d.CorrelationId)
	b.SetIf("X-Amqp-Reply-To", d.ReplyTo)
	b.SetIf("X-Amqp-Type", d.Type)
	b.SetIf("X-Amqp-App-Id", d.AppId)
	b.SetIf("X-Amqp-User-Id", d.UserId)
	b.SetIf("X-Amqp-Expiration", d.Expiration)
	if d.Priority != 0 {
		b.Set("X-Amqp-Priority", strconv.Itoa(int(d.Priority)))
	}
	if !d.Timestamp.IsZero() {
		b.Set("X-Amqp-Timestamp", d.Timestamp.UTC().Format(time.RFC3339))
	}
	if d.Redelivered {
		b.Set("X-Amqp-Redelivered", "true")
	}
	for k, v := range d.Headers {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "x-sless-") || lk == "traceparent" || lk == "tracestate" {
			continue
		}
		if name := headerName(k); name != "" {
			b.H.Add("X-Amqp-Header-"+name, headerValue(v))
		}
	}
	return b.H
}

// headerName turns an AMQP header key into an HTTP token.
func headerName(k string) string {
	b := []byte(k)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			b[i] = '-'
		}
	}
	return textproto.CanonicalMIMEHeaderKey(strings.Trim(string(b), "-"))
}

// headerValue renders an AMQP field value as header text: scalars as text, tables and arrays
// as JSON.
func headerValue(v any) string {
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case []byte:
		s = string(x)
	case time.Time:
		s = x.UTC().Format(time.RFC3339)
	case bool, int8, int16, int32, int64, uint8, uint16, uint32, float32, float64:
		s = fmt.Sprint(x)
	case nil:
		s = ""
	default:
		if j, err := json.Marshal(x); err == nil {
			s = string(j)
		} else {
			s = fmt.Sprint(x)
		}
	}
	return dispatcher.CleanValue(s)
}

// attemptOf reads the attempt number a delivery carries; absent or invalid means 1.
func attemptOf(h amqp.Table) int {
	n, ok := intValue(h[headerAttempt])
	if !ok || n < 1 || n > math32 {
		return 1
	}
	return int(n)
}

const math32 = 1<<31 - 1

// retryAtOf reads the earliest time a retried delivery may run (zero if none).
func retryAtOf(h amqp.Table) time.Time {
	n, ok := intValue(h[headerRetryAt])
	if !ok || n <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

func intValue(v any) (int64, bool) {
	switch x := v.(type) {
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	}
	return 0, false
}
