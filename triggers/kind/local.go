package kind

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"sless.dev/sless/dispatcher"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/history"
)

// Local is implemented by a kind whose triggers `sless dev` runs (a kind that routes is
// served by the pool and runs nothing).
type Local interface {
	// LocalRunner is what sless dev runs for s, or why it cannot run yet (problem, shown
	// in the trigger's status). The runner is compared with == to the one running: a
	// change restarts it, so it must be comparable and hold everything it runs with.
	LocalRunner(s api.TriggerSpec, env LocalConfig) (r Runner, problem string)
}

// LocalConfig is what sless dev knows that a kind may run with.
type LocalConfig struct {
	// Secret is the value of key in the tenant's secret name; exists is false when there
	// is no such secret, err says which key is missing.
	Secret func(name, key string) (value []byte, exists bool, err error)
	// AMQPURL is the broker sless dev was started with (--amqp-url), if any.
	AMQPURL string
}

// Runner fires a trigger until ctx ends; an error before then stops it and is shown in the
// trigger's status.
type Runner interface {
	Run(ctx context.Context, env Env) error
}

// Env is what a running trigger calls through, in sless dev or anywhere a plane embeds
// the dispatcher.
type Env struct {
	Key      string // namespace/name of the trigger, for logs and connection names
	Trigger  string // its name, in the history and the headers
	Function dispatcher.FunctionRef
	// Host is the function's routing host; Client reaches its instances by it (pre-warms).
	Host    string
	Client  *http.Client
	Timeout time.Duration // per invocation: the function's timeout plus the margin
	Invoker dispatcher.Invoker
	// Recorder keeps the history (nil: none).
	Recorder history.Recorder
	Logger   *slog.Logger
	// Note records a finding on the trigger's status (a tick fired).
	Note func(func(*api.TriggerStatus))
}
