package amqpsource

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"sless.dev/sless/dispatcher"
	"sless.dev/sless/history"
	"sless.dev/sless/rules"
)

// AsyncPublishing is the message of invocation id replaying req: the caller's body, with
// dispatcher.AsyncAttributes as headers.
func AsyncPublishing(id string, req history.AsyncRequest) (amqp.Publishing, error) {
	attrs, err := dispatcher.AsyncAttributes(id, req)
	if err != nil {
		return amqp.Publishing{}, err
	}
	h := make(amqp.Table, len(attrs))
	for k, v := range attrs {
		h[k] = v
	}
	return amqp.Publishing{
		Headers: h, MessageId: id,
		ContentType: http.Header(req.Header).Get("Content-Type"), DeliveryMode: amqp.Persistent,
		Timestamp: time.Now(), Body: req.Body,
	}, nil
}

// Publisher takes asynchronous invocations for a gateway: each is stored (once per
// idempotency key), then published with the broker's confirm; if the publish fails the record
// is removed and the caller gets the error. A repeated key whose invocation never started is
// published again — the first gateway may have died between the two steps — and the
// dispatcher skips a copy of an invocation already final.
type Publisher struct {
	URL string
	// AsyncStore keeps the records; the gateway reads them back through it.
	history.AsyncStore
	Logger *slog.Logger

	mu       sync.Mutex
	conn     *amqp.Connection
	ch       *amqp.Channel
	declared map[string]bool
}

// Enqueue stores and publishes req; created is false when the idempotency key named an
// existing invocation, which is returned as it stands.
func (p *Publisher) Enqueue(ctx context.Context, req history.AsyncRequest) (history.AsyncInvocation, bool, error) {
	inv, created, err := p.AsyncStore.CreateAsync(ctx, history.NewAsyncInvocation(req))
	if err != nil || !(created || inv.Unstarted()) {
		return inv, false, err
	}
	msg, err := AsyncPublishing(inv.ID, req)
	if err == nil {
		err = p.publish(ctx, rules.AsyncQueue(req.Namespace, req.Function), msg)
	}
	if err != nil {
		if created {
			if derr := p.AsyncStore.DeleteAsync(context.WithoutCancel(ctx), req.Namespace, inv.ID); derr != nil {
				p.Logger.Warn("Warning: an invocation that was not queued keeps its record", "invocation", inv.ID, "error", derr)
			}
		}
		return inv, false, fmt.Errorf("queue the invocation: %w", err)
	}
	return inv, created, nil
}

// publish sends msg to queue and waits for the broker's confirm; a failed publish drops the
// connection, so the next call dials again.
func (p *Publisher) publish(ctx context.Context, queue string, msg amqp.Publishing) error {
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	p.mu.Lock()
	ch, err := p.channel(queue)
	if err != nil {
		p.mu.Unlock()
		return err
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, msg)
	if err != nil {
		p.resetLocked()
		p.mu.Unlock()
		return fmt.Errorf("publish to %s: %w", queue, err)
	}
	p.mu.Unlock()
	acked, err := dc.WaitContext(ctx)
	switch {
	case err != nil:
		p.reset()
		return fmt.Errorf("confirm of publish to %s: %w", queue, err)
	case !acked:
		return fmt.Errorf("the broker refused the message for %s", queue)
	}
	return nil
}

// channel returns a confirming channel on which queue is declared; call with mu held.
func (p *Publisher) channel(queue string) (*amqp.Channel, error) {
	if p.ch == nil || p.ch.IsClosed() {
		p.resetLocked()
		conn, err := amqp.DialConfig(p.URL, amqp.Config{Heartbeat: heartbeat, Properties: amqp.Table{"connection_name": "sless gateway (async)"}})
		if err != nil {
			return nil, fmt.Errorf("connect to RabbitMQ: %w", err)
		}
		ch, err := conn.Channel()
		if err == nil {
			err = ch.Confirm(false)
		}
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("open a confirming channel: %w", err)
		}
		p.conn, p.ch, p.declared = conn, ch, map[string]bool{}
	}
	if !p.declared[queue] {
		if _, err := p.ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
			p.resetLocked()
			return nil, fmt.Errorf("declare %s: %w", queue, err)
		}
		p.declared[queue] = true
	}
	return p.ch, nil
}

func (p *Publisher) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resetLocked()
}

func (p *Publisher) resetLocked() {
	if p.conn != nil {
		_ = p.conn.Close()
	}
	p.conn, p.ch = nil, nil
}

// Close drops the broker connection.
func (p *Publisher) Close() { p.reset() }
