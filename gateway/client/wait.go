package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"sless.dev/sless/gateway/api"
)

// DefaultWaitInterval is how often WaitReady reads the function unless told otherwise; local
// builds finish in seconds, so a short interval keeps the caller from idling after them.
const DefaultWaitInterval = 250 * time.Millisecond

// WaitOptions bound and report a WaitReady.
type WaitOptions struct {
	// Timeout bounds the wait, not counting the time the operator holds the build back for a
	// slot (HeldForBuildSlot): that is the cluster's queue, not the build's.
	Timeout time.Duration
	// Interval between reads; 0 is DefaultWaitInterval.
	Interval time.Duration
	// Progress, when set, is called with every function read; done says the wait ends with
	// it (Ready, or a new failure).
	Progress func(fn api.Function, done bool)
}

// BuildError is a function whose build failed; Output is the build log the server kept
// (compiler messages), else the status message.
type BuildError struct {
	Function, Output string
}

func (e *BuildError) Error() string {
	return fmt.Sprintf("function %s failed to build:\n%s", e.Function, e.Output)
}

// WaitReady reads the function until it is Ready for the change just sent, and returns the
// last function read with: nil when Ready; a *BuildError when its build failed after prev
// (the status the change was answered with, see NewFailure); context.DeadlineExceeded when
// o.Timeout passed (a read that hangs ends then too); ctx's error when ctx ended first; or
// the error of a read the API refused.
func (c *Client) WaitReady(ctx context.Context, ns, name string, prev api.FunctionStatus, o WaitOptions) (api.Function, error) {
	interval := o.Interval
	if interval == 0 {
		interval = DefaultWaitInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var fn api.Function
	deadline, seen := time.Now().Add(o.Timeout), time.Now()
	for {
		read, cancel := context.WithDeadline(ctx, deadline)
		got, err := c.GetFunction(read, ns, name)
		cancel()
		switch {
		case ctx.Err() != nil:
			return fn, ctx.Err()
		case errors.Is(read.Err(), context.DeadlineExceeded):
			return fn, context.DeadlineExceeded
		case err != nil:
			return fn, err
		}
		fn = got
		if now := time.Now(); HeldForBuildSlot(fn.Status) {
			deadline, seen = deadline.Add(now.Sub(seen)), now
		} else {
			seen = now
		}
		ready, failed := fn.Status.Ready, NewFailure(prev, fn.Status)
		if o.Progress != nil {
			o.Progress(fn, ready || failed)
		}
		switch {
		case failed:
			return fn, &BuildError{Function: name, Output: cmp.Or(fn.Status.LastBuildError, fn.Status.Message)}
		case ready:
			return fn, nil
		case time.Now().After(deadline):
			return fn, context.DeadlineExceeded
		}
		if fn.Status.Phase != api.PhaseFailed {
			prev = fn.Status // a later Failed is a new one
		}
		select {
		case <-ctx.Done():
			return fn, ctx.Err()
		case <-t.C:
		}
	}
}
