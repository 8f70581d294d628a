package kind

import (
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
