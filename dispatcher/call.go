package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"sless.dev/sless/history"
	"sless.dev/sless/rules"
)

// call is one way of invoking a function with a timeout and recording the attempt; Run,
// AsyncRunner and InvokeOnce share it so all write the same history records.
type call struct {
	invoker  Invoker
	timeout  time.Duration
	recorder history.Recorder
	record   history.Record // the invariant fields: namespace, function, trigger, kind
}

// call is the call making c's invocations, recorded with kind.
func (c Config) call(kind history.Kind) call {
	return call{invoker: c.Invoker, timeout: c.Timeout, recorder: c.Recorder, record: history.Record{
		Namespace: c.Function.Namespace, Function: c.Function.Name, Trigger: c.Trigger, Kind: kind, MemoryMB: c.Function.MemoryMB}}
}

// run invokes the function once under ctx (which carries the span) and records the attempt.
func (c call) run(ctx context.Context, req Call) (Result, error) {
	ictx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return c.invoke(ctx, ictx, req)
}

// runTimed is run with the bound of a worker's invocationTimer instead of a context and a
// timer of its own.
func (c call) runTimed(ctx context.Context, t *invocationTimer, req Call) (Result, error) {
	ictx := t.start(ctx, c.timeout)
	defer t.stop()
	return c.invoke(ctx, ictx, req)
}

// invoke calls the function under ictx, ctx bounded by the call's timeout.
func (c call) invoke(ctx, ictx context.Context, req Call) (Result, error) {
	start := time.Now()
	propagator.Inject(ctx, headerCarrier(req.Header))
	res, err := c.invoker.Invoke(ictx, req)
	status := history.StatusSucceeded
	if err != nil {
		status = history.StatusFailed
		if errors.Is(context.Cause(ictx), context.DeadlineExceeded) && ctx.Err() == nil {
			status = history.StatusTimeout
			err = fmt.Errorf("function did not answer within %s: %w", c.timeout, err)
		}
	}
	if _, off := c.recorder.(discard); !off { // no history: no record (its trace id is a string to build)
		r := c.record
		r.Start, r.Duration, r.HTTPStatus, r.TraceID, r.ColdStart, r.Status = start, time.Since(start), res.Status, traceIDOf(ctx), res.ColdStart, status
		if fn, _, ok := rules.RevisionOf(res.Revision); ok && fn == r.Function { // only a revision of the function called
			r.Revision = res.Revision
		}
		if err != nil {
			r.Error = err.Error()
		}
		c.recorder.Record(r)
	}
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("http.response.status_code", res.Status))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, status)
	}
	return res, err
}

// invocationTimer bounds one worker's invocations by the call timeout with one context and
// one timer for as long as none runs out of time, instead of a context.WithTimeout per
// message (a context, its timer and done channel, and the HTTP transport's registration in
// it: seven allocations). Only its worker uses it.
type invocationTimer struct {
	parent context.Context // the session's work context: abort still cancels invocations
	ctx    context.Context // cancelled with the cause context.DeadlineExceeded when timer fires
	timer  *time.Timer
}

// start returns the context of one invocation: the span of ctx on the worker's context,
// which the timer cancels after timeout.
func (t *invocationTimer) start(ctx context.Context, timeout time.Duration) context.Context {
	if t.ctx == nil {
		bounded, cancel := context.WithCancelCause(t.parent)
		t.ctx, t.timer = bounded, time.AfterFunc(timeout, func() { cancel(context.DeadlineExceeded) })
	} else {
		t.timer.Reset(timeout)
	}
	return trace.ContextWithSpan(t.ctx, trace.SpanFromContext(ctx))
}

// stop ends the invocation start began.
func (t *invocationTimer) stop() {
	if !t.timer.Stop() { // it fired: that context is done, the next invocation gets another
		t.ctx = nil
	}
}
