package dispatcher

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/robfig/cron/v3"

	"sless.dev/sless/rules"
)

// Scheduled pre-warm: before a cron tick, whoever fires the trigger (the operator in a
// cluster, sless dev's runner) wakes the function through the path a caller's request
// takes — the interceptor, or the dev pool — with requests to the wrappers' health path,
// which never reach the handler, and keeps them coming until just after the tick, so the
// tick finds an instance up; afterwards the function scales down as after any traffic.

// warmInterval spaces the requests of a pre-warm: within the shortest scale-down period a
// function may set (1 s).
const warmInterval = 500 * time.Millisecond

// NextTick is the first tick of schedule (read in timezone, "" UTC) after t.
func NextTick(schedule, timezone string, t time.Time) (time.Time, error) {
	sched, err := cron.ParseStandard(schedule)
	if err != nil {
		return time.Time{}, &ConfigError{Field: "schedule", Reason: err.Error(), Err: err}
	}
	loc := time.UTC
	if timezone != "" {
		if loc, err = time.LoadLocation(timezone); err != nil {
			return time.Time{}, &ConfigError{Field: "timezone", Reason: err.Error(), Err: err}
		}
	}
	return sched.Next(t.In(loc)), nil
}

// Warm keeps the function behind url (Host host, "" the URL's own) up until until: a GET of
// its health path at once — which, for a function at zero, waits for the cold start — and
// then every warmInterval. It returns when until passes or ctx ends.
func Warm(ctx context.Context, client *http.Client, url, host string, until time.Time, log *slog.Logger) {
	ctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	for {
		if err := warmOnce(ctx, client, url, host); err != nil && ctx.Err() == nil {
			log.Warn("Warning: a pre-warm request failed; retrying", "host", host, "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(warmInterval):
		}
	}
}

func warmOnce(ctx context.Context, client *http.Client, url, host string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+rules.HealthPath, nil)
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
