package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"

	"sless.dev/sless/history"
)

// handle takes one delivery to exactly one of: ack (function succeeded), retry (a copy for
// the next attempt, then ack), dead-letter (a copy in the dead-letter queue, then ack), or
// requeue (stopping, or the copy failed), so a message is never acked before its successor
// copy is safely in the broker. The source settles it.
func (d *dispatcher) handle(work context.Context, stopping <-chan struct{}, t *invocationTimer, m Delivery) {
	attempt := m.Attempt()
	ctx, span := d.spans.start(work, m)
	defer span.End()
	// Built only when something is logged: the success path must stay allocation-light.
	log := func() *slog.Logger {
		return d.log.With(append(m.LogArgs(), "attempt", attempt)...)
	}

	// A retry-at beyond the longest backoff (a clock jump, a forged header) is clamped so a
	// message can never park in a prefetch slot indefinitely.
	if notBefore := m.RetryAt(); !notBefore.IsZero() {
		if latest := time.Now().Add(d.cfg.Retry.MaxBackoff); notBefore.After(latest) {
			notBefore = latest
		}
		if !waitUntil(notBefore, stopping, work.Done()) {
			d.requeue(m)
			return
		}
	}
	id, req, err := d.request(m, attempt)
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
		d.deadLetter(ctx, m, attempt, err)
		return
	}
	if id != "" {
		switch done, ok := d.startAsync(ctx, id, attempt); {
		case !ok:
			d.requeue(m) // its record cannot be written now: run it when it can
			return
		case done:
			m.Ack() // a duplicate of an invocation with its outcome
			return
		}
	}
	res, err := d.call.runTimed(ctx, t, req)
	switch {
	case err == nil:
		if id != "" && !d.settleAsync(ctx, id, succeeded(res)) {
			d.requeue(m) // run again rather than leave a record that says it did not
			return
		}
		m.Ack()
		d.m.count(&d.m.acked, d.m.ackedC)
	case work.Err() != nil:
		log().Info("invocation aborted by stop or connection loss; message returns to the queue", "error", err)
		if id != "" {
			d.noteAsync(context.WithoutCancel(ctx), id, func(inv *history.AsyncInvocation) { inv.Status = history.AsyncQueued })
		}
		d.requeue(m)
	case attempt < d.cfg.Retry.MaxAttempts:
		log().Info("invocation failed; scheduling a retry", "error", err, "retryIn", d.cfg.Retry.delay(attempt))
		if id != "" {
			d.noteAsync(ctx, id, func(inv *history.AsyncInvocation) {
				inv.Status, inv.HTTPStatus, inv.Error = history.AsyncQueued, res.Status, err.Error()
			})
		}
		d.retry(ctx, m, attempt, err)
	default:
		log().Warn("Warning: invocation failed on the last attempt; dead-lettering the message", "error", err)
		if id != "" {
			d.settleAsync(ctx, id, func(inv *history.AsyncInvocation) { failed(attempt, err)(inv); inv.HTTPStatus = res.Status })
		}
		d.deadLetter(ctx, m, attempt, err)
	}
}

// request is the call a delivery makes: an event's JSON body with its message headers, or
// the request an asynchronous invocation (id) replays.
func (d *dispatcher) request(m Delivery, attempt int) (id string, c Call, err error) {
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
	body, err := EventBody(m.ContentType(), m.Body(), d.cfg.MaxBodyBytes)
	return "", Call{Body: body, Header: m.Header(d.cfg.Trigger, attempt)}, err
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

// retry has the source bring m back as the next attempt after its backoff.
func (d *dispatcher) retry(ctx context.Context, m Delivery, attempt int, cause error) {
	d.move(m, m.Retry(ctx, attempt+1, time.Now().Add(d.cfg.Retry.delay(attempt)), cause), &d.m.retried, d.m.retriedC)
}

// deadLetter has the source move m to the dead-letter queue with why it failed.
func (d *dispatcher) deadLetter(ctx context.Context, m Delivery, attempt int, cause error) {
	reason := "attempts exhausted"
	var poison *PoisonError
	if errors.As(cause, &poison) {
		reason = poison.Reason
	}
	d.move(m, m.DeadLetter(ctx, attempt, cause, reason), &d.m.deadLettered, d.m.deadLetteredC)
}

// move counts a retry or dead letter the source made, or requeues m when it failed: the
// message exists in the broker at every moment (a duplicate is possible, a loss is not).
func (d *dispatcher) move(m Delivery, err error, c *atomic.Int64, otelC metric.Int64Counter) {
	if err != nil {
		d.log.Warn("Warning: republishing failed; the message returns to the queue", "error", err)
		d.requeue(m)
		return
	}
	d.m.count(c, otelC)
}

func (d *dispatcher) requeue(m Delivery) {
	m.Requeue()
	d.m.count(&d.m.requeued, d.m.requeuedC)
}
