package rabbitmq

import (
	"context"
	"fmt"
	"time"

	"sless.dev/sless/dispatcher"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/triggers/kind"
	"sless.dev/sless/triggers/rabbitmq/amqpsource"
)

// runner consumes a queue of a broker.
type runner struct {
	BrokerURL, Queue, DeadLetterQueue string
	MaxAttempts, BackoffMs            int32
}

// LocalRunner consumes the trigger's queue on its broker: the value of broker_secret_key in
// the tenant's secret broker_secret when that secret exists (as a cluster's KEDA reads it),
// else the one sless dev was started with.
func (Kind) LocalRunner(s api.TriggerSpec, cfg kind.LocalConfig) (kind.Runner, string) {
	broker := cfg.AMQPURL
	v, exists, err := cfg.Secret(s.BrokerSecret, s.BrokerSecretKey)
	switch {
	case err != nil:
		return nil, "broker URL: " + err.Error()
	case exists:
		broker = string(v)
	}
	if broker == "" {
		return nil, fmt.Sprintf("no AMQP broker: create the secret %s with key %s holding the amqp:// URL, or start sless dev with --amqp-url (or SLESS_AMQP_URL)", s.BrokerSecret, s.BrokerSecretKey)
	}
	return runner{BrokerURL: broker, Queue: s.Queue, DeadLetterQueue: s.DeadLetterQueue,
		MaxAttempts: s.MaxAttempts, BackoffMs: s.BackoffMs}, ""
}

// Run consumes the queue until ctx ends; amqpsource.Run reconnects by itself and returns
// early only for configuration errors.
func (r runner) Run(ctx context.Context, env kind.Env) error {
	_, err := amqpsource.Run(ctx, amqpsource.Config{
		URL: r.BrokerURL, Queue: r.Queue, DeadLetterQueue: r.DeadLetterQueue, ConnectionName: "sless dev " + env.Key,
		Config: dispatcher.Config{Function: env.Function, Trigger: env.Trigger,
			Retry:   dispatcher.RetryPolicy{MaxAttempts: int(r.MaxAttempts), Backoff: time.Duration(r.BackoffMs) * time.Millisecond},
			Timeout: env.Timeout, Invoker: env.Invoker, Recorder: env.Recorder, Logger: env.Logger},
	})
	return err
}
