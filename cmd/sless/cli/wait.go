package cli

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// pollInterval is how often a wait asks the API; local builds and runs take seconds, so a
// short interval keeps the CLI from idling after them.
const pollInterval = 250 * time.Millisecond

// poll calls check every pollInterval until it reports done or an error, or ctx ends (its
// error is returned). check should answer (false, nil) for a read that failed because ctx
// ended.
func poll(ctx context.Context, check func() (bool, error)) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		done, err := check()
		if done || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// waitError words the end of a wait for what: out of time, or given up (Ctrl-C) while the
// work goes on on the server; see is the command that shows how it went.
func waitError(err error, what string, timeout time.Duration, last, see string) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s did not finish within %s (last seen: %s); raise --wait-timeout, or see `%s`", what, timeout, last, see)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("stopped waiting for %s; it goes on: `%s` shows how it went", what, see)
	}
	return err
}
