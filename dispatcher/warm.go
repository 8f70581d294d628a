package dispatcher

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"sless.dev/sless/rules"
)

// Scheduled pre-warm: before a cron tick, whoever fires the trigger (the operator in a
// cluster, sless dev's runner) wakes the function through the path a caller's request
// takes — the interceptor, or the dev pool — with requests to the wrappers' health path,
// which never reach the handler, and keeps them coming until just after the tick, so the
// tick finds an instance up; afterwards the function scales down as after any traffic.

// warmInterval spaces the requests of a pre-warm at the least: within the shortest
// scale-down period a function may set (1 s).
const warmInterval = 500 * time.Millisecond

// WarmHold is how long each pre-warm request through KEDA's interceptor asks the wrappers to
// hold it (?hold_ms): longer than warmInterval, so one is always in flight — the
// interceptor's concurrency is a point-in-time count, and quick requests alone read as idle
// between them, letting KEDA scale a concurrency-scaled function away inside the window. An
// image that does not hold (not a sless wrapper) answers at once and is paced by warmInterval.
const WarmHold = time.Second

// NextTick is the first tick of schedule (read in timezone, "" UTC) after t.
func NextTick(schedule, timezone string, t time.Time) (time.Time, error) {
	sched, loc, err := rules.ScheduleIn(schedule, timezone)
	if err != nil {
		return time.Time{}, AsConfigError(err)
	}
	return sched.Next(t.In(loc)), nil
}

// Warm keeps the function behind url (Host host, "" the URL's own) up until until: a GET of
// its health path at once — which, for a function at zero, waits for the cold start — and
// then one after another, each held hold by the wrapper (at least warmInterval apart; 0: not
// held, for sless dev's pool, which keeps a process by its last use rather than a count). It returns when until passes or ctx ends.
func Warm(ctx context.Context, client *http.Client, url, host string, hold time.Duration, until time.Time, log *slog.Logger) {
	ctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	// Not sliding: the interval counts from each request's start, so the next one goes at
	// once after a held request.
	wait.NonSlidingUntilWithContext(ctx, func(ctx context.Context) {
		if err := warmOnce(ctx, client, url, host, hold); err != nil && ctx.Err() == nil {
			log.Warn("Warning: a pre-warm request failed; retrying", "host", host, "error", err)
		}
	}, warmInterval)
}

func warmOnce(ctx context.Context, client *http.Client, url, host string, hold time.Duration) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+rules.HealthPath+"?hold_ms="+strconv.Itoa(int(hold/time.Millisecond)), nil)
	if err != nil {
		return err
	}
	if host != "" {
		req.Host = host
	}
	req.Header.Set("User-Agent", "sless-prewarm")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health path answered %d", resp.StatusCode)
	}
	return nil
}
