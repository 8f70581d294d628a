package dispatcher

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"
	_ "time/tzdata" // --timezone must work in minimal images without /usr/share/zoneinfo

	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/attribute"

	"sless.dev/sless/history"
	"sless.dev/sless/rules"
)

// FireConfig is one cron firing (what a Kubernetes CronJob runs at each tick).
type FireConfig struct {
	Function FunctionRef
	Trigger  string
	Schedule string    // standard 5-field cron or a descriptor such as @hourly
	Timezone string    // IANA name the schedule is read in; default UTC
	Now      time.Time // when the tick fired; default time.Now()
	Retry    RetryPolicy
	Timeout  time.Duration // per attempt; default 5m
	Invoker  Invoker
	Recorder history.Recorder
	Logger   *slog.Logger
}

// CronEvent is the event a cron-fired function receives.
type CronEvent struct {
	Type          string `json:"type"` // always "cron"
	Schedule      string `json:"schedule"`
	Timezone      string `json:"timezone"`
	ScheduledTime string `json:"scheduledTime"` // RFC 3339, the tick the firing belongs to
	Trigger       string `json:"trigger,omitempty"`
}

// scheduleLookback bounds the search for the tick a late start belongs to.
const scheduleLookback = 24 * time.Hour

// Fire invokes the function once for the current tick of cfg.Schedule, retrying per
// cfg.Retry (InvokeOnce). It returns a *ConfigError for bad settings and an
// *InvocationError when all attempts failed; each attempt is recorded with kind cron.
func Fire(ctx context.Context, cfg FireConfig) error {
	if cfg.Now.IsZero() {
		cfg.Now = time.Now()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ev, err := NewCronEvent(cfg.Schedule, cfg.Timezone, cfg.Now)
	if err != nil {
		return err
	}
	ev.Trigger = cfg.Trigger
	body, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode cron event: %w", err)
	}
	return InvokeOnce(ctx, Config{
		Function: cfg.Function, Trigger: cfg.Trigger, Retry: cfg.Retry, Timeout: cfg.Timeout, Invoker: cfg.Invoker, Recorder: cfg.Recorder,
		Logger: cfg.Logger.With("function", cfg.Function.String(), "scheduledTime", ev.ScheduledTime),
	}, history.KindCron, func(attempt int) Call {
		return Call{Body: body, Header: cronHeader(ev, attempt)}
	}, attribute.String("sless.cron.schedule", ev.Schedule), attribute.String("sless.cron.scheduled_time", ev.ScheduledTime))
}

// NewCronEvent builds the event for the latest tick of schedule at or before now, read in
// timezone (UTC when empty). A process started a little after its tick (a CronJob pod) still
// reports the exact tick.
func NewCronEvent(schedule, timezone string, now time.Time) (CronEvent, error) {
	loc := time.UTC
	if timezone != "" {
		l, err := time.LoadLocation(timezone)
		if err != nil {
			return CronEvent{}, &ConfigError{Field: "timezone", Reason: fmt.Sprintf("%q is not an IANA time zone (e.g. Europe/Berlin): %v", timezone, err)}
		}
		loc = l
	}
	sched, err := rules.ParseSchedule(schedule)
	if err != nil {
		return CronEvent{}, &ConfigError{Field: "schedule", Reason: err.Error()}
	}
	tick := lastTick(sched, now.In(loc))
	return CronEvent{Type: "cron", Schedule: schedule, Timezone: loc.String(), ScheduledTime: tick.Format(time.RFC3339)}, nil
}

func lastTick(s cron.Schedule, now time.Time) time.Time {
	t := s.Next(now.Add(-scheduleLookback))
	if t.IsZero() || t.After(now) {
		return now.Truncate(time.Second)
	}
	for {
		n := s.Next(t)
		if n.IsZero() || n.After(now) {
			return t
		}
		t = n
	}
}

func cronHeader(ev CronEvent, attempt int) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Sless-Trigger-Kind", "cron")
	h.Set("X-Sless-Attempt", strconv.Itoa(attempt))
	h.Set("X-Sless-Schedule", CleanValue(ev.Schedule))
	h.Set("X-Sless-Scheduled-Time", ev.ScheduledTime)
	if ev.Trigger != "" {
		h.Set("X-Sless-Trigger", CleanValue(ev.Trigger))
	}
	return h
}
