package dispatcher

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"sless.dev/sless/history"
	"sless.dev/sless/rules"
)

// FunctionRef names the invoked function, written "namespace/name", with the memory of its
// instances (MiB) its invocations are recorded with for usage (0: not known).
type FunctionRef struct {
	Namespace string
	Name      string
	MemoryMB  int32
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

// Config is the event mode configuration, whatever the Source (AsyncRunner and InvokeOnce
// read the function's part of it); zero values take the documented defaults.
type Config struct {
	Function     FunctionRef
	Trigger      string // trigger name, for history and headers
	Concurrency  int    // prefetch = concurrent invocations; default 4
	Retry        RetryPolicy
	Timeout      time.Duration // per invocation; default 5m
	MaxBodyBytes int           // larger messages are dead-lettered; default 1 MiB

	ExitWhenEmpty bool          // exit once the queue stayed empty for IdleTimeout
	IdleTimeout   time.Duration // default 2s
	MaxMessages   int           // exit after this many messages were taken (0 = no limit)
	DrainTimeout  time.Duration // how long in-flight invocations may finish on stop; default 25s

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
	if c.Function.Namespace == "" || c.Function.Name == "" {
		errs = append(errs, &ConfigError{Field: "function", Reason: "must be namespace/name"})
	}
	if c.Invoker == nil {
		errs = append(errs, &ConfigError{Field: "target-url", Reason: "no invoker configured"})
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

// AsConfigError is a rule's refusal of a flag (a *rules.FieldError naming it) as the
// command's ConfigError; any other error is returned as it is.
func AsConfigError(err error) error {
	if fe, ok := err.(*rules.FieldError); ok {
		return &ConfigError{Field: fe.Field, Reason: fe.Reason, Err: err}
	}
	return err
}

type discard struct{}

func (discard) Record(history.Record) {}
