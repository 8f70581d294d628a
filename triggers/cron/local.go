package cron

import (
	"context"
	"time"

	"sless.dev/sless/dispatcher"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
	"sless.dev/sless/triggers/kind"
)

// runner fires at every tick of a schedule in its time zone.
type runner struct {
	Schedule, Timezone string
	PrewarmSeconds     int32
}

func (Kind) LocalRunner(s api.TriggerSpec, _ kind.LocalConfig) (kind.Runner, string) {
	return runner{Schedule: s.Schedule, Timezone: s.Timezone, PrewarmSeconds: s.PrewarmSeconds}, ""
}

// Run fires at every tick, having woken the function prewarm_seconds before when asked. A
// tick that comes while the previous firing still runs is skipped (the cluster CronJob's
// Forbid policy).
func (r runner) Run(ctx context.Context, env kind.Env) error {
	sched, loc, err := parse(r.Schedule, r.Timezone)
	if err != nil {
		return err
	}
	for {
		next := sched.Next(time.Now().In(loc))
		if r.PrewarmSeconds > 0 {
			from, until := rules.PrewarmWindow(next, time.Duration(r.PrewarmSeconds)*time.Second)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Until(from)):
			}
			go dispatcher.Warm(ctx, env.Client, "http://"+env.Host, "", 0, until, env.Logger.With("trigger", env.Key))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(next)):
		}
		err := Fire(ctx, FireConfig{
			Function: env.Function, Trigger: env.Trigger, Schedule: r.Schedule, Timezone: r.Timezone, Now: next,
			Timeout: env.Timeout, Invoker: env.Invoker, Recorder: env.Recorder, Logger: env.Logger,
		})
		if err != nil && ctx.Err() == nil {
			env.Logger.Warn("Warning: cron firing failed", "trigger", env.Key, "tick", next, "error", err)
		}
		fired := next.UTC()
		env.Note(func(st *api.TriggerStatus) { st.LastFireTime = &fired })
	}
}
