package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"sless.dev/sless/history"
)

// publishTimeout bounds the wait for the broker's confirm of a retry or dead-letter publish.
const publishTimeout = 30 * time.Second

// handle takes one delivery to exactly one of: ack (function succeeded), republish for retry
// + ack, dead-letter + ack, or nack with requeue (stopping, or the republish failed), so a
// message is never acked before its successor copy is safely in the broker. The acker sends
// the ack or nack.
func (d *dispatcher) handle(work context.Context, stopping <-chan struct{}, ch *amqp.Channel, a *acker, t *invocationTimer, m amqp.Delivery) {
	attempt := attemptOf(m.Headers)
	ctx, span := d.spans.start(work, &m)
	defer span.End()
	// Built only when something is logged: the success path must stay allocation-light.
	log := func() *slog.Logger {
		return d.log.With("messageId", m.MessageId, "deliveryTag", m.DeliveryTag, "attempt", attempt)
	}

	// A retry-at beyond the longest backoff (a clock jump, a forged header) is clamped so a
	// message can never park in a prefetch slot indefinitely.
	if notBefore := retryAtOf(m.Headers); !notBefore.IsZero() {
		if latest := time.Now().Add(d.cfg.Retry.MaxBackoff); notBefore.After(latest) {
			notBefore = latest
		}
		if !waitUntil(notBefore, stopping, work.Done()) {
			d.requeue(a, m)
			return
		}
	}
	id, req, err := d.request(&m, attempt)
	if err == nil && attempt > d.cfg.Retry.MaxAttempts { // the policy was lowered since the retry was queued
		err = fmt.Errorf("attempt %d exceeds the retry policy's %d attempts", attempt, d.cfg.Retry.MaxAttempts)
	}
	if err != nil {
		r := d.call.record
		r.Start, r.Status, r.Error, r.TraceID = time.Now(), history.StatusFailed, err.Error(), traceIDOf(ctx)
		d.cfg.Recorder.Record(r)
		log().Warn("Warning: message cannot be delivered; dead-lettering it", "reason", err)
		if id != "" {
			d.settleAsync(ctx, id, failed(attempt, err))
		}
		d.deadLetter(ctx, ch, a, m, attempt, err)
		return
	}
	if id != "" {
		switch done, ok := d.startAsync(ctx, id, attempt); {
		case !ok:
			d.requeue(a, m) // its record cannot be written now: run it when it can
			return
		case done:
			a.ack(m.DeliveryTag) // a duplicate of an invocation with its outcome
			return
		}
	}
	res, err := d.call.runTimed(ctx, t, req)
	switch {
	case err == nil:
		if id != "" && !d.settleAsync(ctx, id, succeeded(res)) {
			d.requeue(a, m) // run again rather than leave a record that says it did not
			return
		}
		a.ack(m.DeliveryTag)
		d.m.count(&d.m.acked, d.m.ackedC)
	case work.Err() != nil:
		log().Info("invocation aborted by stop or connection loss; message returns to the queue", "error", err)
		if id != "" {
			d.noteAsync(context.WithoutCancel(ctx), id, func(inv *history.AsyncInvocation) { inv.Status = history.AsyncQueued })
		}
		d.requeue(a, m)
	case attempt < d.cfg.Retry.MaxAttempts:
		log().Info("invocation failed; scheduling a retry", "error", err, "retryIn", d.cfg.Retry.delay(attempt))
		if id != "" {
			d.noteAsync(ctx, id, func(inv *history.AsyncInvocation) {
				inv.Status, inv.HTTPStatus, inv.Error = history.AsyncQueued, res.Status, err.Error()
			})
		}
		d.retry(ctx, ch, a, m, attempt, err)
	default:
		log().Warn("Warning: invocation failed on the last attempt; dead-lettering the message", "error", err)
		if id != "" {
			d.settleAsync(ctx, id, func(inv *history.AsyncInvocation) { failed(attempt, err)(inv); inv.HTTPStatus = res.Status })
		}
		d.deadLetter(ctx, ch, a, m, attempt, err)
	}
}

// request is the call a delivery makes: an event's JSON body with its message headers, or
// the request an asynchronous invocation (id) replays.
func (d *dispatcher) request(m *amqp.Delivery, attempt int) (id string, c Call, err error) {
	if d.cfg.Async != nil {
		id, c, err = asyncCall(m)
		if err == nil && len(c.Body) > d.cfg.MaxBodyBytes {
			err = &PoisonError{Reason: fmt.Sprintf("body is %d bytes, over the limit of %d (--max-body-bytes)", len(c.Body), d.cfg.MaxBodyBytes)}
		}
		if err == nil {
			c.Header.Set("X-Sless-Attempt", strconv.Itoa(attempt))
		}
		return id, c, err
	}
	body, err := EventBody(m.ContentType, m.Body, d.cfg.MaxBodyBytes)
	return "", Call{Body: body, Header: InvocationHeader(m, d.cfg.Queue, d.cfg.Trigger, attempt)}, err
}

func succeeded(res Result) func(*history.AsyncInvocation) {
	return func(inv *history.AsyncInvocation) {
		inv.Status, inv.HTTPStatus, inv.Error, inv.ColdStart = history.AsyncSucceeded, res.Status, "", res.ColdStart
		inv.Result, inv.Truncated, inv.ContentType = res.Body, res.Truncated, res.ContentType
	}
}

func failed(attempt int, err error) func(*history.AsyncInvocation) {
	return func(inv *history.AsyncInvocation) {
		inv.Status, inv.Attempts, inv.Error = history.AsyncFailed, attempt, err.Error()
	}
}

// waitUntil sleeps until t; it reports false when stopping or aborted first.
func waitUntil(t time.Time, stopping <-chan struct{}, aborted <-chan struct{}) bool {
	wait := time.Until(t)
	if wait <= 0 {
		return true
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-stopping:
		return false
	case <-aborted:
		return false
	}
}

// retry republishes m with the next attempt number and its earliest run time, then acks it.
func (d *dispatcher) retry(ctx context.Context, ch *amqp.Channel, a *acker, m amqp.Delivery, attempt int, cause error) {
	h := copyTable(m.Headers)
	h[headerAttempt] = int32(attempt + 1)
	h[headerRetryAt] = time.Now().Add(d.cfg.Retry.delay(attempt)).UnixMilli()
	h[headerLastError] = cleanValue(cause.Error())
	if d.publishThenAck(ctx, ch, a, d.cfg.Queue, m, republished(m, h, m.DeliveryMode)) {
		d.m.count(&d.m.retried, d.m.retriedC)
	}
}

// deadLetter publishes m to the dead-letter queue with why it failed, then acks it.
func (d *dispatcher) deadLetter(ctx context.Context, ch *amqp.Channel, a *acker, m amqp.Delivery, attempt int, cause error) {
	h := copyTable(m.Headers)
	h[headerAttempt] = int32(attempt)
	h[headerLastError] = cleanValue(cause.Error())
	reason := "attempts exhausted"
	var poison *PoisonError
	if errors.As(cause, &poison) {
		reason = poison.Reason
	}
	h[headerDeadReason] = reason
	h[headerSourceQueue] = d.cfg.Queue
	h[headerDeadAt] = time.Now().UTC().Format(time.RFC3339)
	// The default exchange silently drops a message for a missing queue, so the dead-letter
	// queue is re-declared (idempotent) in case it was deleted since the session began.
	if _, err := ch.QueueDeclare(d.cfg.DeadLetterQueue, true, false, false, false, nil); err != nil {
		d.log.Warn("Warning: declaring the dead-letter queue failed; the message returns to the queue",
			"deadLetterQueue", d.cfg.DeadLetterQueue, "error", err)
		d.requeue(a, m)
		return
	}
	if d.publishThenAck(ctx, ch, a, d.cfg.DeadLetterQueue, m, republished(m, h, amqp.Persistent)) {
		d.m.count(&d.m.deadLettered, d.m.deadLetteredC)
	}
}

// publishThenAck publishes p to queue, waits for the broker's confirm, and only then acks m;
// if the publish is not confirmed m is requeued, so the message exists in the broker at every
// moment (a duplicate is possible, a loss is not).
func (d *dispatcher) publishThenAck(ctx context.Context, ch *amqp.Channel, a *acker, queue string, m amqp.Delivery, p amqp.Publishing) bool {
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	err := publishConfirmed(ctx, ch, queue, p)
	if err != nil {
		d.log.Warn("Warning: republishing failed; the message returns to the queue", "targetQueue", queue, "error", err)
		d.requeue(a, m)
		return false
	}
	a.ack(m.DeliveryTag)
	return true
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

func (d *dispatcher) requeue(a *acker, m amqp.Delivery) {
	a.requeue(m.DeliveryTag)
	d.m.count(&d.m.requeued, d.m.requeuedC)
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
