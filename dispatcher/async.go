package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"sless.dev/sless/history"
)

// Asynchronous invocations travel as messages of the queue rules.AsyncQueue(ns, fn): the body is
// the caller's, the attributes (AsyncAttributes) carry the invocation's ID and the request to
// replay. A dispatcher with Config.Async consumes them like event messages — retries with
// backoff, then the dead-letter queue — and keeps the invocation's record up to date.

const (
	headerInvocation = "x-sless-invocation-id"
	headerRequest    = "x-sless-request"
)

// asyncRequest is what headerRequest holds.
type asyncRequest struct {
	Method string              `json:"method"`
	Path   string              `json:"path"`
	Query  string              `json:"query,omitempty"`
	Header map[string][]string `json:"header,omitempty"`
}

// AsyncAttributes are the attributes of the message of invocation id replaying req: the ID
// and the request, which the dispatcher reads back from each delivery.
func AsyncAttributes(id string, req history.AsyncRequest) (map[string]string, error) {
	meta, err := json.Marshal(asyncRequest{Method: req.Method, Path: req.Path, Query: req.RawQuery, Header: req.Header})
	if err != nil {
		return nil, fmt.Errorf("encode asynchronous request: %w", err)
	}
	return map[string]string{headerInvocation: id, headerRequest: string(meta)}, nil
}

// asyncCall reads the invocation ID and the request to replay from m.
func asyncCall(m Delivery) (string, Call, error) {
	id, raw := m.Attribute(headerInvocation), m.Attribute(headerRequest)
	var req asyncRequest
	if !history.ValidAsyncID(id) || json.Unmarshal([]byte(raw), &req) != nil || req.Method == "" || !validPath(req.Path) {
		return "", Call{}, &PoisonError{Reason: "not an asynchronous invocation of sless (no or bad " + headerInvocation + " / " + headerRequest + " headers)"}
	}
	return id, Call{Method: req.Method, Path: req.Path, RawQuery: req.Query, Header: http.Header(req.Header).Clone(), Body: m.Body(), KeepBody: true}, nil
}

// validPath reports an escaped path below the function's root.
func validPath(p string) bool {
	_, err := url.PathUnescape(p)
	return err == nil && strings.HasPrefix(p, "/")
}

// noteAsync applies change to invocation id's record, retrying briefly: a record that
// stays behind its message would lie. It reports whether the record was written.
func (d *dispatcher) noteAsync(ctx context.Context, id string, change func(*history.AsyncInvocation)) (history.AsyncInvocation, bool) {
	var err error
	for attempt := range 3 {
		var inv history.AsyncInvocation
		inv, err = d.cfg.Async.UpdateAsync(ctx, d.cfg.Function.Namespace, id, change)
		if err == nil {
			return inv, true
		}
		if errors.Is(err, history.ErrAsyncNotFound) {
			break
		}
		select {
		case <-time.After(time.Duration(attempt+1) * 200 * time.Millisecond):
		case <-ctx.Done():
			return inv, false
		}
	}
	d.log.Warn("Warning: the asynchronous invocation's record could not be written", "invocation", id, "error", err)
	return history.AsyncInvocation{}, false
}

// startAsync marks invocation id as running attempt; done reports an invocation already
// final (a duplicate message, or a retried publish of a call that ran): skip it.
func (d *dispatcher) startAsync(ctx context.Context, id string, attempt int) (done, ok bool) {
	_, ok = d.noteAsync(ctx, id, func(inv *history.AsyncInvocation) {
		if done = inv.Final(); !done {
			inv.Status, inv.Attempts = history.AsyncRunning, attempt
		}
	})
	return done, ok
}

// settleAsync writes an invocation's final outcome and, when it asked, calls back.
func (d *dispatcher) settleAsync(ctx context.Context, id string, change func(*history.AsyncInvocation)) bool {
	inv, ok := d.noteAsync(ctx, id, change)
	if ok && inv.CallbackURL != "" {
		d.callbacks.Add(1)
		d.pending.Add(1)
		go func() {
			defer d.callbacks.Done()
			defer d.pending.Add(-1)
			d.callBack(inv)
		}()
	}
	return ok
}

// AsyncRunner makes attempts of one function's asynchronous invocations without a broker —
// sless dev's durable queue in its data dir — with the calls, records, history and
// callbacks of the broker path. The caller keeps the queue and waits the returned delays.
type AsyncRunner struct{ d *dispatcher }

// NewAsyncRunner takes cfg's Function, Trigger, Retry, Timeout, Invoker, Recorder, Async and
// Logger; the broker fields are not used.
func NewAsyncRunner(cfg Config) (*AsyncRunner, error) {
	cfg = cfg.withDefaults()
	if cfg.Async == nil || cfg.Invoker == nil || cfg.Function.Namespace == "" || cfg.Function.Name == "" {
		return nil, &ConfigError{Field: "async", Reason: "an asynchronous runner needs the function, an invoker and a store"}
	}
	d := &dispatcher{cfg: cfg, log: cfg.Logger.With("function", cfg.Function.String())}
	d.call = cfg.call(history.KindAsync)
	return &AsyncRunner{d: d}, nil
}

// Wait returns once the callbacks of the invocations settled so far were delivered or gave
// up (each within 2 × 10 s); call it before the process exits.
func (r *AsyncRunner) Wait() { r.d.waitCallbacks() }

// Attempt makes attempt number attempt (1-based) of invocation id replaying req. It returns
// the attempt due next and when, or next 0 once the outcome is recorded as final. A store
// that cannot be written, or a ctx ended mid-attempt, leaves the same attempt due again.
func (r *AsyncRunner) Attempt(ctx context.Context, id string, req history.AsyncRequest, attempt int) (next int, retryIn time.Duration) {
	d := r.d
	ctx, span := tracer.Start(ctx, "dispatcher.async "+d.cfg.Function.String())
	defer span.End()
	settled := func(ok bool) (int, time.Duration) {
		if ok {
			return 0, 0
		}
		return attempt, time.Second // run it again rather than leave a record that says otherwise
	}
	if attempt > d.cfg.Retry.MaxAttempts { // the policy was lowered since it was queued
		return settled(d.settleAsync(ctx, id, failed(attempt-1, fmt.Errorf("attempt %d exceeds the function's %d attempts", attempt, d.cfg.Retry.MaxAttempts))))
	}
	c := Call{Method: req.Method, Path: req.Path, RawQuery: req.RawQuery, Header: http.Header(req.Header).Clone(), Body: req.Body, KeepBody: true}
	if c.Header == nil {
		c.Header = http.Header{}
	}
	c.Header.Set("X-Sless-Attempt", strconv.Itoa(attempt))
	switch done, ok := d.startAsync(ctx, id, attempt); {
	case !ok:
		return attempt, time.Second
	case done:
		return 0, 0
	}
	res, err := d.call.run(ctx, c)
	switch {
	case err == nil:
		return settled(d.settleAsync(ctx, id, succeeded(res)))
	case ctx.Err() != nil:
		d.noteAsync(context.WithoutCancel(ctx), id, func(inv *history.AsyncInvocation) { inv.Status, inv.Attempts = history.AsyncQueued, attempt-1 })
		return attempt, 0
	case attempt < d.cfg.Retry.MaxAttempts:
		d.noteAsync(ctx, id, func(inv *history.AsyncInvocation) {
			inv.Status, inv.HTTPStatus, inv.Error = history.AsyncQueued, res.Status, err.Error()
		})
		return attempt + 1, d.cfg.Retry.delay(attempt)
	}
	return settled(d.settleAsync(ctx, id, func(inv *history.AsyncInvocation) { failed(attempt, err)(inv); inv.HTTPStatus = res.Status }))
}
