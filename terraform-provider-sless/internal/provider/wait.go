package provider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/client"
)

// pollInterval is how often waits ask the API; local builds finish in seconds, so a short
// interval keeps `terraform apply` from idling.
const pollInterval = 300 * time.Millisecond

// TimeoutError is a wait that ran out of time; Last describes the last observed state.
type TimeoutError struct {
	What, Last, Setting string
	After               time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("%s did not finish within %s (last seen: %s); raise %s if this is expected", e.What, e.After, e.Last, e.Setting)
}

// poll calls check until it reports done, returns an error, or timeout passes (then
// context.DeadlineExceeded with ctx still live); last names the last state for the timeout
// error.
func poll(ctx context.Context, timeout time.Duration, check func() (done bool, last string, err error)) (string, error) {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	deadline := time.Now().Add(timeout)
	for {
		done, last, err := check()
		switch {
		case done || err != nil:
			return last, err
		case time.Now().After(deadline):
			return last, context.DeadlineExceeded
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-t.C:
		}
	}
}

// pollObject reads the object name of rm into *obj until check reports it done, returns an
// error, or timeout passes; a failed read leaves *obj as it was.
func pollObject[O any](ctx context.Context, c *apiClient, rm remote[O], name string, obj *O, timeout time.Duration, check func(O) (done bool, last string, err error)) (string, error) {
	return poll(ctx, timeout, func() (bool, string, error) {
		got, err := rm.get(c.Client, ctx, c.namespace, name)
		if err != nil {
			return false, "", fmt.Errorf("read %s %s: %w", rm.kind, name, err)
		}
		*obj = got
		return check(got)
	})
}

// timedOut reports whether err is a poll's own timeout rather than ctx ending.
func timedOut(ctx context.Context, err error) bool {
	return errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
}

// waitFunctionReady waits until the function's latest configuration is Ready, or its build
// failed (a *client.BuildError), or timeout passes (a *TimeoutError), not counting the time
// the operator holds the build back for a slot. prev is the status seen right after the
// change was sent (see client.NewFailure).
func waitFunctionReady(ctx context.Context, c *apiClient, name string, prev api.FunctionStatus, timeout time.Duration) (api.Function, error) {
	fn, err := c.WaitReady(ctx, c.namespace, name, prev, client.WaitOptions{Timeout: timeout, Interval: pollInterval})
	var buildErr *client.BuildError
	switch {
	case errors.As(err, &buildErr):
	case timedOut(ctx, err):
		last := fn.Status.Phase
		if fn.Status.Message != "" {
			last += ": " + fn.Status.Message
		}
		return fn, &TimeoutError{What: "build of function " + name, Last: last, Setting: "build_timeout_sec", After: timeout}
	case err != nil && ctx.Err() == nil:
		return fn, fmt.Errorf("read %s %s: %w", functionRemote.kind, name, err)
	}
	return fn, err
}

// waitJob waits until the job's run runID ended (Succeeded or Failed; Skipped for run 0).
func waitJob(ctx context.Context, c *apiClient, name string, runID int64, timeout time.Duration) (api.Job, error) {
	var j api.Job
	last, err := pollObject(ctx, c, jobRemote, name, &j, timeout, func(j api.Job) (bool, string, error) {
		return client.RunDone(j, runID), fmt.Sprintf("run %d %s", j.Status.ObservedRunID, j.Status.Phase), nil
	})
	if timedOut(ctx, err) {
		return j, &TimeoutError{What: fmt.Sprintf("run %d of job %s", runID, name), Last: last, Setting: "wait_timeout_sec", After: timeout}
	}
	return j, err
}

// deleteTimeout bounds the wait for an object to disappear after DELETE (the cluster
// backend removes owned objects through finalizers first).
const deleteTimeout = 2 * time.Minute

// waitGone calls get until it answers 404.
func waitGone(ctx context.Context, what string, get func() error) error {
	_, err := poll(ctx, deleteTimeout, func() (bool, string, error) {
		err := get()
		switch {
		case client.IsNotFound(err):
			return true, "", nil
		case err != nil:
			return false, "", err
		}
		return false, "still present", nil
	})
	if timedOut(ctx, err) {
		return fmt.Errorf("%s still exists %s after DELETE", what, deleteTimeout)
	}
	return err
}

// triggerSettleTimeout bounds the wait for a trigger's status after a change. The status is
// informational (the trigger proceeds by itself once its function is Ready), so running out
// of time records what was seen instead of failing.
const triggerSettleTimeout = 5 * time.Second

// triggerSettled reports whether cur reflects a spec with the given enabled flag, prev being
// the status before the change. The API has no observed generation for triggers, so this
// reads the status itself: a disabled trigger is inactive with a reason; an enabled one is
// active, or gives a new reason why not (e.g. its function is not Ready).
func triggerSettled(enabled bool, prev, cur api.TriggerStatus) bool {
	if !enabled {
		return !cur.Active && cur.Message != ""
	}
	return cur.Active || cur.Message != "" && cur.Message != prev.Message
}

// waitTriggerSettled polls the trigger until triggerSettled or the settle timeout, and
// returns the last trigger read.
func waitTriggerSettled(ctx context.Context, c *apiClient, t api.Trigger, prev api.TriggerStatus) (api.Trigger, error) {
	_, err := pollObject(ctx, c, triggerRemote, t.Name, &t, triggerSettleTimeout, func(t api.Trigger) (bool, string, error) {
		return triggerSettled(t.Enabled, prev, t.Status), "", nil
	})
	if timedOut(ctx, err) {
		return t, nil
	}
	return t, err
}
