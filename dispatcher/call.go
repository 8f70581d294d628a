package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"sless.dev/sless/gateway/history"
)

// call is one way of invoking a function with a timeout and recording the attempt; event and
// fire mode share it so both write the same history records.
type call struct {
	invoker  Invoker
	timeout  time.Duration
	recorder history.Recorder
	record   history.Record // the invariant fields: namespace, function, trigger, kind
}

// run invokes the function once under ctx (which carries the span) and records the attempt.
func (c call) run(ctx context.Context, req Call) (Result, error) {
	start := time.Now()
	ictx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))
	res, err := c.invoker.Invoke(ictx, req)
	status := res.Status
	r := c.record
	r.Start, r.Duration, r.HTTPStatus, r.TraceID, r.ColdStart = start, time.Since(start), status, traceIDOf(ctx), res.ColdStart
	r.Status = history.StatusSucceeded
	if err != nil {
		r.Status = history.StatusFailed
		if errors.Is(ictx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			r.Status = history.StatusTimeout
			err = fmt.Errorf("function did not answer within %s: %w", c.timeout, err)
		}
		r.Error = err.Error()
	}
	c.recorder.Record(r)
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("http.response.status_code", status))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, r.Status)
	}
	return res, err
}
