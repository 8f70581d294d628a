package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"sless.dev/sless/history"
)

// InvocationError means every attempt allowed by the retry policy failed.
type InvocationError struct {
	Function FunctionRef
	Attempts int
	Err      error // the last attempt's error
}

func (e *InvocationError) Error() string {
	return fmt.Sprintf("function %s failed after %d attempt(s): %v", e.Function, e.Attempts, e.Err)
}
func (e *InvocationError) Unwrap() error { return e.Err }

// InvokeOnce makes one invocation of cfg's function for an occurrence no queue holds (a
// cron tick), retrying in process: it calls the function with the request req builds for
// each attempt (1-based) until one succeeds or cfg.Retry's attempts are spent, waiting
// cfg.Retry's backoff between them. Each attempt is bounded by cfg.Timeout and recorded in
// cfg.Recorder with kind; all run under a producer span "fire <function>" carrying attrs.
// cfg.Logger, as the caller scoped it, gets a line per failed attempt and one for the
// success. It reads cfg's Function, Trigger, Retry, Timeout, Invoker, Recorder and Logger,
// and returns a *ConfigError for bad settings and an *InvocationError when every attempt
// failed.
func InvokeOnce(ctx context.Context, cfg Config, kind history.Kind, req func(attempt int) Call, attrs ...attribute.KeyValue) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	c := cfg.call(kind)
	ctx, span := tracer.Start(ctx, "fire "+cfg.Function.String(), trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	defer span.End()
	for attempt := 1; ; attempt++ {
		_, err := c.run(ctx, req(attempt))
		if err == nil {
			cfg.Logger.Info("fired", "attempt", attempt)
			return nil
		}
		if ctx.Err() != nil || attempt >= cfg.Retry.MaxAttempts {
			return &InvocationError{Function: cfg.Function, Attempts: attempt, Err: err}
		}
		cfg.Logger.Warn("Warning: "+string(kind)+" invocation failed; retrying", "attempt", attempt, "error", err, "retryIn", cfg.Retry.delay(attempt))
		select {
		case <-time.After(cfg.Retry.delay(attempt)):
		case <-ctx.Done():
			return &InvocationError{Function: cfg.Function, Attempts: attempt, Err: errors.Join(err, ctx.Err())}
		}
	}
}
