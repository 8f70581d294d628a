package cron

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"
	_ "time/tzdata" // --timezone must work in minimal images without /usr/share/zoneinfo

	robfig "github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/attribute"

	"sless.dev/sless/dispatcher"
	"sless.dev/sless/history"
	"sless.dev/sless/rules"
)

// FireConfig is one cron firing (what a Kubernetes CronJob runs at each tick).
type FireConfig struct {
	Function dispatcher.FunctionRef
	Trigger  string
	Schedule string    // standard 5-field cron or a descriptor such as @hourly
	Timezone string    // IANA name the schedule is read in; default UTC
	Now      time.Time // when the tick fired; default time.Now()
	Retry    dispatcher.RetryPolicy
	Timeout  time.Duration // per attempt; default 5m
	Invoker  dispatcher.Invoker
	Recorder history.Recorder
	Logger   *slog.Logger
}

// Event is the event a cron-fired function receives.
type Event struct {
	Type          string `json:"type"` // always "cron"
	Schedule      string `json:"schedule"`
	Timezone      string `json:"timezone"`
	ScheduledTime string `json:"scheduledTime"` // RFC 3339, the tick the firing belongs to
	Trigger       string `json:"trigger,omitempty"`
}

// scheduleLookback bounds the search for the tick a late start belongs to.
const scheduleLookback = 24 * time.Hour

// Fire invokes the function once for the current tick of cfg.Schedule, retrying per
// cfg.Retry (dispatcher.InvokeOnce). It returns a *dispatcher.ConfigError for bad settings
// and a *dispatcher.InvocationError when all attempts failed; each attempt is recorded with
// kind cron.
func Fire(ctx context.Context, cfg FireConfig) error {
	if cfg.Now.IsZero() {
		cfg.Now = time.Now()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ev, err := NewEvent(cfg.Schedule, cfg.Timezone, cfg.Now)
	if err != nil {
		return err
	}
	ev.Trigger = cfg.Trigger
	body, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode cron event: %w", err)
	}
	return dispatcher.InvokeOnce(ctx, dispatcher.Config{
		Function: cfg.Function, Trigger: cfg.Trigger, Retry: cfg.Retry, Timeout: cfg.Timeout, Invoker: cfg.Invoker, Recorder: cfg.Recorder,
		Logger: cfg.Logger.With("function", cfg.Function.String(), "scheduledTime", ev.ScheduledTime),
	}, history.KindCron, func(attempt int) dispatcher.Call {
		return dispatcher.Call{Body: body, Header: header(ev, attempt)}
	}, attribute.String("sless.cron.schedule", ev.Schedule), attribute.String("sless.cron.scheduled_time", ev.ScheduledTime))
}

// NewEvent builds the event for the latest tick of schedule at or before now, read in
// timezone (UTC when empty). A process started a little after its tick (a CronJob pod) still
// reports the exact tick.
func NewEvent(schedule, timezone string, now time.Time) (Event, error) {
	sched, loc, err := parse(schedule, timezone)
	if err != nil {
		return Event{}, err
	}
	tick := lastTick(sched, now.In(loc))
	return Event{Type: "cron", Schedule: schedule, Timezone: loc.String(), ScheduledTime: tick.Format(time.RFC3339)}, nil
}

// parse reads schedule in timezone (UTC when empty), as every firing does.
func parse(schedule, timezone string) (robfig.Schedule, *time.Location, error) {
	sched, loc, err := rules.ScheduleIn(schedule, timezone)
	if err != nil {
		return nil, nil, dispatcher.AsConfigError(err)
	}
	return sched, loc, nil
}

func lastTick(s robfig.Schedule, now time.Time) time.Time {
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

func header(ev Event, attempt int) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Sless-Trigger-Kind", "cron")
	h.Set("X-Sless-Attempt", strconv.Itoa(attempt))
	h.Set("X-Sless-Schedule", dispatcher.CleanValue(ev.Schedule))
	h.Set("X-Sless-Scheduled-Time", ev.ScheduledTime)
	if ev.Trigger != "" {
		h.Set("X-Sless-Trigger", dispatcher.CleanValue(ev.Trigger))
	}
	return h
}
