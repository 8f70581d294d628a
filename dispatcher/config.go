package dispatcher

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"sless.dev/sless/history"
)

// FunctionRef names the invoked function, written "namespace/name".
type FunctionRef struct {
	Namespace string
	Name      string
}

func (f FunctionRef) String() string { return f.Namespace + "/" + f.Name }

// ParseFunctionRef parses "namespace/name".
func ParseFunctionRef(s string) (FunctionRef, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return FunctionRef{}, &ConfigError{Field: "function", Reason: fmt.Sprintf("%q is not namespace/name (e.g. --function team-a/resize)", s)}
	}
	return FunctionRef{Namespace: ns, Name: name}, nil
}

// ParseQueueArg parses one "key=value" queue argument. Integers become int64 and true/false
// booleans, as RabbitMQ expects for e.g. x-max-length and x-single-active-consumer; anything
// else stays a string (x-queue-type=quorum).
func ParseQueueArg(s string) (string, any, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return "", nil, &ConfigError{Field: "queue-arg", Reason: fmt.Sprintf("%q is not key=value (e.g. --queue-arg x-queue-type=quorum)", s)}
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return k, n, nil
	}
	if b, err := strconv.ParseBool(v); err == nil && (v == "true" || v == "false") {
		return k, b, nil
	}
	return k, v, nil
}

// RetryPolicy bounds attempts of one invocation. The delay before attempt n+1 is
// Backoff·2^(n-1), capped at MaxBackoff.
type RetryPolicy struct {
	MaxAttempts int           // attempts including the first; default 3
	Backoff     time.Duration // default 1s
	MaxBackoff  time.Duration // default 1m
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 3
	}
	if p.Backoff <= 0 {
		p.Backoff = time.Second
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = time.Minute
	}
	return p
}

// delay is the wait after a failed attempt number `attempt` (1-based).
func (p RetryPolicy) delay(attempt int) time.Duration {
	d := p.Backoff
	for i := 1; i < attempt; i++ {
		if d > p.MaxBackoff/2 {
			return p.MaxBackoff
		}
		d *= 2
	}
	return min(d, p.MaxBackoff)
}

// Config is the event mode configuration; zero values take the documented defaults.
type Config struct {
	URL             string // AMQP URL, e.g. amqp://user:pass@rabbitmq:5672/vhost
	Queue           string
	DeadLetterQueue string     // default Queue + ".dlq"
	QueueArgs       amqp.Table // must match the producers' declaration of Queue
	Function        FunctionRef
	Trigger         string // trigger name, for history and headers
	Concurrency     int    // prefetch = concurrent invocations; default 4
	Retry           RetryPolicy
	Timeout         time.Duration // per invocation; default 5m
	MaxBodyBytes    int           // larger messages are dead-lettered; default 1 MiB

	ExitWhenEmpty bool          // exit once the queue stayed empty for IdleTimeout
	IdleTimeout   time.Duration // default 2s
	MaxMessages   int           // exit after this many messages were taken (0 = no limit)
	DrainTimeout  time.Duration // how long in-flight invocations may finish on stop; default 25s

	ConnectionName string // shown in the RabbitMQ management UI; default "sless-dispatcher <fn>"

	Invoker  Invoker
	Recorder history.Recorder // nil records nothing
	// Async, when set, makes this a consumer of asynchronous invocations (AsyncQueue): each
	// message replays its caller's request and keeps its record here up to date.
	Async history.AsyncStore
	// CallbackPrivateAddresses lets the callbacks of asynchronous invocations connect to
	// loopback, private, link-local and other non-public addresses a callback host name
	// resolves to (sless dev: receivers on the developer's machine). Off, such a connection is
	// refused unless the callback URL names that address itself, i.e. the operator allowed it
	// literally in --async-callback-hosts.
	CallbackPrivateAddresses bool
	Logger                   *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.DeadLetterQueue == "" {
		c.DeadLetterQueue = c.Queue + ".dlq"
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	c.Retry = c.Retry.withDefaults()
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Minute
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 2 * time.Second
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 25 * time.Second
	}
	if c.ConnectionName == "" {
		c.ConnectionName = "sless-dispatcher " + c.Function.String()
	}
	if c.Recorder == nil {
		c.Recorder = discard{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if _, err := amqp.ParseURI(c.URL); err != nil {
		errs = append(errs, &ConfigError{Field: "amqp-url", Reason: fmt.Sprintf("%v (e.g. amqp://guest:guest@127.0.0.1:5672/)", err)})
	}
	if c.Queue == "" {
		errs = append(errs, &ConfigError{Field: "queue", Reason: "must name the queue to consume"})
	}
	if c.DeadLetterQueue == c.Queue {
		errs = append(errs, &ConfigError{Field: "dead-letter-queue", Reason: "must differ from the consumed queue"})
	}
	if c.Function.Namespace == "" || c.Function.Name == "" {
		errs = append(errs, &ConfigError{Field: "function", Reason: "must be namespace/name"})
	}
	if c.Invoker == nil {
		errs = append(errs, &ConfigError{Field: "target-url", Reason: "no invoker configured"})
	}
	if c.Concurrency > 65535 {
		errs = append(errs, &ConfigError{Field: "concurrency", Reason: fmt.Sprintf("%d is over the AMQP prefetch limit of 65535", c.Concurrency)})
	}
	if c.MaxMessages < 0 {
		errs = append(errs, &ConfigError{Field: "max-messages", Reason: "must not be negative"})
	}
	return errors.Join(errs...)
}

// ConfigError is a bad setting (or a broker refusing it); retrying cannot help, so Run returns
// it instead of reconnecting and the command exits with a usage code.
type ConfigError struct {
	Field  string
	Reason string
	Err    error // the underlying cause, if any
}

func (e *ConfigError) Error() string { return fmt.Sprintf("invalid --%s: %s", e.Field, e.Reason) }
func (e *ConfigError) Unwrap() error { return e.Err }

type discard struct{}

func (discard) Record(history.Record) {}
