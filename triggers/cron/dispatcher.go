package cron

import (
	"context"

	"github.com/spf13/pflag"

	"sless.dev/sless/dispatcher"
	"sless.dev/sless/triggers/kind"
)

var _ kind.Firer = Kind{}

// fireCommand is the `sless dispatcher` subcommand a cron trigger's CronJob runs.
const fireCommand = "fire"

// FireCommand is `sless dispatcher fire`: one firing for the current tick of --schedule.
func (Kind) FireCommand() kind.FireCommand {
	return kind.FireCommand{
		Use:   fireCommand,
		Short: "Invoke a function once for the current cron tick (run by a cron trigger's CronJob)",
		Long: `Posts {"type":"cron","schedule":...,"timezone":...,"scheduledTime":...} to the function, where
scheduledTime is the latest tick of --schedule at or before now, retrying per --max-attempts.
Every flag can also be set as SLESS_<FLAG>.
Exit codes: 0 the function succeeded, 2 configuration, 3 the function failed on every attempt.`,
		Bind: func(fs *pflag.FlagSet) func(context.Context, dispatcher.Config) error {
			var schedule, timezone string
			fs.StringVar(&schedule, "schedule", "", "cron schedule of the trigger, e.g. \"*/5 * * * *\" (required)")
			fs.StringVar(&timezone, "timezone", "", "IANA time zone the schedule is read in (default UTC)")
			return func(ctx context.Context, cfg dispatcher.Config) error {
				return Fire(ctx, FireConfig{
					Function: cfg.Function, Trigger: cfg.Trigger, Schedule: schedule, Timezone: timezone,
					Retry: cfg.Retry, Timeout: cfg.Timeout, Invoker: cfg.Invoker, Recorder: cfg.Recorder, Logger: cfg.Logger,
				})
			}
		},
	}
}
