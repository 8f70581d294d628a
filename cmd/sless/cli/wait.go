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
