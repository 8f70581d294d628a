// Package amqpsource is the RabbitMQ side of the dispatcher: a dispatcher.Source consuming
// one queue with manual acks and a prefetch, whose acks go through an acker that folds them
// into multiple-acks, whose retries and dead letters are republished with the broker's
// confirm before the original is acked, and whose deliveries map onto the function's
// X-Amqp-* headers. The event trigger kind (package rabbitmq) and the asynchronous
// invocations (Publisher, and `sless dispatcher --async`) run on it.
package amqpsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"sless.dev/sless/dispatcher"
)

const (
	heartbeat      = 10 * time.Second
	connectTimeout = 15 * time.Second
	// publishTimeout bounds the wait for the broker's confirm of a retry or dead-letter
	// publish.
	publishTimeout = 30 * time.Second
	// consumerTag names the dispatcher's consumer on its channel.
	consumerTag = "sless-dispatcher"
)

// Config is the event mode on a RabbitMQ queue: the queue's settings and the dispatcher's.
type Config struct {
	URL             string     // AMQP URL, e.g. amqp://user:pass@rabbitmq:5672/vhost
	Queue           string     // the queue consumed
	DeadLetterQueue string     // default Queue + ".dlq"
	QueueArgs       amqp.Table // must match the producers' declaration of Queue
	ConnectionName  string     // shown in the RabbitMQ management UI; default "sless-dispatcher <fn>"
	dispatcher.Config
}

// Run consumes cfg.Queue with dispatcher.Run (which see).
func Run(ctx context.Context, cfg Config) (dispatcher.Stats, error) {
	return dispatcher.Run(ctx, cfg.Config, cfg.Source())
}

// Source is the queue cfg names, with its defaults.
func (cfg Config) Source() dispatcher.Source {
	s := &source{Config: cfg}
	if s.DeadLetterQueue == "" {
		s.DeadLetterQueue = s.Queue + ".dlq"
	}
	if s.ConnectionName == "" {
		s.ConnectionName = "sless-dispatcher " + s.Function.String()
	}
	return s
}

// source is a Config as a dispatcher.Source.
type source struct{ Config }

func (s *source) Destination() string { return s.Queue }
func (s *source) System() string      { return "rabbitmq" }

func (s *source) Check(prefetch int) error {
	var errs []error
	if _, err := amqp.ParseURI(s.URL); err != nil {
		errs = append(errs, &dispatcher.ConfigError{Field: "amqp-url", Reason: fmt.Sprintf("%v (e.g. amqp://guest:guest@127.0.0.1:5672/)", err)})
	}
	if s.Queue == "" {
		errs = append(errs, &dispatcher.ConfigError{Field: "queue", Reason: "must name the queue to consume"})
	}
	if s.DeadLetterQueue == s.Queue {
		errs = append(errs, &dispatcher.ConfigError{Field: "dead-letter-queue", Reason: "must differ from the consumed queue"})
	}
	if prefetch > 65535 {
		errs = append(errs, &dispatcher.ConfigError{Field: "concurrency", Reason: fmt.Sprintf("%d is over the AMQP prefetch limit of 65535", prefetch)})
	}
	return errors.Join(errs...)
}

// Open connects, declares the queues and consumes with manual acks.
func (s *source) Open(ctx context.Context, prefetch int, log *slog.Logger) (dispatcher.Session, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(s.ConnectionName)
	conn, err := amqp.DialConfig(s.URL, amqp.Config{Heartbeat: heartbeat, Properties: props, Dial: dialer(ctx)})
	if err != nil {
		return nil, classifyDial(err)
	}
	connClosed := conn.NotifyClose(make(chan *amqp.Error, 1))
	ch, err := s.openChannel(conn, prefetch)
	if err != nil {
		conn.Close()
		return nil, err
	}
	deliveries, err := ch.Consume(s.Queue, consumerTag, false, false, false, false, nil)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("consume queue %s: %w", s.Queue, err)
	}
	return &session{src: s, conn: conn, ch: ch, deliveries: deliveries, connClosed: connClosed,
		log: log, acker: newAcker(ch, log, prefetch)}, nil
}

// dialer is amqp.DefaultDial made cancellable, so a stop request does not wait out a connect
// to an unreachable broker.
func dialer(ctx context.Context) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{Timeout: connectTimeout}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		// Heartbeats start only after the handshake; amqp091 clears this deadline once open.
		if err := conn.SetDeadline(time.Now().Add(connectTimeout)); err != nil {
			conn.Close()
			return nil, err
		}
		return conn, nil
	}
}

// openChannel declares the queue and the dead-letter queue (durable; idempotent when the
// arguments match) and sets prefetch and publisher confirms.
func (s *source) openChannel(conn *amqp.Connection, prefetch int) (*amqp.Channel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	for _, q := range []struct {
		name string
		args amqp.Table
	}{{s.Queue, s.QueueArgs}, {s.DeadLetterQueue, nil}} {
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, q.args); err != nil {
			return nil, classifyDeclare(q.name, err)
		}
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return nil, fmt.Errorf("set prefetch %d: %w", prefetch, err)
	}
	if err := ch.Confirm(false); err != nil {
		return nil, fmt.Errorf("enable publisher confirms: %w", err)
	}
	return ch, nil
}

// QueueMismatchError: the queue exists with arguments other than the ones declared.
type QueueMismatchError struct {
	Queue    string
	Argument string // the first differing argument, as the broker names it
	Detail   string // the broker's text, with both values
}

func (e *QueueMismatchError) Error() string {
	return fmt.Sprintf("queue %q already exists with different arguments: %s; declare it the way its producers do (--queue-arg %s=<value>) or delete the queue",
		e.Queue, e.Detail, e.Argument)
}

var inequivalentArg = regexp.MustCompile(`inequivalent arg '([^']*)'`)

func classifyDeclare(queue string, err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		switch ae.Code {
		case amqp.PreconditionFailed:
			arg := "<name>"
			if m := inequivalentArg.FindStringSubmatch(ae.Reason); m != nil {
				arg = m[1]
			}
			mm := &QueueMismatchError{Queue: queue, Argument: arg, Detail: ae.Reason}
			return &dispatcher.ConfigError{Field: "queue-arg", Reason: mm.Error(), Err: mm}
		case amqp.AccessRefused:
			return &dispatcher.ConfigError{Field: "amqp-url", Reason: fmt.Sprintf("the broker user may not declare or read queue %q: %s", queue, ae.Reason), Err: err}
		}
	}
	return fmt.Errorf("declare queue %s: %w", queue, err)
}

func classifyDial(err error) error {
	var ae *amqp.Error
	if errors.Is(err, amqp.ErrCredentials) || errors.Is(err, amqp.ErrSASL) ||
		errors.As(err, &ae) && (ae.Code == amqp.AccessRefused || ae.Code == amqp.NotAllowed) {
		return &dispatcher.ConfigError{Field: "amqp-url", Reason: fmt.Sprintf("RabbitMQ refused the connection (check user, password and vhost): %v", err), Err: err}
	}
	return fmt.Errorf("connect to RabbitMQ: %w", err)
}

// ParseQueueArg parses one "key=value" queue argument. Integers become int64 and true/false
// booleans, as RabbitMQ expects for e.g. x-max-length and x-single-active-consumer; anything
// else stays a string (x-queue-type=quorum).
func ParseQueueArg(s string) (string, any, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return "", nil, &dispatcher.ConfigError{Field: "queue-arg", Reason: fmt.Sprintf("%q is not key=value (e.g. --queue-arg x-queue-type=quorum)", s)}
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return k, n, nil
	}
	if b, err := strconv.ParseBool(v); err == nil && (v == "true" || v == "false") {
		return k, b, nil
	}
	return k, v, nil
}
