package kind

import (
	"context"

	"github.com/spf13/pflag"

	"sless.dev/sless/dispatcher"
)

// Consumer is implemented by a kind whose messages `sless dispatcher` consumes from a broker
// (the args of its Cluster run that command in the operator's Jobs): the kind brings the
// source, the dispatcher everything else.
type Consumer interface {
	Dispatcher() DispatcherCommand
}

// DispatcherCommand is a kind's `sless dispatcher` command: its source's flags, beside the
// flags every consumer shares (function, target, retries, concurrency, ...), which
// cmd/sless binds.
type DispatcherCommand struct {
	// Use is the command's name under `sless dispatcher`; "" is `sless dispatcher` itself.
	Use, Short, Long string
	// Bind adds the source's flags to fs; the function it returns, called once they are
	// parsed, builds the source that cfg's dispatcher consumes.
	Bind func(fs *pflag.FlagSet) func(cfg dispatcher.Config) (dispatcher.Source, error)
}

// Firer is implemented by a kind whose dispatcher pods each make one invocation (cron: a
// CronJob pod per tick) instead of consuming a broker: a `sless dispatcher` subcommand of
// its own.
type Firer interface {
	FireCommand() FireCommand
}

// FireCommand is a kind's one-invocation command under `sless dispatcher`: its own flags,
// beside the flags it shares with the consumers (function, target, retries, timeout, ...),
// which cmd/sless binds.
type FireCommand struct {
	Use, Short, Long string
	// Bind adds the kind's flags to fs; the function it returns, called once they are
	// parsed, makes the invocation with cfg's function, trigger, retry policy, timeout,
	// invoker, recorder and logger (dispatcher.InvokeOnce).
	Bind func(fs *pflag.FlagSet) func(ctx context.Context, cfg dispatcher.Config) error
}
