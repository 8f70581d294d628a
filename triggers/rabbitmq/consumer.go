package rabbitmq

import (
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/spf13/pflag"

	"sless.dev/sless/dispatcher"
	"sless.dev/sless/triggers/kind"
	"sless.dev/sless/triggers/rabbitmq/amqpsource"
)

var _ kind.Consumer = Kind{}

// Dispatcher is `sless dispatcher` itself (DrainArgs), consuming a RabbitMQ queue; with
// --async it replays a function's asynchronous invocations from their queue.
func (Kind) Dispatcher() kind.DispatcherCommand {
	return kind.DispatcherCommand{
		Short: "Consume an AMQP queue and invoke a function per message (run by an event trigger's ScaledJob)",
		Long: `Consumes --queue with manual acks; a message is acked only after the function answered 2xx.
Failures are retried (attempt count in the x-sless-attempt header), then dead-lettered to
--dead-letter-queue with the last error. SIGTERM drains: no new messages, in-flight ones finish.
Every flag can also be set as SLESS_<FLAG> (e.g. SLESS_AMQP_URL, SLESS_DATABASE_URL).
Exit codes: 0 done, 1 failure, 2 configuration (flags, queue-argument mismatch, credentials).`,
		Bind: func(fs *pflag.FlagSet) func(dispatcher.Config) (dispatcher.Source, error) {
			var (
				c         amqpsource.Config
				queueArgs []string
			)
			fs.StringVar(&c.URL, "amqp-url", "", "RabbitMQ URL, amqp://user:password@host:5672/vhost (required)")
			fs.StringVar(&c.Queue, "queue", "", "queue to consume (required)")
			fs.StringVar(&c.DeadLetterQueue, "dead-letter-queue", "", "queue for messages that exhausted their attempts or are poison (default <queue>.dlq)")
			fs.StringSliceVar(&queueArgs, "queue-arg", nil, "queue argument key=value as the producers declare it, e.g. x-queue-type=quorum (repeatable)")
			return func(cfg dispatcher.Config) (dispatcher.Source, error) {
				if len(queueArgs) > 0 {
					c.QueueArgs = amqp.Table{}
				}
				for _, a := range queueArgs {
					k, v, err := amqpsource.ParseQueueArg(a)
					if err != nil {
						return nil, err
					}
					c.QueueArgs[k] = v
				}
				c.Config = cfg
				return c.Source(), nil
			}
		},
	}
}
