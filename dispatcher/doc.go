// Package dispatcher invokes functions for queued messages and for what a trigger kind fires
// in process (cron ticks).
//
// # Sources
//
// The dispatcher knows no broker: Run consumes a Source, which a queue trigger kind
// implements in its own package and registers as a kind.Consumer (RabbitMQ's is
// triggers/rabbitmq/amqpsource, whose acker folds each channel's consecutive outcomes into
// multiple-acks and whose retries and dead letters are republished with the broker's
// confirm). The rules below are the dispatcher's and hold for every source; the message
// headers and X-Amqp-* headers named are RabbitMQ's (amqpsource).
//
// # Event mode (Run)
//
// Run consumes one queue with manual acks; the prefetch (Config.Concurrency) bounds the
// invocations in flight, run by as many workers, which take the deliveries straight from
// the consumer. Each delivery ends in exactly one of:
//
//   - the function answered 2xx: ack;
//   - it failed (non-2xx, transport error, timeout) and attempts remain: the message is
//     republished to the same queue with x-sless-attempt = n+1, x-sless-retry-at (unix ms,
//     exponential backoff) and x-sless-last-error, and only after the broker confirmed that
//     copy is the original acked. The attempt count lives in the message, so retries survive
//     a dispatcher restart. Whoever takes the copy waits until retry-at before invoking;
//   - the last attempt failed, or the message is poison: it is published (persistent) to the
//     dead-letter queue with x-sless-last-error, x-sless-dead-letter-reason,
//     x-sless-attempt, x-sless-source-queue and x-sless-dead-lettered-at, then acked (the
//     dead-letter queue is re-declared first, so a deleted one does not swallow the message);
//   - the dispatcher stops or loses its connection first: nack with requeue (or the broker
//     requeues it when the channel dies). Delivery is at-least-once; nothing is acked before
//     its outcome is durable.
//
// Poison messages (never retried): a body over Config.MaxBodyBytes, a body that is not valid
// JSON although its content type is application/json or *+json, and binary bodies that are
// neither JSON nor UTF-8.
//
// # The event the function receives
//
// The message body is POSTed as JSON (see EventBody), the event a wrapper makes of the same
// body over HTTP: a JSON object unchanged, an empty body as {}; any other JSON value as
// {"body": <value>}; UTF-8 text as {"body": "<text>"}.
//
// # Headers the function receives (see NewEventHeader and amqpsource.InvocationHeader)
//
//	Content-Type            application/json
//	X-Sless-Trigger-Kind    event
//	X-Sless-Trigger         trigger name
//	X-Sless-Queue           consumed queue
//	X-Sless-Attempt         1-based attempt number
//	X-Amqp-Exchange, X-Amqp-Routing-Key, X-Amqp-Content-Type, X-Amqp-Content-Encoding,
//	X-Amqp-Message-Id, X-Amqp-Correlation-Id, X-Amqp-Reply-To, X-Amqp-Type, X-Amqp-App-Id,
//	X-Amqp-User-Id, X-Amqp-Expiration, X-Amqp-Priority
//	                        the AMQP properties, when set
//	X-Amqp-Timestamp        RFC 3339
//	X-Amqp-Redelivered      "true" when the broker redelivered the message
//	X-Amqp-Header-<Name>    each application header; characters of the name outside
//	                        [A-Za-z0-9-] become '-', scalars are sent as text, tables and
//	                        arrays as JSON; values lose control characters and are capped
//	                        at 4 KiB
//	traceparent, tracestate W3C trace context of the dispatcher's span, which continues (and
//	                        links to) the producer's traceparent header when present
//
// x-sless-* headers and the producer's traceparent/tracestate are not copied as
// X-Amqp-Header-*.
//
// # One invocation in process (InvokeOnce)
//
// InvokeOnce makes one invocation that no queue holds, retrying in process: it calls the
// function with the request its caller builds for each attempt until one answers 2xx or
// Config.Retry's attempts are spent (waiting the same backoff as a queued retry), each
// attempt bounded by Config.Timeout and recorded like an event's, all under one producer
// span; it returns an *InvocationError when every attempt failed. A trigger kind whose pods
// each make one invocation implements kind.Firer on it — the cron kind's `sless dispatcher
// fire` (triggers/cron: the latest tick, the {"type":"cron",...} event and its
// X-Sless-Schedule and X-Sless-Scheduled-Time headers).
//
// Run, AsyncRunner and InvokeOnce record every attempt through history.Recorder (with kind
// event, async, or the one InvokeOnce is given: cron) through one call helper; Run counts
// consumed, acked, retried, dead-lettered, requeued and in-flight messages as OpenTelemetry
// metrics (sless.dispatcher.messages.*).
package dispatcher
